"""File sink provider for development: one RFC 5322 `.eml` file per email."""

from __future__ import annotations

import errno
import os
import stat
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from reminder_core.errors import ConfigurationError, TransientDeliveryError
from reminder_core.paths import broken_symlink, unusable_directory
from sender.providers.base import OutgoingEmail, SendReceipt
from sender.providers.mime import MIME_POLICY, build_mime, message_id

#: Where Linux shows a process's open files by number: an `O_TMPFILE` file is linked
#: into the directory through it (open(2), "O_TMPFILE").
_PROC_FD = "/proc/self/fd"

#: errno of an `O_TMPFILE` open on a filesystem (or kernel) without it (open(2)).
_NO_TMPFILE = frozenset({errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL})

#: errno of linking an `O_TMPFILE` file through /proc/self/fd where that cannot work
#: (linkat(2)): EXDEV (not the same mount), EPERM (no hard links on this filesystem),
#: EINVAL (no AT_SYMLINK_FOLLOW in this kernel), EOPNOTSUPP (a filesystem without the
#: operation). ENOENT (no such /proc entry) counts only while the directory is still in
#: place: a removed directory answers it too. Never EEXIST: that is a repeat of the key.
_NO_PROC_LINK = frozenset({errno.EXDEV, errno.EPERM, errno.EINVAL, errno.EOPNOTSUPP})

#: Prefix and suffix of the fallback's temporary files (not `*.eml`: a reader that globs
#: the emails must not see one being written).
_TEMPORARY = (".tmp-", ".part")

#: A fallback temporary file older than this (seconds) was left by a process that died.
STALE_TEMPORARY_S = 600.0

#: Longest file name most filesystems take (bytes): NAME_MAX.
_NAME_MAX = 255


