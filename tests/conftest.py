"""Shared test helpers: run the CLI in-process and capture its streams and exit code."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from planner.cli import main


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]):
    """``cli("show", "model", "llama3-70b")`` -> Result(code, stdout, stderr)."""

    def run(*args: str) -> Result:
        code = main(list(args))
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


def assert_one_line_error(result: Result, *fragments: str) -> None:
    """Exit code 2, a single 'error: ...' line on stderr naming every fragment, no traceback."""
    assert result.code == 2, (result.code, result.out, result.err)
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith("error: "), lines[0]
    assert "Traceback" not in result.err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
