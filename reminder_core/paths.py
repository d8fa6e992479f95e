"""Why a directory the operator named cannot be used, found before anything is written
(MAIL_DIR, STATE_DIR and the embedded database's pgdata): a link to nothing, a loop of
links, a file where a directory should be."""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path


def unusable_directory(directory: Path) -> str | None:
    """Why `directory` cannot be used (or made) as a directory, found without writing
    anything: a broken symbolic link on its path (`broken_symlink`), or an entry on it that is not a
    directory ("<path> is not a directory": mkdir(2) answers EEXIST or ENOTDIR); None
    otherwise (permissions are for open(2) and mkdir(2) to report)."""
    if too_long := overlong_name(directory):
        return too_long
    if broken := broken_symlink(directory):
        return broken
    for entry in (directory, *directory.parents):
        if os.path.lexists(entry):
            return None if os.path.isdir(entry) else f"{entry} is not a directory"
    return None


#: Bytes of the longest relative path written beneath a directory the operator names,
#: with a margin: `pgdata/pg_wal/archive_status/<24 hex digits>.ready` under STATE_DIR is
#: 59 (PostgreSQL's data directory layout), `mail/<idempotency key>.eml` 62.
WRITTEN_BENEATH_MAX = 80


def overlong_name(directory: Path, *, beneath: int = WRITTEN_BENEATH_MAX) -> str | None:
    """Why `directory` is a path the system cannot use at all (ENAMETOOLONG, which no
    mkdir or open reports clearly: a traceback, trial helper-55): a name on it longer than
    the filesystem allows (pathconf(3) NAME_MAX of the deepest existing directory,
    typically 255 bytes), or its absolute path, with `beneath` bytes of the paths written
    under it, longer than PATH_MAX (4096 on Linux: a path just under it failed later, in
    initdb, trial helper-56); None otherwise."""
    directory = directory.absolute()
    existing = next((p for p in (directory, *directory.parents) if os.path.isdir(p)), None)
    name_max, path_max = 255, 4096
    if existing is not None:
        with contextlib.suppress(OSError, ValueError):
            name_max = os.pathconf(existing, "PC_NAME_MAX")
            path_max = os.pathconf(existing, "PC_PATH_MAX")
    for name in directory.parts:
        if len(os.fsencode(name)) > name_max:
            shown = name if len(name) <= 40 else f"{name[:20]}...{name[-10:]}"
            return (
                f"the name {shown!r} on {directory} is {len(os.fsencode(name))} bytes long,"
                f" over the filesystem's {name_max}"
            )
    length = len(os.fsencode(str(directory)))
    if length + beneath >= path_max:
        return (
            f"the path {str(directory)[:60]}... is {length} bytes long: with the {beneath}"
            f" bytes of the paths written under it, over the system's {path_max}"
        )
    return None


def broken_symlink(directory: Path) -> str | None:
    """Why `directory` cannot be made or used because of a symbolic link on its path, for
    the deepest existing entry on it: "<link> is a symbolic link to <target>, which does
    not exist" (the last name of a chain of links, which is the one missing) or "<link>
    is a loop of symbolic links" (ELOOP: the kernel gives up following it); None when
    that entry is no such link (another error is for open(2) and mkdir(2) to report)."""
    for entry in (directory, *directory.parents):
        if not os.path.lexists(entry):
            continue
        try:
            os.stat(entry)  # through the link, if it is one
        except FileNotFoundError:
            if not os.path.islink(entry):  # gone meanwhile
                return None
            # realpath follows every link it can: where a chain ends is the missing name.
            return f"{entry} is a symbolic link to {os.path.realpath(entry)}, which does not exist"
        except OSError as exc:
            if exc.errno == errno.ELOOP and os.path.islink(entry):
                return f"{entry} is a loop of symbolic links"
            return None  # no permission: open(2) and mkdir(2) will say so
        return None
    return None


__all__ = ["broken_symlink", "overlong_name", "unusable_directory"]
