"""One writer for every file sparkguard writes on the operator's machine: render's OUT, the Ansible export,
apply's retry file and ``init``'s scaffold.

These paths are often in a directory someone else can write to (a CI runner's workspace, a shared /tmp, a
review directory kept between runs), and sparkguard often runs as root. So a write never follows a symbolic
link and never lands on anything but a regular file:

- the final component is checked without following it (``lstat``): a symbolic link, a directory, a FIFO
  or a device there is refused, exit 2, naming the path;
- the content goes to a new temporary file in the same directory, created with ``O_CREAT | O_EXCL |
  O_NOFOLLOW``, and is renamed over the final name (a rename replaces a link planted in between; it never
  writes through it); ``exclusive=True`` (init: never overwrite) creates the final name itself with
  ``O_EXCL`` instead, which fails on anything already there, a dangling link included;
- below a ``root`` the operator named (OUT, init's directory), every directory on the way is opened with
  ``O_NOFOLLOW`` relative to its parent, and created when missing: a link there is refused too;
- a mode is set with ``fchmod`` on the descriptor of the file just created, never by path.

The root itself is the operator's choice and may be a link (``--out ~/review`` where ~ is a link).
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
from pathlib import Path

from .errors import EXIT_CONFIG_ERROR, SparkguardError

RULE = ("sparkguard writes its output only as a new regular file, never through a symbolic link and never over "
        "a directory, FIFO or device: remove it, or choose another path")


DIRECTORY_RULE = ("sparkguard creates the directories of its output itself and never follows a symbolic link on "
                  "the way: remove it, or choose another path")


class OutputPathError(SparkguardError):
    """An output path is a link or not a regular file (or cannot be written): nothing was written there."""

    exit_code = EXIT_CONFIG_ERROR

    def __init__(self, path: Path | str, why: str, rule: str = RULE) -> None:
        self.path, self.why = str(path), why
        super().__init__(f"{path}: {why}; {rule}")


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _why(path: Path | str, mode: int, dir_fd: int | None = None) -> str:
    if stat.S_ISLNK(mode):
        try:
            target = os.readlink(path, dir_fd=dir_fd)
        except OSError:
            return "is a symbolic link"
        return f"is a symbolic link (to {target[:120]!r})"
    return f"is {_kind(mode)}, not a regular file"


def _mode(path: Path | str) -> int | None:
    """The mode of ``path`` itself (never followed), None when nothing is there; OutputPathError if unreadable."""
    try:
        return os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as error:
        raise OutputPathError(path, f"cannot be checked: {error.strerror or error}") from None


def refusal(path: Path | str) -> str | None:
    """Why ``path`` would be refused as an output file (a link, not a regular file), or None. Creates nothing."""
    try:
        mode = _mode(path)
    except OutputPathError as error:
        return error.why
    return None if mode is None or stat.S_ISREG(mode) else _why(path, mode)


def check(path: Path | str) -> None:
    """Raise OutputPathError if ``path`` could not be written (see ``refusal``)."""
    why = refusal(path)
    if why:
        raise OutputPathError(path, why)


def check_directory(path: Path | str) -> None:
    """Raise OutputPathError unless ``path`` is missing or a real directory (a link to one is refused)."""
    mode = _mode(path)
    if mode is None:
        return
    if not stat.S_ISDIR(mode):
        raise OutputPathError(path, _why(path, mode).replace("not a regular file", "not a directory"),
                              DIRECTORY_RULE)


def output_directory(directory: Path) -> Path:
    """The operator's output directory, created when missing (parents too), resolved; exit 2 if it cannot be."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        resolved = directory.resolve(strict=True)
    except (OSError, RuntimeError) as error:  # a link loop is a RuntimeError before Python 3.13
        raise OutputPathError(directory, f"cannot be used as an output directory ({getattr(error, 'strerror', None) or error})",
                              "give a directory that sparkguard can create or write to") from None
    if not resolved.is_dir():
        raise OutputPathError(directory, "is not a directory", "give a directory for --out") from None
    return resolved


def _open_directory(path: Path) -> int:
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as error:
        raise OutputPathError(path, f"cannot be opened as a directory ({error.strerror or error})",
                              "give a directory that sparkguard can write to") from None


