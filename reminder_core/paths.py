"""Why a directory the operator named cannot be used, found before anything is written
(MAIL_DIR, STATE_DIR and the embedded database's pgdata): a link to nothing, a loop of
links, a file where a directory should be."""

from __future__ import annotations

import errno
import os
from pathlib import Path


def unusable_directory(directory: Path) -> str | None:
    """Why `directory` cannot be used (or made) as a directory, found without writing
    anything: a broken symbolic link on its path (`broken_symlink`), or an entry on it that is not a
    directory ("<path> is not a directory": mkdir(2) answers EEXIST or ENOTDIR); None
    otherwise (permissions are for open(2) and mkdir(2) to report)."""
    if broken := broken_symlink(directory):
        return broken
    for entry in (directory, *directory.parents):
        if os.path.lexists(entry):
            return None if os.path.isdir(entry) else f"{entry} is not a directory"
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


__all__ = ["broken_symlink", "unusable_directory"]
