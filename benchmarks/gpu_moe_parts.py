"""Time the parts of one rank's routed-expert MLP as Megatron-Core's TEGroupedMLP runs them (GPU).

Issue 11/12: Megatron-Bridge's GPT-OSS-120B rows run 30-45% slower than the planner prices them
while other MoE models of the same tables fit within ~10%. This script times, on one GPU, each
part of the expert MLP of one expert-parallel rank at the published meshes' per-rank shapes
(force-balanced routing, as the benchmarks run), forward and forward+backward:

- ``fc1`` / ``fc2``: the local experts' GEMMs one cuBLAS call per expert (what Transformer
  Engine's GroupedLinear issues, here on one stream), and the same as one ``torch._grouped_mm``;
- ``act``: Megatron-Core's own activation code (``megatron.core.fusions``): GPT-OSS's
  ``weighted_bias_quick_geglu_impl`` with the clamp (7.0) and linear offset (1.0), the other models'
  ``weighted_bias_swiglu_impl``; both scale by the router probabilities;
- ``bias``: ``TEGroupedMLP._apply_bias`` (fc2's bias added per expert in a Python loop), where the
  model has expert biases;
- ``chain``: the whole fc1 -> act -> fc2 -> bias chain, forward and backward through autograd.

Megatron-Core is imported from the environment (``pip install megatron-core==0.16.1``); without it
the ``act`` and ``bias`` parts fall back to the same arithmetic written here, and say so. Prints
one JSON object (times in seconds, shapes, the GPU) and writes it to ``--out``.

Usage (on the device machine): python3 benchmarks/gpu_moe_parts.py --out $OUT/moe_parts.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch


@dataclass(frozen=True)
class Case:
    """One rank's expert MLP at a published mesh (balanced routing: every local expert gets
    tokens x top-k / local experts rows)."""

    name: str
    hidden: int
    ffn: int
    top_k: int
    local_experts: int
    tokens: int
    geglu: bool  # GPT-OSS's clamped quick-GEGLU with offset 1 (else SwiGLU)
    bias: bool  # experts carry fc1/fc2 biases

    @property
    def rows(self) -> int:
        return self.tokens * self.top_k


CASES = [
    # GPT-OSS-120B (hidden 2880, expert ffn 2880, top-4 of 128): Bridge 25.11 B200 row, EP 8, mbs 4 x 4,096.
    Case("gpt-oss-120b ep8 mbs4 s4096", 2880, 2880, 4, 16, 16384, True, True),
    # The GB200/GB300 25.11 'initial' rows: EP 64 (2 local experts), mbs 4 x 4,096.
    Case("gpt-oss-120b ep64 mbs4 s4096", 2880, 2880, 4, 2, 16384, True, True),
    # Qwen3-30B-A3B (hidden 2048, expert ffn 768, top-8 of 128): the 25.11 GB200/GB300 rows, EP 8, mbs 4.
    Case("qwen3-30b-a3b ep8 mbs4 s4096", 2048, 768, 8, 16, 16384, False, False),
    # Qwen3-235B-A22B (hidden 4096, expert ffn 1536, top-8 of 128): the B200 rows, EP 8, mbs 1.
    Case("qwen3-235b-a22b ep8 mbs1 s4096", 4096, 1536, 8, 16, 4096, False, False),
]


def megatron_parts() -> tuple[Callable, Callable, Callable, str]:
    """Megatron-Core's activation functions and TEGroupedMLP._apply_bias, or local copies."""
    try:
        import megatron.core
        from megatron.core.fusions.fused_bias_geglu import weighted_bias_quick_geglu_impl
        from megatron.core.fusions.fused_bias_swiglu import weighted_bias_swiglu_impl
        from megatron.core.transformer.moe.experts import TEGroupedMLP

        return (
            weighted_bias_quick_geglu_impl,
            weighted_bias_swiglu_impl,
            TEGroupedMLP._apply_bias,
            f"megatron-core {megatron.core.__version__}",
        )
    except Exception as exc:
        return _geglu_local, _swiglu_local, _bias_local, f"local copies (megatron-core: {exc!r:.200})"


def _geglu_local(x, bias, probs, fp8_store=False, offset=0.0, clamp=None):
    a, b = x.chunk(2, -1)
    if clamp is not None:
        a, b = a.clamp(max=clamp), b.clamp(min=-clamp, max=clamp)
    return (a * torch.sigmoid(1.702 * a) * (b + offset) * probs).to(x.dtype)


def _swiglu_local(x, bias, probs, fp8_store=False):
    a, b = x.chunk(2, -1)
    return (torch.nn.functional.silu(a) * b * probs).to(x.dtype)


def _bias_local(t, biases, counts, probs):
    parts = zip(torch.split(t, counts), biases, torch.split(probs, counts), strict=True)
    return torch.cat([x + b * p for x, b, p in parts]).to(t.dtype)


