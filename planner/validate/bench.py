"""Barrier-aligned timing of one replayed call, the slowest rank per repeat (torch).

Per repeat: every rank of the world meets at a barrier (an all-reduce of one element, so it has
the same explicit timeout as the rest), then times ``inner`` back-to-back calls with
``time.perf_counter`` (CUDA synchronised). The per-repeat times are all-reduced with MAX over
the world, the slowest rank being what a step waits for (nccl-tests reports the same). The result
is the median over repeats and their 10th and 90th percentiles, per call. ``inner`` is chosen
once from the warm-up so a repeat lasts about ``MIN_REPEAT_S``: single calls of small messages
are shorter than the barrier's own skew.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

MIN_REPEAT_S = 0.01
"""Shortest repeat worth timing: ten times gloo's ~1 ms per-step latency on loopback
(hardware_profiles/localhost-cpu.yaml), so barrier skew stays below a tenth of it."""

MAX_INNER_CALLS = 64
"""Upper bound on back-to-back calls per repeat, to keep runs short for tiny messages."""


def _max_over_world(values: torch.Tensor, timeout: timedelta) -> torch.Tensor:
    dist.all_reduce(values, op=dist.ReduceOp.MAX, async_op=True).wait(timeout=timeout)
    return values


def barrier(device: torch.device, timeout: timedelta) -> None:
    """All ranks meet here or the timeout raises."""
    _max_over_world(torch.zeros(1, device=device), timeout)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_call(
    run: Callable[[], None] | None, warmup: int, repeats: int, device: torch.device, timeout: timedelta
) -> tuple[float, float, float]:
    """(median, p10, p90) seconds per call of ``run`` over ``repeats``, max over ranks. Ranks
    with ``run`` None (not in the group, or idle for a GEMM) take part in the barriers only."""

    def timed(calls: int) -> float:
        barrier(device, timeout)
        start = time.perf_counter()
        if run is not None:
            for _ in range(calls):
                run()
            _sync(device)
        return time.perf_counter() - start

    warm = torch.tensor([max((timed(1) for _ in range(max(warmup, 1))), default=0.0)], device=device)
    slowest_single = float(_max_over_world(warm, timeout)[0])
    inner = min(max(math.ceil(MIN_REPEAT_S / max(slowest_single, 1e-9)), 1), MAX_INNER_CALLS)
    times = torch.tensor([timed(inner) / inner for _ in range(repeats)], dtype=torch.float64, device=device)
    per_repeat = _max_over_world(times, timeout).cpu().numpy()
    return float(np.median(per_repeat)), float(np.percentile(per_repeat, 10)), float(np.percentile(per_repeat, 90))
