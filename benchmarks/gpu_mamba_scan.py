"""Time mamba_ssm's Mamba-2 SSD scan forward and backward on a GPU beside the planner's price (issue 11).

The planner prices a hybrid model's SSD scan from a count of the bytes its Triton kernels move
(``planner.cost.compute.mamba_scan_passes_s``: five kernels forward; backward four of them again and
eleven of its own, 3.4-3.6x the forward's bytes), at the GPU's achieved HBM bandwidth: a count, not
a measurement, and the held-out Nemotron 3 rows run 11-24% below the planner (ARCHITECTURE 8.10).
This script times ``mamba_chunk_scan_combined`` (mamba_ssm's Triton SSD, what Megatron-Core's
MambaMixer runs inside ``mamba_split_conv1d_scan_combined``) forward, and forward + backward, at
the per-rank shapes of the published runs and at tilelang's benchmark shape, with and without the
z gate Megatron passes in, and prints the planner's forward and backward price of the same call on
the matching profile.

mamba_ssm is not installed: its sdist (``mamba_ssm-*.tar.gz``, which builds CUDA extensions this
script does not need) is unpacked and its Triton modules imported without the package's
``__init__`` (which imports those extensions). Wheels and sdist first, here (the device reaches
nothing outside):
  python3 -m pip download --no-deps -d .whl einops
  python3 -c "import json,urllib.request as u; f=json.load(u.urlopen('https://pypi.org/pypi/mamba-ssm/json'))\
['urls'][0]; u.urlretrieve(f['url'], '.whl/' + f['filename'])"
Run (carry .whl): bash benchmarks/gpu_mamba_check.sh. Without a GPU, ``--predict-only --profile
NAME`` prints the planner's side alone (tests/test_gpu_script.py runs that).

Prints one JSON object (times in milliseconds) and writes it to ``--out``.
"""

from __future__ import annotations

import argparse
import glob
import json
import statistics
import sys
import tarfile
import types
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.catalog import load_cluster, load_model  # noqa: E402
from planner.cost.compute import mamba_scan_passes_s  # noqa: E402
from planner.schemas.model import ModelSpec  # noqa: E402


@dataclass(frozen=True)
class Case:
    """One rank's SSD call: batch x seq tokens, H heads of dim P, G groups of state N, chunk Q."""

    name: str
    batch: int
    seq: int
    heads: int
    head_dim: int
    groups: int
    state: int
    chunk: int

    @property
    def tokens(self) -> int:
        return self.batch * self.seq


CASES = [
    # tilelang benchmark/mamba2/README.md's shape (chunk_scan forward alone 1.28 ms on an H800)
    Case("tilelang b8 s8192 h80 p64 n128 g1 q256", 8, 8192, 80, 64, 1, 128, 256),
    # Nemotron 3 Nano (64 heads x 64, 8 groups x 128, chunk 128), tp 1: the H100 rows' micro-batch 1
    # and the Blackwell rows' 2 and 4 (Megatron-Bridge's presets)
    Case("nano tp1 mbs1 s8192", 1, 8192, 64, 64, 8, 128, 128),
    Case("nano tp1 mbs2 s8192", 2, 8192, 64, 64, 8, 128, 128),
    # Nemotron 3 Super (128 heads x 64, 8 groups x 128, chunk 128): tp 1 (GB300, B300) and tp 2 (GB200)
    Case("super tp1 mbs1 s8192", 1, 8192, 128, 64, 8, 128, 128),
    Case("super tp2 mbs1 s8192", 1, 8192, 64, 64, 4, 128, 128),
]

PROFILES = {"H100": "dgx-h100", "H200": "dgx-h200", "H800": "dgx-h800", "B200": "dgx-b200", "B300": "dgx-b300"}
"""GPU name fragment -> the profile whose price is set beside the measurement."""


def model_of(case: Case) -> ModelSpec:
    """Nemotron 3 Nano's catalog entry with the case's Mamba-2 sizes (only those enter the price)."""
    shape = {
        "mamba_num_heads": case.heads,
        "mamba_head_dim": case.head_dim,
        "mamba_n_groups": case.groups,
        "ssm_state_size": case.state,
        "mamba_chunk_size": case.chunk,
    }
    return load_model("nemotron-3-nano-30b-a3b").model_copy(update=shape)


def predicted_ms(case: Case, profile: str) -> dict[str, float]:
    """The planner's forward and backward price of the case's call on ``profile``."""
    gpu = load_cluster(profile).gpu
    forward, backward = mamba_scan_passes_s(model_of(case), gpu, float(case.tokens), 1.0)
    return {"forward_ms": float(forward) * 1e3, "backward_ms": float(backward) * 1e3}


