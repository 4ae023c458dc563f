"""Atomic output: the file appears whole, readable, with no temporary file left; failures are one line."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from planner.atomic import atomic_path, make_parent, write_text_atomic, write_texts_atomic
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


def test_a_missing_folder_is_made_when_the_file_is_written(tmp_path: Path) -> None:
    """``make_parent`` checks and creates nothing (a command that fails after it leaves no empty
    folder behind); the write makes the folders; one that cannot be made is one PlannerError."""
    target = tmp_path / "new" / "deeper" / "x.yaml"
    assert make_parent(target) == target and not (tmp_path / "new").exists()
    write_text_atomic(target, "x")
    assert target.read_text() == "x"
    (tmp_path / "file").write_text("in the way")
    with pytest.raises(PlannerError, match=r"^--out .*file/x.yaml: cannot write: "):
        write_text_atomic(tmp_path / "file" / "x.yaml", "x")


def test_a_name_the_file_system_refuses_is_one_planner_error(tmp_path: Path) -> None:
    with pytest.raises(PlannerError, match=r"^--plot .*: cannot write: File name too long$"):
        make_parent(tmp_path / ("a" * 300 + ".png"), "--plot")
    with pytest.raises(PlannerError, match=r"^--out .*: cannot write: File name too long$"):
        make_parent(tmp_path / ("a" * 300) / "x.sh")


def test_a_name_whose_temporary_file_is_too_long_fails_before_the_work(tmp_path: Path) -> None:
    """The write goes through '.<name>.XXXXXXXX<suffix>' beside the target: a 244-character name
    fits the file system's 255 but its temporary file does not, and the check said yes."""
    with pytest.raises(PlannerError, match="File name too long"):
        make_parent(tmp_path / ("a" * 244 + ".json"))
    assert make_parent(tmp_path / ("a" * 200 + ".json")).name.startswith("a")


def test_a_folder_that_is_a_link_to_nothing_fails_before_the_work(tmp_path: Path) -> None:
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(PlannerError, match=r"'.*dangling' is a link to nothing"):
        make_parent(tmp_path / "dangling" / "x.json")


def test_a_pipe_or_device_at_the_output_path_is_refused_not_replaced(tmp_path: Path) -> None:
    """The write renames a new file over its target: a device or a pipe there was replaced by a
    regular file (as root, --out /dev/null would have replaced /dev/null)."""
    pipe = tmp_path / "out.json"
    os.mkfifo(pipe)
    for check in (lambda: make_parent(pipe), lambda: write_text_atomic(pipe, "x")):
        with pytest.raises(PlannerError, match="is a device or pipe, not a file"):
            check()
    assert pipe.is_fifo()


def test_a_link_at_the_output_path_is_written_through(tmp_path: Path) -> None:
    real, link = tmp_path / "real.sh", tmp_path / "link.sh"
    real.write_text("old")
    link.symlink_to(real)
    write_text_atomic(make_parent(link), "new")
    assert link.is_symlink() and real.read_text() == "new"


def test_a_file_keeps_its_mode_and_a_new_one_follows_the_umask(tmp_path: Path) -> None:
    """Every write had chmod-ed its file 0644: a private 0600 file became world-readable, and a
    umask of 077 was ignored."""
    private = tmp_path / "private.txt"
    private.write_text("old")
    private.chmod(0o600)
    write_text_atomic(private, "new")
    assert stat.S_IMODE(private.stat().st_mode) == 0o600 and private.read_text() == "new"
    old = os.umask(0o077)
    try:
        write_text_atomic(tmp_path / "fresh.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "fresh.txt").stat().st_mode) == 0o600


def test_several_files_are_written_all_or_none(tmp_path: Path) -> None:
    """`plan calibrate --write` rewrites profiles and stacks together: a failure on the second left
    the first rewritten."""
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text("old a")
    second.write_text("old b")
    (tmp_path / "file").write_text("in the way")
    with pytest.raises(PlannerError, match=r"^--write .*file/c.yaml: cannot write: "):
        write_texts_atomic({first: "new a", tmp_path / "file" / "c.yaml": "new c"}, "--write")
    assert first.read_text() == "old a"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.yaml", "b.yaml", "file"]
    write_texts_atomic({first: "new a", second: "new b"}, "--write")
    assert (first.read_text(), second.read_text()) == ("new a", "new b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.yaml", "b.yaml", "file"]


def test_a_failed_rename_names_its_own_file(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The error had named the last file staged, not the one whose rename failed."""
    one, two = tmp_path / "one.yaml", tmp_path / "two.yaml"
    real = os.replace

    def refuse_one(src: str, dst: str) -> None:
        if Path(dst).name == "one.yaml":
            raise PermissionError(13, "Permission denied")
        real(src, dst)

    monkeypatch.setattr(os, "replace", refuse_one)
    with pytest.raises(PlannerError, match=r"^--write .*one\.yaml: cannot write: Permission denied$"):
        write_texts_atomic({one: "a", two: "b"}, "--write")
    assert not one.exists() and not two.exists()
    assert list(tmp_path.iterdir()) == []
