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


def test_published_runs_within_the_issue_11_target() -> None:
    # Issue 11: the A100 papers with each era's settings at <= 6% mean error (it replaced issue 3's
    # per-run 6% / mean 3.5% targets on the Korthikanti iteration times). The A100's sustained
    # tensor fraction is fitted from the modern A100 runs (llm-foundry, torchtitan), never from
    # these rows, so this is a check on rows the fit did not see.
    errors = {n: _error(n) for n in CASES}
    assert len(errors) == 20
    assert sum(abs(e) for e in errors.values()) / len(errors) <= 0.06
    # Every row within 11% but BLOOM-176B (+19%): priced as its partition ran (70 layers + the
    # embedding and the tied LM head as layers on 12 stages: 5 layers + head on the last rank,
    # 6 on the middle ones), the last rank is 6.4 layer-works, not the 7.4 the engine charged
    # before per-rank pricing, which had matched the published 150 TFLOP/s by double counting.
    assert max(abs(e) for n, e in errors.items() if not n.startswith("bloom")) <= 0.11
    assert abs(errors[next(n for n in errors if n.startswith("bloom"))]) <= 0.20
    assert sum(abs(errors[n]) for n in KORTHIKANTI) / len(KORTHIKANTI) <= 0.06


def test_narayanan_residuals_are_not_all_optimistic_by_much() -> None:
    # Issue 11: every Narayanan 2021 row was over-predicted by +4..13% (one sign: a missing cost).
    # Sustained clocks, overlap and loss costs bring the mean signed error under 6%.
    errors = [_error(n) for n in CASES if n.startswith("megatron2021")]
    assert len(errors) == 10
    assert abs(sum(errors) / len(errors)) <= 0.06


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
        assert "slower, most of it" in why or ", offset by " in why, why