def mamba_package(source: str | None) -> Path:
    """The ``mamba_ssm`` directory of an unpacked sdist (or of the tarball, unpacked to /tmp), made
    importable with its package ``__init__`` skipped: that file imports the CUDA extensions, the
    Triton modules need none of them."""
    path = Path(source) if source else Path(sorted(glob.glob(str(ROOT / ".whl" / "mamba_ssm-*.tar.gz")))[-1])
    if path.suffix == ".gz":
        with tarfile.open(path) as archive:
            archive.extractall("/tmp/mamba-src", filter="data")
        path = next(Path("/tmp/mamba-src").glob("mamba_ssm-*"))
    package = path / "mamba_ssm"
    stub = types.ModuleType("mamba_ssm")
    stub.__path__ = [str(package)]
    sys.modules["mamba_ssm"] = stub
    return package


def import_mamba(source: str | None) -> tuple[Any, str]:
    """mamba_ssm's ``mamba_chunk_scan_combined`` (``mamba_package``) and its version."""
    package = mamba_package(source)
    from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined

    version = (package / "__init__.py").read_text().split('"')[1]
    return mamba_chunk_scan_combined, version


def time_ms(run: Any, torch: Any, repeats: int, warmup: int) -> float:
    """Median milliseconds of ``run()`` by CUDA events, after ``warmup`` calls (Triton autotunes then)."""
    for _ in range(warmup):
        run()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def measure(case: Case, scan: Any, torch: Any, gate: bool, repeats: int, warmup: int) -> dict[str, float]:
    """Forward and forward + backward of one call, bf16 inputs as Megatron's MambaMixer passes them
    (A, D and dt_bias fp32, dt softplus), with the z gate or without."""
    dev, bf16 = "cuda", torch.bfloat16
    b, s, h, p, g, n = case.batch, case.seq, case.heads, case.head_dim, case.groups, case.state

    def leaf(*shape: int, dtype: Any = bf16, scale: float = 1.0) -> Any:
        return (torch.randn(*shape, device=dev, dtype=torch.float32) * scale).to(dtype).requires_grad_()

    x, dt = leaf(b, s, h, p), leaf(b, s, h, scale=0.5)
    big_b, big_c = leaf(b, s, g, n), leaf(b, s, g, n)
    a = (-torch.rand(h, device=dev) - 0.5).requires_grad_()
    d, dt_bias = leaf(h, dtype=torch.float32), leaf(h, dtype=torch.float32, scale=0.1)
    z = leaf(b, s, h, p) if gate else None
    grad = torch.randn(b, s, h, p, device=dev, dtype=bf16)

    def forward() -> Any:
        return scan(x, dt, a, big_b, big_c, case.chunk, D=d, z=z, dt_bias=dt_bias, dt_softplus=True)

    leaves = [t for t in (x, dt, a, big_b, big_c, d, dt_bias, z) if t is not None]

    def both() -> None:
        for t in leaves:  # no accumulation into last call's gradients: each backward writes its own
            t.grad = None
        forward().backward(grad)

    fwd = time_ms(forward, torch, repeats, warmup)
    total = time_ms(both, torch, repeats, warmup)
    return {"forward_ms": fwd, "forward_backward_ms": total, "backward_ms": total - fwd}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="mamba_scan.json")
    parser.add_argument("--profile", help="profile priced (default: from the GPU's name)")
    parser.add_argument("--mamba-src", help="unpacked mamba_ssm sdist or its tarball (default .whl/)")
    parser.add_argument("--predict-only", action="store_true", help="the planner's side only (no GPU)")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()

    report: dict[str, Any] = {"cases": []}
    scan = torch = None
    profile = args.profile
    if not args.predict_only:
        import torch

        name = torch.cuda.get_device_name()
        profile = profile or next((p for key, p in PROFILES.items() if key in name), None)
        if profile is None:
            sys.exit(f"error: --profile: no profile for GPU {name!r}; pass one of {sorted(set(PROFILES.values()))}")
        scan, version = import_mamba(args.mamba_src)
        report |= {"gpu": name, "mamba_ssm": version, "torch": torch.__version__}
        report["triton"] = __import__("triton").__version__
    if profile is None:
        sys.exit("error: --profile: --predict-only needs a profile to price")
    report["profile"] = profile
    for case in CASES:
        row: dict[str, Any] = {"case": asdict(case), "predicted": predicted_ms(case, profile)}
        if scan is not None:
            row["measured"] = measure(case, scan, torch, False, args.repeats, args.warmup)
            row["measured_with_z"] = measure(case, scan, torch, True, args.repeats, args.warmup)
            measured, price = row["measured"], row["predicted"]
            row["measured_over_predicted"] = {
                "forward": measured["forward_ms"] / price["forward_ms"],
                "backward": measured["backward_ms"] / price["backward_ms"],
            }
        report["cases"].append(row)
        print(json.dumps(row), flush=True)
    Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
