"""Errors the user can fix: one line, naming the file or field and what is allowed.

The CLI turns every ``PlannerError`` into ``error: <message>`` on stderr and exit code 2;
library callers catch it like any exception.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

T = TypeVar("T", bound=BaseModel)


class PlannerError(ValueError):
    """Bad input: an unknown name, a malformed file, an impossible mesh."""


class UnpriceableError(PlannerError):
    """A published row (training, ``planner.runs``, or serving, ``planner.serving.runs``) the
    planner cannot express; the message says why."""


class SchemaError(PlannerError):
    """A schema built from keyword arguments (``ModelSpec(...)``, ``JobSpec(...)``) refused its
    input: the message is one line, ``<class>: <detail>``, naming the field in ``detail``
    (``validation_detail``); ``validation`` keeps pydantic's error for callers that report a
    particular field their own way (``pricing.out_of_range``), ``detail`` the line without the
    class for callers that name the input themselves (``runs``: 'parallel: ...')."""

    def __init__(self, where: str, validation: ValidationError) -> None:
        self.detail = validation_detail(validation)
        super().__init__(f"{where}: {self.detail}")
        self.validation = validation


def describe_validation_error(err: ValidationError, where: str) -> str:
    """Render the first pydantic error as one line: ``where: field 'a.b': message``
    (``validation_detail`` after ``where``)."""
    return f"{where}: {validation_detail(err)}"


UNION_BRANCH_TAGS = frozenset({"str", "int", "float", "bool", "none", "list", "dict", "tuple"})
"""Segments pydantic puts in an error's location for the branch of a union it tried (``stack: str
| Stack`` reports 'stack.str' and 'stack.function-after[..., Stack].nam'), which name no field."""


def field_path(loc: tuple[Any, ...]) -> str:
    """An error location as the field path a person wrote, 'a.b': without pydantic's union branches
    and validator wrappers (a review, 2026-12-07: an inline stack with a misspelt key had been named
    'stack.function-after[_unasked_stage_runs(), function-after[...]]]]].nam', 470 characters)."""
    wrappers = ("function-", "json-or-python[", "lax-or-strict[")
    parts = [str(part) for part in loc]
    kept = [p for p in parts if p not in UNION_BRANCH_TAGS and not p.startswith(wrappers)]
    kept = [p for p in kept if not (p[:1].isupper() and p.isidentifier() and "_" not in p)]  # a model branch: Stack
    return ".".join(kept)


def validation_detail(err: ValidationError) -> str:
    """The first pydantic error as one line, ``field 'a.b': message`` (no field where the check is
    the whole model's), and a count of the rest.

    Pydantic reports every failing field; one line with the first (and a count of the rest) is
    what a person can act on.
    """
    import difflib

    errors = err.errors()
    missing = [field_path(e["loc"]) for e in errors if e["type"] == "missing"]
    unknown = [e for e in errors if e["type"] == "extra_forbidden"]

    def near(e: Any) -> list[str]:
        return difflib.get_close_matches(field_path(e["loc"]), missing, n=1, cutoff=0.6)

    # a misspelt key is both an unknown key and a missing one: the unknown key names the mistake, the
    # one with a near missing name first (a review, 2026-12-07: JobSpec(seqlen=4096) had been told
    # 'seq_len: required key is missing')
    first = next((e for e in unknown if near(e)), unknown[0]) if unknown and missing else errors[0]
    loc = field_path(first["loc"])
    msg = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        close = near(first)
        hint = f"did you mean '{close[0]}'?" if close else "not allowed here; check the spelling"
        msg = f"unknown key ({hint})"
    elif first["type"] == "missing":
        msg = "required key is missing"
    more = len(err.errors()) - 1
    tail = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    field = f"field '{loc}': " if loc else ""
    return f"{field}{msg}{tail}"


def validate_as(schema: type[T], data: dict[str, Any], where: str) -> T:
    """``schema.model_validate(data)`` with a one-line error naming ``where`` and the field."""
    try:
        return schema.model_validate(data)
    except ValidationError as err:
        raise PlannerError(describe_validation_error(err, where)) from None
    except SchemaError as err:  # the project's schemas raise their own (schemas.base.Frozen.model_validate)
        raise PlannerError(describe_validation_error(err.validation, where)) from None


def validate_field(schema: type[BaseModel], name: str, value: Any, where: str) -> Any:
    """``value`` checked against one field of ``schema`` alone (its type, range and choices), as the
    whole schema would check it (true/false is no number, nor a number a flag: ``misread_value``);
    a one-line error names ``where`` and the field."""
    from typing import Annotated

    from pydantic import ConfigDict, TypeAdapter

    from planner.schemas.base import misread_value

    field = schema.model_fields[name]
    misread = misread_value(field.annotation, value)
    if misread is not None:
        raise PlannerError(f"{where}: field '{name}': {misread}")
    kind = Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
    config = ConfigDict(allow_inf_nan=schema.model_config.get("allow_inf_nan", True))  # the schema's own
    try:
        return TypeAdapter(kind, config=config).validate_python(value)
    except ValidationError as err:
        raise PlannerError(describe_validation_error(err, f"{where}: field '{name}'")) from None


def shown(text: str) -> str:
    """``text`` as an error message echoes it: a name of thousands of characters cut to its start,
    so the message stays one readable line."""
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text)} characters)"


def shown_value(value: Any) -> str:
    """A value read from YAML or JSON as the file spells it (null, true, 'text' quoted, 2.0)."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    return shown(repr(value))
