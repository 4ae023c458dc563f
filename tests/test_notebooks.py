"""notebooks/ run top to bottom (nbclient, CPU) and keep their outputs in the file."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def test_the_four_walkthroughs_are_there() -> None:
    assert [p.name[:2] for p in NOTEBOOKS] == ["01", "02", "03", "04"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_top_to_bottom(path: Path) -> None:
    saved = nbformat.read(path, as_version=4)
    code = [c for c in saved.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code), "saved after running every cell"
    assert sum(len(c.outputs) for c in code) >= 3, "the outputs are saved in the file"
    fresh = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(
        fresh, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    errors = [o for c in fresh.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
