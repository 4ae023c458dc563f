"""Every bundled model against every bundled profile, through the CLI."""

from __future__ import annotations

import pytest

from planner.catalog import load_cluster, load_model, model_names, profile_names
from planner.schemas import Estimate

PAIRS = [(m, p) for m in model_names() for p in profile_names()]


@pytest.mark.parametrize(("model", "profile"), PAIRS, ids=[f"{m}@{p}" for m, p in PAIRS])
def test_every_model_on_every_profile(cli, model: str, profile: str) -> None:
    # Two nodes of the profile: the search either ranks meshes or says in one line why none fits.
    cluster = f"{profile}x2"
    r = cli("--model", model, "--cluster", cluster, "--top", "1", "--json")
    if r.code == 0:
        best = r.json()["candidates"][0]
        assert best["fits"] and best["step_time_s"] > 0
    else:
        # a hybrid model's pipeline keeps a block in each segment (constraint 'hybrid_pipeline'), which
        # may leave a cluster no mesh, which the one line says
        hybrid = load_model(model).is_hybrid and "'hybrid_pipeline'" in r.err
        assert r.code == 2 and (r.err.startswith("error: no mesh fits in memory") or hybrid), r.err
        assert len(r.err.strip().splitlines()) == 1
    # One plain data-parallel mesh always prices (it may not fit).
    n = load_cluster(cluster).num_gpus
    e = cli("estimate", "--model", model, "--cluster", cluster, "--dp", str(n), "-B", str(2 * n), "--json")
    assert e.code == 0, e.err
    est = Estimate.model_validate_json(e.out)
    assert est.step_time_s > 0 and est.memory_per_gpu_bytes > 0
