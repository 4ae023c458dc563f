"""The README's library example runs as written."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_example_runs(capsys) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README has no python example"
    for block in blocks:
        exec(compile(block, str(README), "exec"), {})
    out = capsys.readouterr().out
    assert "s/step" in out and "GiB per GPU" in out


def test_readme_commands_match_ci() -> None:
    text = README.read_text()
    ci = (README.parent / ".ci" / "run").read_text()
    test_command = ci.strip().splitlines()[-1]
    assert test_command in text
    assert "plan --model llama70b --cluster dgx-h100x16" in text


def test_package_api_names_are_functions_after_submodule_imports() -> None:
    # A submodule named like an API function would replace it on first import.
    import planner
    import planner.pricing
    import planner.search

    assert callable(planner.plan) and callable(planner.estimate)
    assert not hasattr(planner.estimate, "__path__") and type(planner.estimate).__name__ == "function"


def test_library_job_overrides_are_revalidated() -> None:
    import pytest

    import planner
    from planner.schemas import JobSpec

    job = JobSpec(global_batch_size=512, seq_len=8192)
    est = planner.estimate("llama70b", "dgx-h100x16", job=job, seq_len=4096, tp=8, pp=2, dp=8)
    assert est.config.job.global_batch_size == 512 and est.config.job.global_batch_tokens == 512 * 4096
    est = planner.estimate("llama70b", "dgx-h100x16", job=job, global_batch_tokens=2**20, tp=8, pp=2, dp=8)
    assert est.config.job.global_batch_size == 128
    with pytest.raises(planner.PlannerError, match="seq_len"):
        planner.estimate("llama70b", "dgx-h100x16", job=job, seq_len=-5, tp=8, pp=2, dp=8)