def _descend(parent_fd: int, name: str, shown: Path) -> int:
    """The directory ``name`` under ``parent_fd`` (created if missing), opened without following a link."""
    try:
        os.mkdir(name, 0o777, dir_fd=parent_fd)
    except FileExistsError:
        pass
    except OSError as error:
        raise OutputPathError(shown, f"cannot be created ({error.strerror or error})") from None
    try:
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
    except OSError:
        try:
            mode = os.stat(name, dir_fd=parent_fd, follow_symlinks=False).st_mode
            why = _why(name, mode, parent_fd)
        except OSError as error:
            why = f"cannot be opened ({error.strerror or error})"
        raise OutputPathError(shown, why.replace("not a regular file", "not a directory"),
                              DIRECTORY_RULE) from None


def write(path: Path, content: str | bytes, *, root: Path | None = None, mode: int | None = None,
          exclusive: bool = False) -> Path:
    """Write ``content`` at ``path`` without following a link; return ``path``.

    ``root``: a directory above ``path`` that the operator named; the directories between are created and
    opened without following links (without ``root`` only the final component is guarded). ``mode``: the
    file's exact mode (default: 0666 less the umask). ``exclusive``: refuse anything already at ``path``.
    """
    data = content.encode("utf-8") if isinstance(content, str) else content
    if root is None:
        start, between = path.parent, []
    else:
        start, between = root, list(path.relative_to(root).parent.parts)
    directory_fd = _open_directory(start)
    try:
        reached = start
        for part in between:
            reached = reached / part
            inner = _descend(directory_fd, part, reached)
            os.close(directory_fd)
            directory_fd = inner
        _write_at(directory_fd, path.name, data, mode, exclusive, path)
    finally:
        os.close(directory_fd)
    return path


def _write_at(directory_fd: int, name: str, data: bytes, mode: int | None, exclusive: bool, shown: Path) -> None:
    try:
        existing: int | None = os.stat(name, dir_fd=directory_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        existing = None
    except OSError as error:
        raise OutputPathError(shown, f"cannot be checked ({error.strerror or error})") from None
    if existing is not None and exclusive:
        what = "already exists" if stat.S_ISREG(existing) else f"already exists and {_why(name, existing, directory_fd)}"
        raise OutputPathError(shown, what, "sparkguard never overwrites here: move it away, or choose another directory")
    if existing is not None and not stat.S_ISREG(existing):
        raise OutputPathError(shown, _why(name, existing, directory_fd))
    temporary = name if exclusive else f".{name[:200]}.{secrets.token_hex(6)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        handle = os.open(temporary, flags, 0o666 if mode is None else mode & 0o777, dir_fd=directory_fd)
    except FileExistsError:  # exclusive, and something appeared since the check
        raise OutputPathError(shown, "already exists", "sparkguard never overwrites here: move it away, or choose "
                              "another directory") from None
    except OSError as error:
        raise OutputPathError(shown, f"cannot be written ({error.strerror or error})") from None
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            if mode is not None:
                os.fchmod(stream.fileno(), mode)  # the file this call created, by its descriptor
        if not exclusive:
            os.replace(temporary, name, src_dir_fd=directory_fd, dst_dir_fd=directory_fd)
    except OSError as error:
        try:
            os.unlink(temporary, dir_fd=directory_fd)
        except OSError:
            pass
        raise OutputPathError(shown, f"cannot be written ({error.strerror or error})") from None
    except BaseException:
        try:
            os.unlink(temporary, dir_fd=directory_fd)
        except OSError:
            pass
        raise


def remove(path: Path) -> None:
    """Remove a file sparkguard wrote earlier: a regular file or a link (the link itself, never its target).

    Nothing there is fine; a directory or anything else is refused."""
    mode = _mode(path)
    if mode is None:
        return
    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        raise OutputPathError(path, _why(path, mode), "sparkguard removes only a file it wrote: remove it yourself, "
                              "or choose another path")
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as error:
        raise OutputPathError(path, f"cannot be removed ({error.strerror or error})") from None


def remove_tree(path: Path) -> None:
    """Remove a directory sparkguard wrote earlier (a link or file there is unlinked, never followed)."""
    mode = _mode(path)
    if mode is None:
        return
    try:
        if stat.S_ISDIR(mode):
            shutil.rmtree(path)  # on Linux it walks by descriptors and never follows a link inside
        else:
            os.unlink(path)
    except OSError as error:
        raise OutputPathError(path, f"cannot be removed ({error.strerror or error})") from None


__all__ = ["OutputPathError", "check", "check_directory", "output_directory", "refusal", "remove", "remove_tree", "write"]
