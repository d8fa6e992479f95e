"""The file sink on a real filesystem: one whole `<key>.eml` per key, written once.

Its contract (sender/providers/file_sink.py, docs/design.md "Providers"): a reader never
sees half an email, two concurrent sends of one key make one file, a repeat of a key
returns the first receipt and writes nothing, and nothing but the emails is left in the
directory. Each case runs on both ways of writing: without a name (Linux O_TMPFILE, where
the filesystem has it) and under a temporary `.tmp-*` name (every other platform).
"""

from __future__ import annotations

import email
import email.policy
import errno
import os
import stat
import threading
import time
from pathlib import Path

import pytest

from reminder_core.errors import ConfigurationError, TransientDeliveryError
from sender.providers.base import OutgoingEmail
from sender.providers.file_sink import STALE_TEMPORARY_S, FileSinkProvider
from tests.support.dev import reminders_dev

KEY = "0190b3c2-7d1e-7a1b-9c3d-1234567890ab-20300101T120000Z"


def mail(subject: str = "Water the plants", body: str = "Water the plants\n") -> OutgoingEmail:
    return OutgoingEmail(
        to="alice@example.org",
        sender="Reminders <reminders@example.com>",
        subject=subject,
        text=body,
        html=f"<p>{body}</p>",
    )


@pytest.fixture(params=["unnamed", "temporary name"])
def sink(request: pytest.FixtureRequest, tmp_path: Path) -> FileSinkProvider:
    provider = FileSinkProvider(tmp_path / "mail")
    if request.param == "temporary name":
        provider.unnamed_files = False
    return provider


def parsed(path: Path) -> email.message.EmailMessage:
    return email.message_from_bytes(path.read_bytes(), policy=email.policy.default)  # type: ignore[return-value]


def test_writes_one_email_named_by_its_key(sink: FileSinkProvider) -> None:
    receipt = sink.send(mail(), idempotency_key=KEY)

    assert receipt.provider == "file"
    assert receipt.provider_message_id == f"<{KEY}@reminders>"
    assert os.listdir(sink.directory) == [f"{KEY}.eml"]  # no temporary file is left
    path = sink.directory / f"{KEY}.eml"
    message = parsed(path)
    assert message["Message-ID"] == f"<{KEY}@reminders>"
    assert message["Subject"] == "Water the plants"
    assert message.get_body(("plain",)).get_content() == "Water the plants\n"  # type: ignore[union-attr]
    # Emails may hold what a user wrote: readable by the owner only, as mkstemp makes.
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_repeated_key_writes_nothing_and_returns_the_first_receipt(
    sink: FileSinkProvider,
) -> None:
    first = sink.send(mail("First"), idempotency_key=KEY)
    path = sink.directory / f"{KEY}.eml"
    before = path.read_bytes(), path.stat().st_ino

    again = sink.send(mail("Second"), idempotency_key=KEY)

    assert again == first
    assert (path.read_bytes(), path.stat().st_ino) == before
    assert parsed(path)["Subject"] == "First"
    assert os.listdir(sink.directory) == [f"{KEY}.eml"]


