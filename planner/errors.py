"""Errors the user can fix: one line, naming the file or field and what is allowed.

The CLI turns every ``PlannerError`` into ``error: <message>`` on stderr and exit code 2;
library callers catch it like any exception.
"""

from __future__ import annotations

from pydantic import ValidationError


class PlannerError(ValueError):
    """Bad input: an unknown name, a malformed file, an impossible mesh."""


class UnpriceableError(PlannerError):
    """A published row (training, ``planner.runs``, or serving, ``planner.serving.runs``) the
    planner cannot express; the message says why."""


def describe_validation_error(err: ValidationError, where: str) -> str:
    """Render the first pydantic error as one line: ``where: field 'a.b': message``.

    Pydantic reports every failing field; one line with the first (and a count of the rest) is
    what a person can act on.
    """
    first = err.errors()[0]
    loc = ".".join(str(part) for part in first["loc"])
    msg = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        msg = "unknown key (not allowed here; check the spelling)"
    elif first["type"] == "missing":
        msg = "required key is missing"
    more = len(err.errors()) - 1
    tail = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    field = f"field '{loc}': " if loc else ""
    return f"{where}: {field}{msg}{tail}"
