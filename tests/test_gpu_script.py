"""benchmarks/gpu_validate.sh, the prepared GPU check, run end to end on CPU: the same steps
(plan, torchrun replay with the layer shard, calibrate, plan again) with gloo and GPT-2, so the
script that runs on an H200 is the one tested here, and so is the torchrun launch path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is needed", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_script_dry_run_on_cpu(tmp_path: Path) -> None:
    env = os.environ | {
        "OUT": str(tmp_path),
        "BACKEND": "gloo",
        "MODEL": "gpt2-124m",
        "PLAN_CLUSTER": "localhost-cpu",
        "PROFILE": "localhost-cpu",
        "PLAN_NODES": "1",
        "TOP": "1",
        "NPROC": "2",
        "PYTHON": sys.executable,
        "EXTRA": "--seq-len 128 --repeats 2 --warmup 1 --max-gemm-flops 2e8",
    }
    done = subprocess.run(
        ["bash", "benchmarks/gpu_validate.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    names = {p.name for p in tmp_path.iterdir()}
    assert names == {
        "env.txt",
        "plan-before.txt",
        "validate.json",
        "validate.txt",
        "calibrate.txt",
        "localhost-cpu-measured.yaml",
        "plan-after.txt",
    }
    assert "no CUDA device" in (tmp_path / "env.txt").read_text()
    report = json.loads((tmp_path / "validate.json").read_text())
    assert report["status"] == "complete" and report["context"]["world_size"] == 2
    (cand,) = report["candidates"]
    layer = next(t for t in cand["terms"] if t["spec"]["name"] == "layer.dense")
    assert layer["measured_s"] > 0 and cand["complete"]
    from planner.catalog import load_profile

    sources = load_profile(str(tmp_path / "localhost-cpu-measured.yaml")).gpu.sources
    assert "fitted from layer shards" in sources["attention_efficiency"]
    # Provenance is the measurement's own: its host, device and torch, at the time it ran.
    context = report["context"]
    assert context["device_name"] and context["torch_version"] == torch.__version__
    where = f"measured on {context['host']} ({context['device_name']}, torch {torch.__version__}) at "
    assert sources["gemm_efficiency"].startswith(where + context["created_at"])
    assert sources["gemm_efficiency"].endswith("fitted from fp32 GEMMs")
    assert "gpt2-124m on localhost-cpu-measured" in (tmp_path / "plan-after.txt").read_text()


def test_layer_profile_dry_run_on_cpu(tmp_path: Path) -> None:
    # benchmarks/gpu_layer_profile.py (the replay's op-by-op time, for the MoE replay's gap) on a
    # small model: one dense layer shard, its predicted and measured time, and the ops that took it
    out = tmp_path / "profile.json"
    done = subprocess.run(
        [sys.executable, "benchmarks/gpu_layer_profile.py", "--small", "--rows", "5", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (case,) = json.loads(out.read_text())
    (layer,) = case["layers"]
    assert case["model"] == "gpt2-124m" and layer["term"] == "layer.dense"
    assert layer["predicted_s"] > 0 and layer["measured_s"] > 0 and 1 <= len(layer["top"]) <= 5
    assert all(row["us"] > 0 and row["calls"] >= 1 for row in layer["top"])


def test_moe_parts_dry_run_on_cpu(tmp_path: Path) -> None:
    # benchmarks/gpu_moe_parts.py (the expert epilogue measured on the H200 of 2026-12-04) at a
    # sixteenth of the widths: every case and part runs, through Megatron-Core's own activation
    # code where the frameworks extra is installed
    out = tmp_path / "parts.json"
    args = ["--scale", "16", "--probs", "bf16", "--warmup", "1", "--iters", "1", "--out", str(out)]
    done = subprocess.run(
        [sys.executable, "benchmarks/gpu_moe_parts.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads(out.read_text())
    assert [c["name"].split()[0] for c in data["cases"]] == [
        "gpt-oss-120b",
        "gpt-oss-120b",
        "qwen3-30b-a3b",
        "qwen3-235b-a22b",
    ]
    for case in data["cases"]:
        assert "error" not in case, case
        expected = {"fc1", "act", "fc2", "chain"} | ({"bias", "act_noclamp", "act_swiglu"} if case["bias"] else set())
        assert set(case["parts"]) == expected
        # forward and forward + backward each timed (their ratio is not asserted: at one call under a busy
        # CPU either can stall)
        assert all(p["fwd_s"] > 0 and p["fwd_bwd_s"] > 0 for p in case["parts"].values())
    assert data["copy_bytes_per_s"] > 0


def test_mamba_scan_check_prices_its_cases_without_a_gpu(tmp_path: Path) -> None:
    # benchmarks/gpu_mamba_scan.py (the prepared check of the Mamba-2 scan's counted price) on CPU:
    # the planner's side of every case, from the same compute.mamba_scan_passes_s the estimate uses
    out = tmp_path / "mamba_scan.json"
    command = [sys.executable, "benchmarks/gpu_mamba_scan.py", "--predict-only", "--profile", "dgx-h800"]
    done = subprocess.run([*command, "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["profile"] == "dgx-h800" and len(report["cases"]) == 5
    tilelang = report["cases"][0]
    assert tilelang["case"]["heads"] == 80 and tilelang["case"]["chunk"] == 256
    # the forward count of tilelang's shape (tests/test_hybrid.py), the backward by its own count
    assert tilelang["predicted"]["forward_ms"] == pytest.approx(1.50, abs=0.01)
    assert tilelang["predicted"]["backward_ms"] / tilelang["predicted"]["forward_ms"] == pytest.approx(3.39, abs=0.01)
    no_profile = subprocess.run([*command[:3]], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert no_profile.returncode != 0 and "error: --profile" in no_profile.stderr


def test_mamba_sources_import_without_their_package_init(tmp_path: Path) -> None:
    # the sdist's mamba_ssm/__init__.py imports CUDA extensions; the check imports the Triton modules
    # past it (benchmarks/gpu_mamba_scan.mamba_package), shown here with a stand-in tree
    package = tmp_path / "mamba_ssm-0" / "mamba_ssm"
    (package / "ops" / "triton").mkdir(parents=True)
    (package / "__init__.py").write_text('__version__ = "0"\nraise ImportError("selective_scan_cuda")\n')
    (package / "ops" / "__init__.py").write_text("")
    (package / "ops" / "triton" / "__init__.py").write_text("")
    (package / "ops" / "triton" / "ssd_combined.py").write_text("from mamba_ssm.ops import helper\nVALUE = helper.X\n")
    (package / "ops" / "helper.py").write_text("X = 7\n")
    script = (
        "import sys; sys.path.insert(0, 'benchmarks'); import gpu_mamba_scan as g; "
        f"g.mamba_package({str(package.parent)!r}); "
        "from mamba_ssm.ops.triton.ssd_combined import VALUE; print(VALUE)"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "7", done.stderr[-3000:]