def test_concurrent_sends_of_one_key_make_one_whole_file(sink: FileSinkProvider) -> None:
    # Different bodies per thread, long enough to take more than one write: the file that
    # wins must be exactly one of them, never a mix, and every send gets the same receipt.
    bodies = [f"copy {i}\n" + f"line of copy {i}\n" * 4000 for i in range(8)]
    start = threading.Barrier(len(bodies))
    receipts: list[object] = []

    def send(body: str) -> None:
        start.wait()
        receipts.append(sink.send(mail(body=body), idempotency_key=KEY))

    threads = [threading.Thread(target=send, args=(b,)) for b in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert len(receipts) == len(bodies)
    assert len(set(receipts)) == 1
    assert os.listdir(sink.directory) == [f"{KEY}.eml"]
    text = parsed(sink.directory / f"{KEY}.eml").get_body(("plain",)).get_content()  # type: ignore[union-attr]
    assert text.replace("\r\n", "\n") in bodies


def test_a_reader_never_sees_half_an_email(sink: FileSinkProvider) -> None:
    body = "x" * 200_000 + "\n"  # written in more than one write(2)
    keys = [f"k{i:03d}" for i in range(40)]
    seen: list[int] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            for key in keys:
                try:
                    seen.append(len((sink.directory / f"{key}.eml").read_bytes()))
                except FileNotFoundError:
                    pass

    reader = threading.Thread(target=read)
    sink.directory.mkdir(parents=True)
    reader.start()
    try:
        for key in keys:
            sink.send(mail(body=body), idempotency_key=key)
    finally:
        done.set()
        reader.join()

    sizes = {(sink.directory / f"{k}.eml").stat().st_size for k in keys}
    assert len(sizes) == 1  # every email is the same length here (same body, same key length)
    assert seen
    assert set(seen) <= sizes


def test_a_removed_directory_is_made_again(sink: FileSinkProvider) -> None:
    sink.send(mail(), idempotency_key="before")
    for name in os.listdir(sink.directory):
        os.unlink(sink.directory / name)
    sink.directory.rmdir()

    sink.send(mail(), idempotency_key="after")

    assert os.listdir(sink.directory) == ["after.eml"]


def test_an_unwritable_directory_is_a_transient_error(tmp_path: Path) -> None:
    # A file put where the directory should be after the sink was made (at start, it
    # is a ConfigurationError: test_a_directory_that_is_a_file_is_a_configuration_error).
    blocker = tmp_path / "mail"
    sink = FileSinkProvider(blocker)
    blocker.write_text("a file where the directory should be")

    with pytest.raises(TransientDeliveryError, match="file sink cannot write"):
        sink.send(mail(), idempotency_key=KEY)
    assert blocker.read_text() == "a file where the directory should be"


@pytest.mark.parametrize("key", ["../escape", "a/b", ".hidden", "nul\0byte"])
def test_a_key_that_is_not_a_plain_file_name_is_refused(sink: FileSinkProvider, key: str) -> None:
    with pytest.raises(ValueError, match="unsafe idempotency key"):
        sink.send(mail(), idempotency_key=key)
    assert not sink.directory.exists() or os.listdir(sink.directory) == []


@pytest.mark.skipif(not hasattr(os, "O_TMPFILE"), reason="no O_TMPFILE on this platform")
def test_a_filesystem_without_o_tmpfile_falls_back_to_a_temporary_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What open(2) answers where the filesystem lacks O_TMPFILE (EOPNOTSUPP), injected at
    # the system call: the sink switches to a temporary name for good and still delivers.
    real_open = os.open
    refused: list[int] = []

    def open_without_tmpfile(path, flags, *args, **kwargs):  # type: ignore[no-untyped-def]
        if flags & os.O_TMPFILE == os.O_TMPFILE:
            refused.append(flags)
            raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_without_tmpfile)
    sink = FileSinkProvider(tmp_path / "mail")
    assert sink.unnamed_files

    sink.send(mail(), idempotency_key="one")
    sink.send(mail(), idempotency_key="two")

    assert len(refused) == 1
    assert not sink.unnamed_files
    assert sorted(os.listdir(sink.directory)) == ["one.eml", "two.eml"]


def record_syncs(monkeypatch: pytest.MonkeyPatch, *, refuse_proc_link: int = 0) -> list[str]:
    """Record, in order, each real `os.fsync` ("fsync file" / "fsync dir") and `os.link`
    ("link") the sink makes from now on; with `refuse_proc_link` (an errno), a link from
    /proc/self/fd is refused with it instead ("proc link refused"), as the kernel would."""
    calls: list[str] = []
    real_fsync, real_link = os.fsync, os.link

    def fsync(fd: int) -> None:
        calls.append("fsync dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync file")
        real_fsync(fd)

    def link(src, dst, *args, **kwargs):  # type: ignore[no-untyped-def]
        if refuse_proc_link and str(src).startswith("/proc/self/fd/"):
            calls.append("proc link refused")
            raise OSError(refuse_proc_link, os.strerror(refuse_proc_link))
        calls.append("link")
        return real_link(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "link", link)
    return calls


