"""Shared base for every schema: frozen, unknown keys rejected, true/false never read as a number."""

from __future__ import annotations

import math
import types
from collections.abc import Mapping
from typing import Annotated, Any, Self, Union, get_args, get_origin

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator

from planner.errors import PlannerError, SchemaError

_UNIONS = (Union, types.UnionType)


def misread_value(annotation: Any, value: Any) -> str | None:
    """Why ``value`` must not be read as ``annotation``, or None when it may.

    Pydantic's lax mode reads YAML/JSON ``true`` as 1 where a number is expected and 0/1 (or
    'yes') as a flag, so ``num_hidden_layers: true`` became a one-layer model and
    ``tie_word_embeddings: 1`` a tied one, silently. A number field refuses true/false and a
    flag field anything but true/false, in containers of them too (list, tuple, dict values);
    text that reads as a number stays one (PyYAML reads '1e-6' and '1.0e300', exponents without a
    dot and sign, as text, which model and profile files write);
    str, Literal, nested schemas and mixed unions (``bool | int``) keep pydantic's own rules."""
    if get_origin(annotation) is Annotated:
        return misread_value(get_args(annotation)[0], value)
    if get_origin(annotation) in _UNIONS:
        members = [a for a in get_args(annotation) if a is not type(None)]
        if value is None or len(members) != 1:
            return None
        return misread_value(members[0], value)
    if annotation in (int, float):
        if isinstance(value, (bool, np.bool_)):
            return f"expected a number, got {str(bool(value)).lower()}"
        return out_of_range_integer(value)
    if annotation is bool:
        if not isinstance(value, (bool, np.bool_)):
            return f"expected true or false, got {value!r}"
        return None
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin in (list, tuple) and isinstance(value, (list, tuple)) and args:
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            pairs = zip(args, value, strict=False)
        else:
            pairs = ((args[0], item) for item in value)
        return next((p for a, item in pairs if (p := misread_value(a, item)) is not None), None)
    if origin is dict and isinstance(value, dict) and len(args) == 2:
        return next((p for item in value.values() if (p := misread_value(args[1], item)) is not None), None)
    return None


MAX_INTEGER = 2**63 - 1
"""The largest whole number read anywhere (a 64-bit integer): a count past it is no plan's, and one
of thousands of digits cannot even be printed (Python refuses int-to-text past 4,300 digits, and
float() past about 309), which made messages about it raise instead."""


def out_of_range_integer(value: Any) -> str | None:
    """Why an integer is too large to read (beyond ``MAX_INTEGER`` either way), or None."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INTEGER:
        return f"{integer_shown(value)} is out of range (at most 2**63 - 1 = {MAX_INTEGER:,})"
    return None


def integer_shown(value: int) -> str:
    """An integer as a message echoes it: its digits, or its size where it has too many to print."""
    if abs(value) < 10**30:
        return str(value)
    digits = int(abs(value).bit_length() * 0.30103) + 1
    return f"{'-' if value < 0 else ''}an integer of about {digits:,} digits"


REPR_ITEMS = 3
"""Models a list field's repr spells out before it shows only their count (``Frozen.__repr_args__``)."""


class Brief(str):
    """Text a repr shows as is, without quotes."""

    def __repr__(self) -> str:
        return str(self)


