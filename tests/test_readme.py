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
