"""Paper reproduction: the accuracy benchmark's published runs, with explicit tolerances.

Sources per run in benchmarks/data/published_runs.yaml (Narayanan et al. 2021 Table 1;
Korthikanti et al. 2022 Tables 3 and 5; BLOOM-176B). The profile is dgx-a100-80g as shipped.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("accuracy", ROOT / "benchmarks" / "accuracy.py")
assert _spec and _spec.loader
accuracy = importlib.util.module_from_spec(_spec)
sys.modules["accuracy"] = accuracy
_spec.loader.exec_module(accuracy)

CASES = {case.name: case for case in accuracy.cases()}
KORTHIKANTI = [name for name in CASES if name.startswith("korthikanti2022") and "dp8" not in name]


def _error(name: str) -> float:
    case = CASES[name]
    predicted, _ = accuracy.predict(case)
    return (predicted - case.published) / case.published


@pytest.mark.parametrize("name", KORTHIKANTI)
def test_korthikanti_iteration_times_within_6_percent(name: str) -> None:
    # Korthikanti et al. 2022, Tables 3 and 5: iteration time with selective and full recompute.
    assert abs(_error(name)) < 0.06


def test_korthikanti_mean_error_beats_the_best_published_model() -> None:
    # The target: <= 3.5% over the eight cases (best published analytical model: 3.65%).
    assert len(KORTHIKANTI) == 8
    assert sum(abs(_error(n)) for n in KORTHIKANTI) / 8 <= 0.035


def test_all_published_runs_mean_error() -> None:
    # Regression guard at the level reached (6.1% on 2026-11-30); the target is 5%.
    errors = [abs(_error(n)) for n in CASES]
    assert len(errors) == 20
    assert sum(errors) / len(errors) <= 0.065


@pytest.mark.parametrize("run", sorted({name.split(" ")[0] for name in CASES}))
def test_the_search_never_loses_to_the_published_mesh(run: str) -> None:
    # Issue 4's sanity check: same GPUs, batch, sequence length and software, mesh unpinned; the
    # planner's best must be no slower than the paper's mesh by the planner's own model, and
    # where it differs the explanation names the terms the published mesh loses on.
    case = next(c for name, c in CASES.items() if name.split(" ")[0] == run)
    published, best = accuracy.planner_vs_published(case)
    assert best.step_time_s <= published.step_time_s * (1 + 1e-9)
    if best.step_time_s < published.step_time_s * (1 - 1e-9):
        why = accuracy.where_it_loses(best, published)
        assert "slower, most of it" in why, why
