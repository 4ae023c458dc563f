"""Atomic file output: every file the CLI writes (reports, profiles, exports, plots) goes to a
temporary file beside its target and is renamed over it, so a reader never sees half a file
and an interrupted run leaves the old one. A failure is one ``PlannerError`` line naming the flag."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from planner.errors import PlannerError


@contextmanager
def atomic_path(path: str | Path, flag: str = "--out") -> Iterator[Path]:
    """Yield a temporary path in ``path``'s folder (with its suffix, so writers that infer the
    format from it still can); once the block succeeds, make it world-readable (mkstemp creates
    0600) and rename it over ``path``. The folder must exist."""
    target = Path(path)
    try:
        fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=target.suffix or ".tmp")
    except OSError as err:
        raise PlannerError(f"{flag} {target}: cannot write: {err.strerror or err}") from None
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except OSError as err:
        raise PlannerError(f"{flag} {target}: cannot write: {err.strerror or err}") from None
    finally:
        tmp.unlink(missing_ok=True)


def make_parent(path: str | Path, flag: str = "--out") -> Path:
    """Create ``path``'s folder (and its parents) for an output file; no file name, a folder in its
    place, or a folder that cannot be made (a regular file in the way, no permission) is one
    ``PlannerError`` line naming the flag. Commands call it before their work, so that an output
    that cannot be written fails at once."""
    target = Path(path)
    if target.name in ("", ".", ".."):
        raise PlannerError(f"{flag} '{path}': give a file name")
    if target.is_dir():
        raise PlannerError(f"{flag} {target}: is a folder; give a file name")
    blocking = next((p for p in reversed(target.parents) if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise PlannerError(f"{flag} {target}: cannot write: '{blocking}' is a file, not a folder")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise PlannerError(f"{flag} {target}: cannot write: {err.strerror or err}") from None
    if not os.access(target.parent, os.W_OK | os.X_OK):
        raise PlannerError(f"{flag} {target}: cannot write: no permission to write in '{target.parent}'")
    # the permission bits pass for root everywhere: create and remove a file beside it, as the
    # atomic write will, so a folder that takes none (/proc, a read-only mount, a full disk) fails now
    try:
        fd, probe = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".probe")
    except OSError as err:
        raise PlannerError(f"{flag} {target}: cannot write: {err.strerror or err}") from None
    os.close(fd)
    os.unlink(probe)
    return target


def write_text_atomic(path: str | Path, text: str, flag: str = "--out") -> None:
    """Write ``text`` (UTF-8) to ``path`` through ``atomic_path``."""
    with atomic_path(path, flag) as tmp:
        tmp.write_text(text, encoding="utf-8")
