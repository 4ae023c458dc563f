"""Atomic file output: every file the CLI writes (reports, profiles, exports, plots) goes to a
temporary file beside its target and is renamed over it, so a reader never sees half a file
and an interrupted run leaves the old one. A failure is one ``PlannerError`` line naming the flag."""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from planner.errors import PlannerError


def _file_mode(target: Path) -> int:
    """The permission bits the written file takes: an existing file's own (a private 0600 file
    stays private), else what ``open`` would give a new file, 0666 less the process's umask
    (mkstemp's temporary file is 0600 whatever the umask)."""
    try:
        return target.stat().st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _temporary_beside(target: Path, flag: str) -> Path:
    """An empty temporary file in ``target``'s folder (made first, with its parents), named after
    it and with its suffix, so that writers that infer the format from it still can."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=target.suffix or ".tmp")
    except OSError as err:
        raise PlannerError(f"{flag} {target}: cannot write: {err.strerror or err}") from None
    os.close(fd)
    return Path(name)


@contextmanager
def atomic_path(path: str | Path, flag: str = "--out") -> Iterator[Path]:
    """Yield a temporary path in ``path``'s folder (``_temporary_beside``); once the block
    succeeds, give it the mode the file has or a new one would (``_file_mode``) and rename it over
    ``path``. A link at ``path`` is written through, to the file it names; a device or pipe there
    is refused (``_not_a_regular_file``): renaming over it would replace it, /dev/null included."""
    target = _through_link(Path(path), flag)
    _not_a_regular_file(target, flag)
    tmp = _temporary_beside(target, flag)
    try:
        yield tmp
        os.chmod(tmp, _file_mode(target))
        os.replace(tmp, target)
    except OSError as err:
        raise PlannerError(f"{flag} {target}: cannot write: {err.strerror or err}") from None
    finally:
        tmp.unlink(missing_ok=True)


def write_texts_atomic(texts: dict[Path, str], flag: str) -> None:
    """Write several files as one: every text goes to its temporary file first, and only when all
    are written are they renamed over their targets, so a failure (a read-only folder, a full
    disk) leaves every target as it was, not some rewritten and some not. The renames, in the
    targets' own folders, are what is left to fail."""
    staged: list[tuple[Path, Path]] = []
    where: Path | str = ""
    try:
        for path, text in texts.items():
            where = target = _through_link(Path(path), flag)
            _not_a_regular_file(target, flag)
            tmp = _temporary_beside(target, flag)
            staged.append((tmp, target))
            tmp.write_text(text, encoding="utf-8")
            os.chmod(tmp, _file_mode(target))
        for tmp, target in staged:
            where = target
            os.replace(tmp, target)
    except OSError as err:
        raise PlannerError(f"{flag} {where}: cannot write: {err.strerror or err}") from None
    finally:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)


def make_parent(path: str | Path, flag: str = "--out") -> Path:
    """Check that an output file can be written, before a command's work, so that an output that
    cannot be written fails at once: no file name, a folder in its place, a regular file where a
    folder should be, no permission, or a name the file system refuses (too long) is one
    ``PlannerError`` line naming the flag. Nothing is created: the folders a missing path needs are
    made when the file is written (``atomic_path``), so a command that fails leaves none behind."""
    target = Path(path)
    if target.name in ("", ".", ".."):
        raise PlannerError(f"{flag} '{path}': give a file name")
    try:
        target = _through_link(target, flag)
        _not_a_regular_file(target, flag)
        _check_writable(target, flag)
    except OSError as err:
        raise PlannerError(f"{flag} {target}: cannot write: {err.strerror or err}") from None
    return target


def _check_writable(target: Path, flag: str) -> None:
    """``make_parent``'s checks; the nearest folder that exists takes a probe file, as the atomic
    write will (the permission bits pass for root everywhere: /proc, a read-only mount or a full
    disk fail only when written to)."""
    if target.is_dir():
        raise PlannerError(f"{flag} {target}: is a folder; give a file name")
    broken = next((p for p in reversed(target.parents) if p.is_symlink() and not p.exists()), None)
    if broken is not None:
        raise PlannerError(f"{flag} {target}: cannot write: '{broken}' is a link to nothing")
    blocking = next((p for p in reversed(target.parents) if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise PlannerError(f"{flag} {target}: cannot write: '{blocking}' is a file, not a folder")
    base = next(p for p in (target.parent, *target.parent.parents) if p.exists())
    if not os.access(base, os.W_OK | os.X_OK):
        raise PlannerError(f"{flag} {target}: cannot write: no permission to write in '{base}'")
    if len(_temporary_name(target).encode()) > _name_max(base):
        raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG))
    fd, probe = tempfile.mkstemp(dir=base, prefix=".planner.", suffix=".probe")
    os.close(fd)
    os.unlink(probe)


LINK_LOOPS = "loops (it names itself through links)"
"""What a link that names no file, only itself through links, is called: as an input
(``catalog``) and as an output (``_through_link``)."""


def link_loops(path: Path) -> bool:
    """Whether ``path`` is a link that names itself through links: ``Path.resolve`` raises
    RuntimeError for it on Python 3.11 (OSError ELOOP from 3.13), which no OSError handler caught."""
    if not path.is_symlink():
        return False
    try:
        path.resolve(strict=True)
    except RuntimeError:
        return True
    except OSError as err:
        return err.errno == errno.ELOOP
    return False


def _through_link(path: Path, flag: str = "--out") -> Path:
    """The file a link at ``path`` names (the write goes there, as a shell's ``>`` would), else
    ``path``; a loop of links names no file (``link_loops``)."""
    if not path.is_symlink():
        return path
    if link_loops(path):
        raise PlannerError(f"{flag} {path}: cannot write: the link {LINK_LOOPS}")
    return path.resolve()


def _not_a_regular_file(target: Path, flag: str) -> None:
    """Refuse an output path that holds something other than a regular file or a folder (a
    device or a pipe): the atomic write renames a new file over it, which would replace it."""
    if target.exists() and not target.is_file() and not target.is_dir():
        raise PlannerError(f"{flag} {target}: is a device or pipe, not a file; give a file name")


def _temporary_name(target: Path) -> str:
    """The longest name ``atomic_path`` gives the temporary file beside ``target``: mkstemp's
    prefix, eight random characters and the suffix."""
    return f".{target.name}." + "x" * 8 + (target.suffix or ".tmp")


def _name_max(folder: Path) -> int:
    """The longest file name ``folder``'s file system takes (255 where it does not say)."""
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def write_text_atomic(path: str | Path, text: str, flag: str = "--out") -> None:
    """Write ``text`` (UTF-8) to ``path``: ``write_texts_atomic`` of one file."""
    write_texts_atomic({Path(path): text}, flag)