def timed(fn: Callable[[], object], sync: Callable[[], None], warmup: int, iters: int) -> float:
    """Median seconds of one call over ``iters`` calls, timed in five batches after ``warmup``."""
    for _ in range(warmup):
        fn()
    sync()
    per_call = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        sync()
        per_call.append((time.perf_counter() - start) / iters)
    return statistics.median(per_call)


def run_case(
    case: Case, dev: torch.device, dtype: torch.dtype, probs_dtype: torch.dtype, warmup: int, iters: int
) -> dict:
    geglu, swiglu, apply_bias, _ = megatron_parts()
    if hasattr(torch, "_dynamo"):  # each case compiles Megatron's fused functions at its own static shapes
        torch._dynamo.reset()
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    gen = torch.Generator(device=dev).manual_seed(0)
    e, h, f, r = case.local_experts, case.hidden, case.ffn, case.rows
    counts = [r // e] * e
    counts[-1] += r - sum(counts)

    def rand(*shape: int, scale: float = 0.02) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen, device=dev) * scale).to(dtype).requires_grad_()

    x = rand(r, h, scale=1.0)
    w1 = [rand(h, 2 * f) for _ in range(e)]
    w2 = [rand(f, h) for _ in range(e)]
    b1 = [rand(2 * f) for _ in range(e)] if case.bias else None
    b2 = [rand(h) for _ in range(e)] if case.bias else None
    probs = torch.rand(r, 1, generator=gen, device=dev, dtype=torch.float32).to(probs_dtype).requires_grad_()
    gy = torch.randn(r, h, generator=gen, device=dev).to(dtype)
    offs = torch.tensor(counts, device=dev).cumsum(0).to(torch.int32)

    def fc1(inp: torch.Tensor) -> torch.Tensor:
        outs = []
        for i, part in enumerate(torch.split(inp, counts)):
            y = part @ w1[i]
            outs.append(y + b1[i] if b1 is not None else y)  # TE GroupedLinear adds fc1's bias
        return torch.cat(outs)

    def fc2(inp: torch.Tensor) -> torch.Tensor:
        return torch.cat([part @ w2[i] for i, part in enumerate(torch.split(inp, counts))])

    def act(y: torch.Tensor) -> torch.Tensor:
        if case.geglu:
            return geglu(y, None, probs, False, 1.0, 7.0)
        return swiglu(y, None, probs, False)

    def act_noclamp(y: torch.Tensor) -> torch.Tensor:
        return geglu(y, None, probs, False, 1.0, None)

    def act_swiglu(y: torch.Tensor) -> torch.Tensor:
        return swiglu(y, None, probs, False)

    def bias(y: torch.Tensor) -> torch.Tensor:
        return apply_bias(y, b2, counts, probs) if b2 is not None else y

    def chain(inp: torch.Tensor) -> torch.Tensor:
        return bias(fc2(act(fc1(inp))))

    with torch.no_grad():
        y1 = fc1(x).detach().requires_grad_()
        a1 = act(y1).detach().requires_grad_()
        y2 = fc2(a1).detach().requires_grad_()

    leaves = [x, probs, *w1, *w2, *(b1 or []), *(b2 or []), y1, a1, y2]

    def fwd_bwd(fn: Callable[[torch.Tensor], torch.Tensor], inp: torch.Tensor, grad: torch.Tensor) -> None:
        for leaf in leaves:  # a fresh gradient each call: no accumulation pass that training would not run
            leaf.grad = None
        out = fn(inp)
        out.backward(grad)

    g1 = torch.randn_like(y1)
    ga = torch.randn_like(a1)
    parts: dict[str, dict[str, float]] = {}
    for name, fn, inp, grad in (
        ("fc1", fc1, x, g1),
        ("act", act, y1, ga),
        ("act_noclamp", act_noclamp, y1, ga),
        ("act_swiglu", act_swiglu, y1, ga),
        ("fc2", fc2, a1, gy),
        ("bias", bias, y2, gy),
        ("chain", chain, x, gy),
    ):
        if (name == "bias" and b2 is None) or (name in ("act_noclamp", "act_swiglu") and not case.geglu):
            continue
        with torch.no_grad():
            fwd = timed(lambda fn=fn, inp=inp: fn(inp), sync, warmup, iters)
        both = timed(lambda fn=fn, inp=inp, grad=grad: fwd_bwd(fn, inp, grad), sync, warmup, iters)
        parts[name] = {"fwd_s": fwd, "fwd_bwd_s": both}
    if dev.type == "cuda" and hasattr(torch, "_grouped_mm"):
        wt1 = torch.stack([w.detach() for w in w1])
        wt2 = torch.stack([w.detach() for w in w2])
        xin = x.detach()
        a_in = a1.detach()
        try:
            parts["fc1_grouped_mm"] = {
                "fwd_s": timed(lambda: torch._grouped_mm(xin, wt1, offs=offs), sync, warmup, iters)
            }
            parts["fc2_grouped_mm"] = {
                "fwd_s": timed(lambda: torch._grouped_mm(a_in, wt2, offs=offs), sync, warmup, iters)
            }
        except Exception as exc:
            parts["grouped_mm_error"] = {"error": repr(exc)[:300]}  # type: ignore[dict-item]
        # the experts' GEMMs alone, one cuBLAS call each: one after another, and round-robin on
        # STREAMS streams as Transformer Engine's grouped linear issues them (Stack.grouped_gemm_streams)
        in1, in2 = torch.split(xin, counts), torch.split(a_in, counts)
        w1d, w2d = [w.detach() for w in w1], [w.detach() for w in w2]
        try:
            parts["fc1_seq"] = {"fwd_s": timed(lambda: one_by_one(in1, w1d), sync, warmup, iters)}
            parts["fc2_seq"] = {"fwd_s": timed(lambda: one_by_one(in2, w2d), sync, warmup, iters)}
            parts["fc1_streams"] = {"fwd_s": timed(lambda: on_streams(in1, w1d), sync, warmup, iters)}
            parts["fc2_streams"] = {"fwd_s": timed(lambda: on_streams(in2, w2d), sync, warmup, iters)}
        except Exception as exc:
            parts["streams_error"] = {"error": repr(exc)[:300]}  # type: ignore[dict-item]
    flops_fwd = 2 * r * h * 3 * f
    return {
        **asdict(case),
        "probs_dtype": str(probs_dtype),
        "rows": r,
        "rows_per_expert": r // e,
        "gemm_flops_fwd": flops_fwd,
        "parts": parts,
        "chain_tflops_fwd_bwd": 3 * flops_fwd / parts["chain"]["fwd_bwd_s"] / 1e12,
    }