class FileSinkProvider:
    """Writes `<directory>/<idempotency_key>.eml`; accepts each key once, like a real
    provider honouring an idempotency key (a repeat returns the first receipt).

    The message is `build_mime`'s: Message-ID "<idempotency_key@reminders>" and
    `X-Entity-Ref-ID` carrying the key, so a resend is recognisably the same message.

    The file appears whole, under its name, once: it is written without a name (Linux
    `O_TMPFILE`; elsewhere, or where linking it through /proc is refused, under a
    temporary `.tmp-*.part` name, outside `*.eml`),
    fsynced, hard-linked into place, and the directory fsynced: the content is on disk
    before the name can be (a name committed first would survive a power loss as an
    empty email, which a retry would then take for the one sent; found by a trial on a
    copied ext4 image), and the name is on disk before `send` returns, so before the
    delivery row says `sent`. A reader never sees half an email, and two concurrent sends
    of one key make one file.

    Without a name the file costs no directory entry to create and remove: from 8
    threads, more sends per second and a third less system CPU per send than under a
    temporary name (docs/performance.md, "The file sink"). Temporary files a killed
    process left (fallback only) are removed when the provider is made, once older than
    STALE_TEMPORARY_S.

    Args:
        directory: where the emails go; created (with parents) when missing, but never
            through a dangling symbolic link (its target may be a volume not mounted:
            emails written there would be hidden once it is).

    Raises:
        ConfigurationError: `directory`, or one of its parents, is a symbolic link to
            nothing or a loop of links, or is not a directory (`unusable_directory`); the
            message names the entry.
    """

    name = "file"
    #: A repeat of a key writes nothing new (providers.base.deduplicates_keys).
    deduplicates_keys = True

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        if unusable := unusable_directory(directory):
            raise ConfigurationError(f"file sink directory {directory}: {unusable}")
        #: Write without a name while the platform allows it; False after the first
        #: refusal (another OS, a filesystem without O_TMPFILE, no /proc, a /proc link
        #: refused).
        self.unnamed_files = hasattr(os, "O_TMPFILE") and os.path.isdir(_PROC_FD)
        self._remove_stale_temporaries()

    def _remove_stale_temporaries(self) -> None:
        """Remove the fallback's temporary files older than STALE_TEMPORARY_S (a kill -9
        between their creation and their removal leaves them); errors are ignored."""
        prefix, suffix = _TEMPORARY
        try:
            entries = list(os.scandir(self.directory))
        except OSError:
            return
        cutoff = time.time() - STALE_TEMPORARY_S
        for entry in entries:
            if entry.name.startswith(prefix) and entry.name.endswith((suffix, ".eml")):
                try:
                    if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                        os.unlink(entry.path)
                except OSError:
                    pass

    def send(self, email: OutgoingEmail, *, idempotency_key: str) -> SendReceipt:
        """Write the email as `<idempotency_key>.eml` unless that file exists.

        Returns:
            The receipt: provider "file", the Message-ID as provider_message_id.

        Raises:
            ValueError: a key that is not a plain file name (empty, hidden, with a "/"
                or NUL, or too long for one).
            TransientDeliveryError: the file cannot be written (a full disk, no
                permission, the directory a symbolic link to nothing); nothing is left
                under the key's name.
        """
        target = f"{idempotency_key}.eml"
        if (
            not idempotency_key
            or "/" in idempotency_key
            or idempotency_key.startswith(".")
            or "\0" in idempotency_key
            or len(os.fsencode(target)) > _NAME_MAX
        ):
            raise ValueError(f"unsafe idempotency key {idempotency_key!r}")
        receipt = SendReceipt(provider=self.name, provider_message_id=message_id(idempotency_key))
        try:
            try:
                dir_fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
            except FileNotFoundError:  # the first email, or the directory was removed
                if broken := broken_symlink(self.directory):  # mkdir: "File exists"
                    raise TransientDeliveryError(
                        f"file sink cannot write {self.directory / target}: {broken}"
                    ) from None
                self.directory.mkdir(parents=True, exist_ok=True)
                dir_fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
            try:
                if not _exists_synced(target, dir_fd):
                    mime = build_mime(email, idempotency_key=idempotency_key, now=datetime.now(UTC))
                    self._write(mime.as_bytes(policy=MIME_POLICY), target, dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as exc:
            raise TransientDeliveryError(
                f"file sink cannot write {self.directory / target}: {exc}"
            ) from exc
        return receipt

    def _write(self, data: bytes, target: str, dir_fd: int) -> None:
        """Write `data` and fsync it, link it as `target` in the directory `dir_fd`,
        then fsync the directory.

        A concurrent send of the same key that linked first wins: its file stays, and is
        synced here too before this send is reported accepted. Where linking the unnamed
        file is refused as unsupported, the sink writes under temporary names from then
        on, starting with this email.

        Raises:
            OSError: the file cannot be written, or `target` exists and is no regular
                file (a symlink, a directory).
        """
        fd, temporary = self._open_unnamed(dir_fd)
        again = False
        try:
            _write_all(fd, data)
            os.fsync(fd)  # the content first: a name must never reach the disk before it
            try:
                if temporary is None:
                    # linkat(AT_SYMLINK_FOLLOW) links the open file itself, not the
                    # /proc symlink (open(2), "O_TMPFILE").
                    os.link(f"{_PROC_FD}/{fd}", target, dst_dir_fd=dir_fd, follow_symlinks=True)
                else:
                    os.link(temporary, self.directory / target)
            except FileExistsError:
                if not _exists_synced(target, dir_fd):  # gone again: no email under it
                    raise
            except OSError as exc:
                if temporary is not None or not self._cannot_link_unnamed(exc, dir_fd):
                    raise
                self.unnamed_files = False
                again = True
            else:
                os.fsync(dir_fd)  # the name
        finally:
            try:
                os.close(fd)
            finally:
                if temporary is not None:
                    os.unlink(temporary)
        if again:  # no name was made: write it all again, under a temporary name
            self._write(data, target, dir_fd)

    def _cannot_link_unnamed(self, exc: OSError, dir_fd: int) -> bool:
        """Whether `exc`, from linking an unnamed file in `dir_fd` through /proc, means
        this platform cannot do that (_NO_PROC_LINK) rather than that this send failed."""
        if exc.errno != errno.ENOENT:
            return exc.errno in _NO_PROC_LINK
        try:  # linkat(2) ENOENT: no /proc entry, or the directory was removed meanwhile
            return os.path.samestat(os.fstat(dir_fd), os.stat(self.directory))
        except OSError:
            return False

    def _open_unnamed(self, dir_fd: int) -> tuple[int, str | None]:
        """A new file (mode 0600) open for writing in `dir_fd`: (fd, None) without a
        name, or (fd, its temporary path) where the platform cannot make one without."""
        if self.unnamed_files:
            try:
                return os.open(".", os.O_TMPFILE | os.O_WRONLY, 0o600, dir_fd=dir_fd), None
            except OSError as exc:
                if exc.errno not in _NO_TMPFILE:
                    raise
                self.unnamed_files = False
        prefix, suffix = _TEMPORARY
        return tempfile.mkstemp(dir=self.directory, prefix=prefix, suffix=suffix)


def _exists_synced(name: str, dir_fd: int) -> bool:
    """Whether the email `name` exists in `dir_fd`; if so it and the directory are
    fsynced first, so that an email a concurrent send has linked but not yet synced is
    on disk before its key is reported accepted again (syncing what is already on disk
    costs almost nothing).

    Raises:
        OSError: `name` exists but is no regular file (a symlink, dangling or not; a
            directory): no email is there, and none can be written under that name.
    """
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a symlink
            raise OSError(errno.EEXIST, f"{name} is a symbolic link, not an email") from exc
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EEXIST, f"{name} exists and is not a regular file")
        os.fsync(fd)
    finally:
        os.close(fd)
    os.fsync(dir_fd)
    return True


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


__all__ = ["FileSinkProvider", "build_mime"]
