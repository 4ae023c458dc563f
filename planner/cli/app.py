"""The ``plan`` app objects, its console and output helpers, and ``main``, the entry point.

Every error a user can cause ends as ``error: <one line>`` on stderr with exit code 2: our own
PlannerError, and click's usage errors (unknown option, bad value), which ``main`` reformats.
The commands live in the other modules of this package and register themselves on ``app`` when
``planner.cli`` imports them.
"""

from __future__ import annotations

import copy
import errno
import json
import os
import sys
from collections.abc import Iterator, MutableMapping
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


class _LazyCommands(MutableMapping[str, Any]):
    """The subcommands of ``plan``'s click group by name, each made from its typer declaration when
    first looked up: ``plan --model M --cluster C`` makes none, ``plan estimate`` one (typer makes
    all of them up front, ~30 ms). Listing them (``plan --help``) makes them all, in their order."""

    def __init__(self, typer_app: typer.Typer, names: list[str]) -> None:
        self._app = typer_app
        self._names = names
        self._made: dict[str, Any] = {}

    def _make(self, name: str) -> Any:
        """The click command typer makes for ``name`` as a subcommand of the app: the app with only
        that command (or group) and no callback, made into a group, holds it."""
        part = copy.copy(self._app)
        part.registered_callback = None
        part.registered_commands = [info for info in self._app.registered_commands if _command_name(info) == name]
        part.registered_groups = [info for info in self._app.registered_groups if info.name == name]
        return typer.main.get_group(part).commands[name]

    def __getitem__(self, name: str) -> Any:
        if name not in self._made:
            if name not in self._names:
                raise KeyError(name)
            self._made[name] = self._make(name)
        return self._made[name]

    def __setitem__(self, name: str, command: Any) -> None:
        if name not in self._names:
            self._names.append(name)
        self._made[name] = command

    def __delitem__(self, name: str) -> None:
        self._names.remove(name)
        self._made.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._names))

    def __len__(self) -> int:
        return len(self._names)


def _command_name(info: Any) -> str | None:
    """A command's name as typer gives it: its own, else its function's with dashes."""
    if isinstance(info.name, str):
        return info.name
    return typer.main.get_command_name(info.callback.__name__) if info.callback is not None else None


def click_app() -> Any:
    """``app`` as the click group typer makes of it, with its subcommands made on first use."""
    names = [_command_name(info) for info in app.registered_commands]
    names += [info.name if isinstance(info.name, str) else None for info in app.registered_groups]
    if any(name is None for name in names) or len(set(names)) != len(names):
        return typer.main.get_command(app)  # a name typer decides: let it make every command
    top = copy.copy(app)
    top.registered_commands = []
    top.registered_groups = []
    group = typer.main.get_command(top)
    group.commands = _LazyCommands(app, [name for name in names if name is not None])
    return group


class _Console(Console):
    """Rich's console, except that a reader closing the pipe (``plan ... | head``) ends the run
    the way ``main`` ends every closed pipe, quietly (rich's own handler exits with status 1)."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError


def console() -> Console:
    """Rich console; when output is piped, 120 columns instead of rich's default 80 so the
    ranking table is not truncated, and no highlighting of numbers and such in printed text, which
    would only colour it (a piped console writes no colours)."""
    out = _Console()
    return out if out.is_terminal else _Console(width=120, highlight=False)


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
        result = click_app()(args=argv, standalone_mode=False, prog_name="plan")
        sys.stdout.flush()  # a closed pipe shows here, inside the handler, not at interpreter exit
    except PlannerError as err:
        sys.stderr.write(f"error: {one_line(str(err))}\n")
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
            commands = getattr(getattr(ctx, "command", None), "commands", None)
            if message == "Missing command." and commands:  # a group: name what it runs (`plan list`)
                message = f"Missing command: one of {', '.join(sorted(commands))}."
            sys.stderr.write(f"error: {message}{where}\n")
            return 2
        if _is_a(err, "Abort"):  # click's Ctrl-C: 130 = 128 + SIGINT, the shell's convention
            sys.stderr.write("aborted\n")
            return 130
        raise
    return int(result) if isinstance(result, int) else 0


def one_line(message: str) -> str:
    """An error message as one line: a line break or other control character the user typed into a
    name or path (``--model $'gpt2\\n'``) shown escaped, as Python writes it in a string."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)


def entry() -> None:
    """The ``plan`` script and ``python -m planner``. Before its first validator pydantic reads the
    entry points of every installed distribution, looking for plugins (15-30 ms); ``plan`` uses
    none, so it skips that unless the caller set pydantic's switch ``PYDANTIC_DISABLE_PLUGINS``."""
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    sys.exit(main())