STREAMS = 4
"""Transformer Engine's grouped linear spreads its per-expert GEMMs over four compute streams
(``Stack.grouped_gemm_streams`` cites it)."""


def one_by_one(inputs: tuple[torch.Tensor, ...], weights: list[torch.Tensor]) -> list[torch.Tensor]:
    """``inputs[i] @ weights[i]`` for every expert, one after another on the current stream."""
    return [part @ weight for part, weight in zip(inputs, weights, strict=True)]


def on_streams(inputs: tuple[torch.Tensor, ...], weights: list[torch.Tensor]) -> list[torch.Tensor]:
    """``inputs[i] @ weights[i]`` for every expert, round-robin over STREAMS CUDA streams."""
    current = torch.cuda.current_stream()
    streams = [torch.cuda.Stream() for _ in range(STREAMS)]
    for stream in streams:
        stream.wait_stream(current)
    outs = []
    for i, (part, weight) in enumerate(zip(inputs, weights, strict=True)):
        with torch.cuda.stream(streams[i % STREAMS]):
            outs.append(part @ weight)
    for stream in streams:
        current.wait_stream(stream)
    return outs


def copy_bandwidth(dev: torch.device, warmup: int, iters: int) -> float:
    """Bytes per second of a device-to-device copy of 2 GiB (read + write counted)."""
    n = 2**30 if dev.type == "cuda" else 2**24
    a = torch.empty(n, dtype=torch.uint8, device=dev)
    b = torch.empty_like(a)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    return 2 * n / timed(lambda: b.copy_(a), sync, warmup, iters)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="moe_parts.json")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--scale", type=int, default=1, help="divide tokens and widths by this (CPU dry run)")
    ap.add_argument("--probs", choices=("both", "bf16"), default="both", help="router probability dtypes to run")
    args = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    result: dict = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu",
        "dtype": str(dtype),
        "activation_source": megatron_parts()[3],
        "copy_bytes_per_s": copy_bandwidth(dev, args.warmup, args.iters),
        "cases": [],
    }
    dtypes = (torch.bfloat16,) if args.probs == "bf16" else (torch.bfloat16, torch.float32)
    for case, probs_dtype in [(c, p) for p in dtypes for c in CASES]:
        if args.scale > 1:
            s = args.scale
            case = Case(
                case.name,
                case.hidden // s,
                case.ffn // s,
                case.top_k,
                case.local_experts,
                case.tokens // s,
                case.geglu,
                case.bias,
            )
        start = time.perf_counter()
        try:
            out = run_case(case, dev, dtype, probs_dtype if dev.type == "cuda" else dtype, args.warmup, args.iters)
        except Exception as exc:
            out = {"name": case.name, "error": repr(exc)[:500]}
        out["wall_s"] = time.perf_counter() - start
        result["cases"].append(out)
        print(json.dumps(out), flush=True)
    with open(args.out, "w") as fh:
        json.dump(result, fh, indent=1)
    print(json.dumps({k: v for k, v in result.items() if k != "cases"}))


if __name__ == "__main__":
    main()
