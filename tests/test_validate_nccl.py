"""The NCCL path of the validator: the same replay code as gloo, chosen by --backend. On a machine
with CUDA GPUs it runs for real under torchrun (GEMMs and a layer shard in bf16 on the GPU, NCCL
barriers and timing); without CUDA those tests skip, and asking for nccl is a one-line error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error

torch = pytest.importorskip("torch")
HAS_NCCL = torch.cuda.is_available() and torch.distributed.is_available() and torch.distributed.is_nccl_available()
NEEDS_GPU = pytest.mark.skipif(not HAS_NCCL, reason="needs a CUDA GPU and torch with NCCL")
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(HAS_NCCL, reason="checks the refusal on a machine without CUDA")
def test_nccl_without_cuda_is_a_one_line_error(cli) -> None:
    r = cli("validate", "--backend", "nccl", "--model", "gpt2", "--cluster", "dgx-h100x1", "--top", "1")
    assert_one_line_error(r, "--backend nccl", "CUDA", "--backend gloo")


def test_a_gloo_replay_is_not_priced_on_a_gpu_profile(cli) -> None:
    """gloo on CPU priced on dgx-h100 had come out at 310x its prediction, the note calling dgx-h100
    'the replay's hardware' (a review, 2026-12-07); plan calibrate refuses the same mismatch."""
    r = cli("validate", "--local-ranks", "2", "--model", "gpt2", "--cluster", "localhost-cpu", "--profile", "dgx-h100")
    assert_one_line_error(r, "--profile dgx-h100: a GPU profile, but --backend gloo replays on CPU worker processes")


def test_local_ranks_are_gloo_only(cli) -> None:
    if not HAS_NCCL:
        pytest.skip("check_backend refuses nccl first without CUDA")
    r = cli("validate", "--backend", "nccl", "--local-ranks", "2", "--model", "gpt2", "--cluster", "dgx-h100x1")
    assert_one_line_error(r, "--local-ranks", "torchrun")


@NEEDS_GPU
def test_nccl_replay_under_torchrun_on_one_gpu(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1"]
    command += ["-m", "planner", "validate", "--backend", "nccl", "--model", "gpt2-124m", "--cluster", "dgx-h100x1"]
    command += ["--profile", "dgx-h100", "--top", "1", "--repeats", "3", "--warmup", "1", "--out", str(out)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["status"] == "complete" and report["context"]["device"] == "cuda"
    (cand,) = report["candidates"]
    terms = {t["spec"]["name"]: t for t in cand["terms"]}
    assert "layer.dense" in terms and terms["layer.dense"]["spec"]["dtype"] == "bf16"  # on by default with nccl
    assert all(t["measured_s"] > 0 for t in terms.values())
