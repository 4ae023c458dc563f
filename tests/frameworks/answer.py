"""The stdin/stdout protocol of the framework checks: a JSON list of cases in, a JSON list out
with, for each case, what the framework gave or ``{"error": "<type>: <message>"}`` for the errors
it raises to refuse. Whatever the framework prints while it works goes to stderr, so that stdout
carries only the answer (tests/test_frameworks.py reads it)."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable
from typing import Any


def answer(read: Callable[[dict[str, Any]], Any], refusals: tuple[type[BaseException], ...]) -> None:
    out = []
    with contextlib.redirect_stdout(sys.stderr):
        for case in json.load(sys.stdin):
            try:
                out.append(read(case))
            except refusals as err:
                out.append({"error": f"{type(err).__name__}: {err}"})
    json.dump(out, sys.stdout)
