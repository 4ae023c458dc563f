"""The ``plan`` app objects, its console and output helpers, and ``main``, the entry point.

Every error a user can cause ends as ``error: <one line>`` on stderr with exit code 2: our own
PlannerError, and click's usage errors (unknown option, bad value), which ``main`` reformats.
The commands live in the other modules of this package and register themselves on ``app`` when
``planner.cli`` imports them.
"""

from __future__ import annotations

import errno
import json
import os
import sys
from typing import Any

import typer
from rich.console import Console

from planner.errors import PlannerError

app = typer.Typer(
    name="plan",
    help=(
        "Plan distributed LLM training: rank every feasible TP/PP/DP/CP/EP mesh by predicted step time.\n\n"
        "Start with:  plan --model llama70b --cluster dgx-h100x16\n\n"
        "See the catalogs with `plan list models` and `plan list clusters`; price one mesh with "
        "`plan estimate --model llama70b --cluster dgx-h100x16 --tp 8 --pp 2 --dp 8`."
    ),
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=False,
    rich_markup_mode=None,
)
list_app = typer.Typer(help="List the bundled catalogs.", add_completion=False)
show_app = typer.Typer(help="Show one model or cluster with its derived figures.", add_completion=False)
app.add_typer(list_app, name="list")
app.add_typer(show_app, name="show")


class _Console(Console):
    """Rich's console, except that a reader closing the pipe (``plan ... | head``) ends the run
    the way ``main`` ends every closed pipe, quietly (rich's own handler exits with status 1)."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError


def console() -> Console:
    """Rich console; when output is piped, 120 columns instead of rich's default 80 so the
    ranking table is not truncated."""
    out = _Console()
    return out if out.is_terminal else _Console(width=120)


OUTPUT_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)
"""Write failures of the output device itself (full disk, quota, file too large, I/O error): a
run whose output cannot be written ends with one line, not a traceback."""


def _quiet_stdout() -> None:
    """Point stdout at /dev/null after its reader went away, so the interpreter's final flush
    does not fail again (Python docs, 'Note on SIGPIPE')."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def emit_json(payload: Any) -> None:
    write_stdout(json.dumps(payload, indent=2) + "\n")


def write_stdout(text: str) -> None:
    """Write and flush ``text`` to stdout. A closed pipe is re-raised as a bare BrokenPipeError:
    click turns an OSError with errno EPIPE into exit status 1 on its own (Command.main), while
    ``main`` ends every closed pipe quietly."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise BrokenPipeError from None


def _is_a(err: BaseException, class_name: str) -> bool:
    """Whether ``err`` is a click-style ``class_name`` error. Typer >= 0.25 vendors click
    (typer._click), older releases use click itself: match on the class hierarchy's names."""
    return any(cls.__name__ == class_name for cls in type(err).__mro__)


def main(argv: list[str] | None = None) -> int:
    """Console entry point: run the app, turning user errors into one line and exit code 2."""
    try:
        result = app(args=argv, standalone_mode=False, prog_name="plan")
        sys.stdout.flush()  # a closed pipe shows here, inside the handler, not at interpreter exit
    except PlannerError as err:
        sys.stderr.write(f"error: {err}\n")
        return 2
    except BrokenPipeError:  # the reader closed the pipe (plan ... | head): end quietly, as git does
        _quiet_stdout()
        return 0
    except OSError as err:
        if err.errno not in OUTPUT_ERRNOS:
            raise
        # stdout's device failed (plan ... > /dev/full): say so in one line; the interpreter's
        # last flush must not fail again
        _quiet_stdout()
        sys.stderr.write(f"error: cannot write the output: {err.strerror or err}\n")
        return 1
    except Exception as err:
        if _is_a(err, "UsageError"):
            ctx = getattr(err, "ctx", None)
            where = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
            message = " ".join(err.format_message().split())  # type: ignore[attr-defined]
            sys.stderr.write(f"error: {message}{where}\n")
            return 2
        if _is_a(err, "Abort"):  # click's Ctrl-C: 130 = 128 + SIGINT, the shell's convention
            sys.stderr.write("aborted\n")
            return 130
        raise
    return int(result) if isinstance(result, int) else 0


def entry() -> None:
    """The ``plan`` script and ``python -m planner``. Before its first validator pydantic reads the
    entry points of every installed distribution, looking for plugins (15-30 ms); ``plan`` uses
    none, so it skips that unless the caller set pydantic's switch ``PYDANTIC_DISABLE_PLUGINS``."""
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    sys.exit(main())
