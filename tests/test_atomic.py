"""Atomic output: the file appears whole, readable, with no temporary file left; failures are one line."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from planner.atomic import atomic_path, write_text_atomic
from planner.errors import PlannerError


def test_write_replaces_whole_and_leaves_nothing_else(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    target.write_text("old")
    write_text_atomic(target, "new\n")
    assert target.read_text() == "new\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_a_failing_writer_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "plan.png"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(target, "--plot") as tmp:
        assert tmp.suffix == ".png" and tmp.parent == tmp_path
        tmp.write_text("half")
        raise RuntimeError("writer died")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["plan.png"]


def test_a_missing_folder_is_one_planner_error(tmp_path: Path) -> None:
    with pytest.raises(PlannerError, match=r"^--out .*nope/x.yaml: cannot write: No such file or directory$"):
        write_text_atomic(tmp_path / "nope" / "x.yaml", "x")