def test_the_content_is_synced_before_the_name_and_the_name_before_send_returns(
    sink: FileSinkProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A trial copied an ext4 image between the link and a later fsync: the name had
    # reached the disk (another thread's fsync committed the journal) and the content had
    # not, so the "power loss" left an empty <key>.eml that a retry took for the email.
    # The real calls run; their order is recorded: content fsync, link, directory fsync.
    sink.directory.mkdir(parents=True)
    calls = record_syncs(monkeypatch)

    sink.send(mail(), idempotency_key=KEY)

    assert calls == ["fsync file", "link", "fsync dir"]


def test_a_name_taken_by_no_email_is_a_transient_error_and_writes_nothing(
    sink: FileSinkProvider,
) -> None:
    sink.directory.mkdir(parents=True)
    (sink.directory / "dangling.eml").symlink_to(sink.directory / "nowhere")
    (sink.directory / "folder.eml").mkdir()

    for key in ("dangling", "folder"):
        with pytest.raises(TransientDeliveryError):
            sink.send(mail(), idempotency_key=key)

    assert sorted(os.listdir(sink.directory)) == ["dangling.eml", "folder.eml"]
    assert not (sink.directory / "nowhere").exists()


@pytest.mark.parametrize("key", ["", "k" * 252])
def test_a_key_that_makes_no_file_name_is_refused(sink: FileSinkProvider, key: str) -> None:
    # "" would write the hidden file ".eml"; 252 + ".eml" passes NAME_MAX (255 bytes), which
    # open(2) refuses with ENAMETOOLONG, a retry that could never succeed.
    with pytest.raises(ValueError, match="unsafe idempotency key"):
        sink.send(mail(), idempotency_key=key)


def test_temporary_files_a_killed_process_left_are_removed_when_stale(tmp_path: Path) -> None:
    directory = tmp_path / "mail"
    directory.mkdir()
    stale = [directory / ".tmp-abc123.part", directory / ".tmp-old456.eml"]  # both layouts
    fresh = directory / ".tmp-new789.part"
    email_file = directory / "k.eml"
    for path in [*stale, fresh, email_file]:
        path.write_bytes(b"")
    old = time.time() - STALE_TEMPORARY_S - 60
    for path in [*stale, email_file]:
        os.utime(path, (old, old))

    FileSinkProvider(directory)

    assert sorted(os.listdir(directory)) == [".tmp-new789.part", "k.eml"]


@pytest.mark.parametrize("where", ["the directory", "a parent"])
def test_a_directory_behind_a_dangling_symlink_is_a_configuration_error(
    tmp_path: Path, where: str
) -> None:
    # mkdir(2) answers EEXIST for a dangling symlink ("File exists"), which names neither
    # the link nor its target; the sink must say which link leads nowhere, and create
    # nothing through it (the target may be a volume that is not mounted).
    link, target = tmp_path / "link", tmp_path / "gone"
    link.symlink_to(target)
    directory = link if where == "the directory" else link / "mail"

    with pytest.raises(ConfigurationError) as caught:
        FileSinkProvider(directory)

    assert f"{link} is a symbolic link to {target}, which does not exist" in str(caught.value)
    assert os.listdir(tmp_path) == ["link"]


def test_a_chain_of_links_is_named_by_the_name_that_is_missing(tmp_path: Path) -> None:
    # Trial helper-52: chain -> dangling -> gone named "dangling" as the missing name,
    # though it exists (as a link); the name missing at the end of the chain is "gone".
    (tmp_path / "dangling").symlink_to("gone")  # relative, as `ln -s gone dangling`
    (tmp_path / "chain").symlink_to(tmp_path / "dangling")

    with pytest.raises(ConfigurationError) as caught:
        FileSinkProvider(tmp_path / "chain")

    expected = f"{tmp_path / 'chain'} is a symbolic link to {tmp_path / 'gone'}, which does"
    assert expected in str(caught.value)


@pytest.mark.parametrize("where", ["the directory", "a parent"])
def test_a_directory_in_a_loop_of_links_is_a_configuration_error(
    tmp_path: Path, where: str
) -> None:
    # Trial helper-52: the sink took the loop, and every send failed with a transient
    # ELOOP until its message was dead-lettered; open(2) answers ELOOP for "too many
    # symbolic links", which a retry cannot fix.
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    directory = tmp_path / "a" if where == "the directory" else tmp_path / "a" / "mail"

    with pytest.raises(ConfigurationError) as caught:
        FileSinkProvider(directory)

    assert f"{tmp_path / 'a'} is a loop of symbolic links" in str(caught.value)


def test_a_directory_whose_symlink_target_is_removed_is_a_transient_error(
    tmp_path: Path,
) -> None:
    # The link was fine when the sink was made; its target went away since (an unmounted
    # volume): each send fails, retryably, naming the link and its target.
    target = tmp_path / "volume"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    sink = FileSinkProvider(link)
    sink.send(mail(), idempotency_key="before")
    (target / "before.eml").unlink()
    target.rmdir()

    with pytest.raises(TransientDeliveryError) as caught:
        sink.send(mail(), idempotency_key=KEY)

    assert str(caught.value) == (
        f"file sink cannot write {link / KEY}.eml: "
        f"{link} is a symbolic link to {target}, which does not exist"
    )
    assert not target.exists()


#: What linkat(2) answers where linking an O_TMPFILE file through /proc/self/fd cannot
#: work here: EXDEV (the two paths on different mounts), EPERM (no hard links on this
#: filesystem), EINVAL (a flag this kernel lacks: AT_SYMLINK_FOLLOW), ENOENT (no such
#: /proc/self/fd entry: /proc not mounted, or another procfs), EOPNOTSUPP (what a
#: filesystem without an operation answers, as open(2) does for O_TMPFILE).
UNSUPPORTED_PROC_LINK = [errno.EXDEV, errno.EPERM, errno.EINVAL, errno.ENOENT, errno.EOPNOTSUPP]


@pytest.mark.skipif(not hasattr(os, "O_TMPFILE"), reason="no O_TMPFILE on this platform")
@pytest.mark.parametrize(
    "code", UNSUPPORTED_PROC_LINK, ids=["EXDEV", "EPERM", "EINVAL", "ENOENT", "EOPNOTSUPP"]
)
def test_a_proc_link_this_platform_refuses_falls_back_to_a_temporary_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    # The refusal is injected at the system call, for /proc/self/fd sources only; every
    # other call is real. The same send is completed under a temporary name, once, with
    # the documented order: the content fsynced before its name, the directory after.
    sink = FileSinkProvider(tmp_path / "mail")
    sink.directory.mkdir()
    assert sink.unnamed_files
    calls = record_syncs(monkeypatch, refuse_proc_link=code)

    receipt = sink.send(mail(), idempotency_key=KEY)

    assert receipt.provider_message_id == f"<{KEY}@reminders>"
    assert not sink.unnamed_files
    assert calls == ["fsync file", "proc link refused", "fsync file", "link", "fsync dir"]
    assert os.listdir(sink.directory) == [f"{KEY}.eml"]
    path = sink.directory / f"{KEY}.eml"
    assert parsed(path)["Message-ID"] == f"<{KEY}@reminders>"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600

    calls.clear()
    sink.send(mail(), idempotency_key="two")  # for good: /proc is not tried again

    assert calls == ["fsync file", "link", "fsync dir"]
    assert sorted(os.listdir(sink.directory)) == [f"{KEY}.eml", "two.eml"]


def test_reminders_dev_refuses_a_mail_dir_behind_a_dangling_symlink(tmp_path: Path) -> None:
    """`reminders dev` checks MAIL_DIR before it writes anything (it used to stop on
    mkdir's bare "File exists"): exit status 2, the link and its target named, and no
    state written (no JWT secret, no profiles file)."""
    link = tmp_path / "mail"
    link.symlink_to(tmp_path / "gone")
    state = tmp_path / "state"

    done = reminders_dev(tmp_path, STATE_DIR=str(state), MAIL_DIR=str(link))

    assert done.returncode == 2, done.stderr
    output = done.stdout + done.stderr
    assert f"{link} is a symbolic link to {tmp_path / 'gone'}, which does not exist" in output
    assert not (state / "jwt_secret").exists()
    assert not (tmp_path / "gone").exists()


def test_reminders_dev_refuses_a_state_dir_behind_a_dangling_symlink(tmp_path: Path) -> None:
    # Trial helper-52: STATE_DIR was resolved (through the link) before the check, so
    # the JWT secret, the profiles and the emails went to the link's target.
    (tmp_path / "state").symlink_to("missing")

    done = reminders_dev(tmp_path, STATE_DIR=str(tmp_path / "state"))

    assert done.returncode == 2, done.stderr
    expected = f"{tmp_path / 'state'} is a symbolic link to {tmp_path / 'missing'}, which does"
    assert expected in done.stdout + done.stderr
    assert sorted(os.listdir(tmp_path)) == ["state"]


def test_reminders_dev_refuses_a_mail_dir_in_a_loop_of_links(tmp_path: Path) -> None:
    # Trial helper-52: a traceback ending in "File exists", after the state was written.
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")

    done = reminders_dev(tmp_path, STATE_DIR=str(tmp_path / "st"), MAIL_DIR=str(tmp_path / "a"))

    assert done.returncode == 2, done.stderr
    assert f"{tmp_path / 'a'} is a loop of symbolic links" in done.stdout + done.stderr
    assert not (tmp_path / "st").exists()


@pytest.mark.parametrize("where", ["the directory", "a parent"])
def test_a_directory_that_is_a_file_is_a_configuration_error(tmp_path: Path, where: str) -> None:
    # Trial helper-53: every send then failed (mkdir: EEXIST or ENOTDIR) until the
    # dead-letter queue.
    (tmp_path / "mail").write_text("not a directory")
    directory = tmp_path / "mail" if where == "the directory" else tmp_path / "mail" / "x"

    with pytest.raises(ConfigurationError) as caught:
        FileSinkProvider(directory)

    assert f"{tmp_path / 'mail'} is not a directory" in str(caught.value)


def test_reminders_dev_refuses_a_mail_dir_that_is_a_file(tmp_path: Path) -> None:
    # Trial helper-53: a 36-line FileExistsError traceback, exit 1.
    (tmp_path / "mail").write_text("not a directory")

    done = reminders_dev(tmp_path, STATE_DIR=str(tmp_path / "st"), MAIL_DIR=str(tmp_path / "mail"))

    assert done.returncode == 2, done.stderr
    assert f"{tmp_path / 'mail'} is not a directory" in done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert not (tmp_path / "st").exists()


@pytest.mark.parametrize(
    ("host", "reason"),
    [
        ("256.1.1.1", "does not resolve"),  # no IPv4 address (inet_aton: each part <= 255)
        ("192.0.2.1", "Cannot assign requested address"),  # TEST-NET-1 (RFC 5737): not ours
    ],
)
def test_reminders_dev_names_why_it_cannot_listen(tmp_path: Path, host: str, reason: str) -> None:
    # Trial helper-53: every bind failure was reported "already in use ... try --port".
    done = reminders_dev(tmp_path, "--host", host, STATE_DIR=str(tmp_path / "st"))

    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert reason in output
    assert "already in use" not in output


@pytest.mark.parametrize("port", ["99999", "-1", "0"])
def test_reminders_dev_refuses_a_port_out_of_range_as_a_usage_error(
    tmp_path: Path, port: str
) -> None:
    # Trial helper-53: OverflowError's traceback, exit 1 (docs/cli.md: 2 for a bad
    # command line). TCP ports are 1-65535 (RFC 9293 §3.1; 0 is no port to listen on).
    done = reminders_dev(tmp_path, "--port", port, STATE_DIR=str(tmp_path / "st"))

    assert done.returncode == 2, done.stderr
    assert "--port" in done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