class Frozen(BaseModel):
    """Immutable pydantic model that rejects unknown keys (``extra="forbid"``).

    Catalog YAML and user input go through these models, so a misspelt key is an error with
    the key's name, never silently ignored; infinities and NaN are refused in every float field
    (``allow_inf_nan=False``): no size, rate or price of a plan is infinite, and JSON cannot
    carry them; true/false is refused where a number is expected and a number where a flag is
    (``misread_value``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, defer_build=True)

    def __init__(self, /, **data: Any) -> None:
        """Build from keyword arguments, as library callers do (``ModelSpec(layers=0, ...)``); bad
        input raises ``SchemaError`` (a ``PlannerError``) with the one line the CLI prints, naming the
        class and field, where pydantic would raise its multi-line ValidationError.

        Files and JSON go through ``model_validate`` (``errors.validate_as`` names the file), which
        does not call this: ``__pydantic_base_init__`` below tells pydantic this ``__init__`` only
        wraps its own, so nested models and ``model_validate`` keep pydantic's validation path and
        its error locations (pydantic's ``ModelMetaclass`` reads the flag to decide whether
        validation must call a custom ``__init__``; tests/test_schema_errors.py checks both)."""
        try:
            super().__init__(**data)
        except ValidationError as err:
            raise SchemaError(type(self).__name__, err) from None

    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    def __setattr__(self, name: str, value: Any) -> None:
        """A field is not assigned to: the project's one-line error, where pydantic raised its
        multi-line ValidationError ('Instance is frozen'; a review, 2026-12-07)."""
        if name in type(self).model_fields:
            raise PlannerError(
                f"{type(self).__name__}.{name} cannot be assigned: the object is frozen; "
                f"make a changed copy with .model_copy(update={{'{name}': ...}})"
            )
        super().__setattr__(name, value)

    def __repr_args__(self) -> Any:
        """pydantic's, with a list of more than ``REPR_ITEMS`` models shown by count and type: a
        ranking's repr had spelt out every candidate's estimate (37,000 characters for the main
        plan), which buried the answer in a notebook; the items stay in the object and its JSON."""
        for name, value in super().__repr_args__():
            if isinstance(value, list) and len(value) > REPR_ITEMS and isinstance(value[0], BaseModel):
                yield name, Brief(f"[{len(value)} {type(value[0]).__name__}]")
            else:
                yield name, value

    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any) -> Self:  # type: ignore[override]
        """pydantic's, with bad input raising ``SchemaError`` as the constructor does: a library
        caller's ``ModelSpec.model_validate({...})`` had raised pydantic's multi-line error where
        ``ModelSpec(**d)`` raised the project's one line (``errors.validate_as`` names the file)."""
        try:
            return super().model_validate(obj, **kwargs)
        except ValidationError as err:
            raise SchemaError(cls.__name__, err) from None

    @classmethod
    def model_validate_json(cls, json_data: str | bytes | bytearray, **kwargs: Any) -> Self:  # type: ignore[override]
        """As ``model_validate``, from JSON text."""
        try:
            return super().model_validate_json(json_data, **kwargs)
        except ValidationError as err:
            raise SchemaError(cls.__name__, err) from None

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """pydantic's copy, less what ``functools.cached_property`` kept of the original where
        ``update`` changes it: the cache lives in the instance ``__dict__`` beside the fields, and
        pydantic copies that whole, so a Llama-3 8B copied with a 1M vocabulary kept the 8.0B
        parameters counted for the original (``ModelSpec.parameter_counts``)."""
        copied = super().model_copy(update=update, deep=deep)
        if update:
            for name in [key for key in copied.__dict__ if key not in type(self).model_fields]:
                del copied.__dict__[name]
        return copied

    @field_validator("*", mode="before")
    @classmethod
    def _number_or_flag(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        problem = None if field is None else misread_value(field.annotation, value)
        if problem is not None:
            raise ValueError(problem)
        return value


GIB_BYTES = 1024**3
"""One GiB in bytes (binary). Memory sizes at the YAML/display edge are GiB."""

GB_BYTES = 1e9
"""One GB in bytes (decimal). Link and HBM bandwidths are quoted in GB/s or TB/s decimal."""

TB_BYTES = 1e12
"""One TB in bytes (decimal)."""

TERA = 1e12
"""Datasheets quote FLOP/s in TFLOP/s (decimal)."""


def positive_figure(value: Any) -> float | None:
    """``value`` as a float where it is a positive finite number, else None: true/false (a YAML
    ``yes`` is no figure), text, ``.nan``, ``.inf``, zero and negatives are none. How the runs files'
    published and stated figures are read (``planner.runs``, ``planner.serving.runs``)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        return None
    return float(value)
