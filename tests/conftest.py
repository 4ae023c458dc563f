"""Shared test helpers: run the CLI in-process and capture its streams and exit code."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from planner.cli import main
from planner.runs import load_runs
from planner.schemas.estimate import Estimate

SAMPLE_RUNS = Path(__file__).resolve().parent / "data" / "runs_sample.yaml"
"""Rows of modern_runs.yaml's schema that the tests price: one or more per source, feature and
refusal the translator knows."""


def sample_rows() -> dict[str, dict[str, Any]]:
    """The rows of ``SAMPLE_RUNS`` by name, parsed afresh on each call, so a test may edit its copy."""
    return {row["name"]: row for row in load_runs(SAMPLE_RUNS)}


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


@pytest.fixture(autouse=True, scope="session")
def _catalog_cache_of_the_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The parsed catalog files (planner.catalog's cache) go to a folder of the test session, not
    the user's cache folder; the CLI's subprocesses inherit it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
        yield


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


def main_winner_with_band(band: tuple[float, float] | None) -> Estimate:
    """The README main plan's winner (llama3-70b on dgx-h100x16) at 1,000 tokens/s per GPU with its
    error bar replaced by ``band``, read from '6 runs', without warnings: the fixture the band's
    rendering and its warning are checked on."""
    from planner.catalog import load_cluster, load_model
    from planner.search import default_job, search

    model = load_model("llama3-70b")
    est = search(model, load_cluster("dgx-h100x16"), default_job(model), top=1).candidates[0]
    return est.model_copy(
        update={
            "tokens_per_s_per_gpu": 1000.0,
            "tokens_per_s_per_gpu_interval": band,
            "interval_basis": "6 runs",
            "warnings": [],
        }
    )
