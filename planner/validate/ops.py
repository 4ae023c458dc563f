"""One replayed call of a term, as a closure over preallocated tensors (torch).

Buffers hold ``message_bytes`` in the backend's natural element type (fp32 on gloo, bf16 on
NCCL), rounded up to a multiple of the group size. Conventions follow ``planner.cost.comm``:
all-reduce and all-to-all move an M-byte buffer per rank; all-gather and reduce-scatter have an
M-byte full buffer (each rank holds M/n); send/recv and the ring step send M bytes one hop. Every
wait carries the replay's timeout, so a dead peer raises instead of hanging.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import torch
import torch.distributed as dist

from planner.validate.schemas import TermSpec

# torch 2.13 renamed the tensor forms (the old names warn); torch >= 2.3 has the old ones.
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor

GEMM_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _wait_all(works: list[dist.Work | None], timeout: timedelta) -> None:
    for work in works:
        if work is not None:
            work.wait(timeout=timeout)


def _shift(term: TermSpec, group: dist.ProcessGroup, buf: torch.Tensor, timeout: timedelta) -> Callable[[], None]:
    """Each member sends ``buf`` to the next member and receives from the previous one;
    ``ring_exchange`` wraps around (a CP ring step), ``send_recv`` does not (PP stages)."""
    ranks = dist.get_process_group_ranks(group)
    me = ranks.index(dist.get_rank())
    n = len(ranks)
    wrap = term.op == "ring_exchange"
    dst = ranks[(me + 1) % n] if wrap or me + 1 < n else None
    src = ranks[(me - 1) % n] if wrap or me > 0 else None
    recv = torch.empty_like(buf)

    def run() -> None:
        works = []
        if dst is not None:
            works.append(dist.isend(buf, dst=dst, group=group))
        if src is not None:
            works.append(dist.irecv(recv, src=src, group=group))
        _wait_all(works, timeout)

    return run


def collective_call(
    term: TermSpec, group: dist.ProcessGroup, device: torch.device, dtype: torch.dtype, timeout: timedelta
) -> Callable[[], None]:
    """A function that runs one call of a collective term on ``group`` (this rank is a member)."""
    n = term.group_size
    elem = torch.tensor([], dtype=dtype).element_size()
    numel = max(-(-int(term.message_bytes) // (elem * n)) * n, n)
    buf = torch.ones(numel, dtype=dtype, device=device)
    if term.op == "all_reduce":
        return lambda: _wait_all([dist.all_reduce(buf, group=group, async_op=True)], timeout)
    if term.op == "reduce_scatter":
        shard = torch.empty(numel // n, dtype=dtype, device=device)
        return lambda: _wait_all([_REDUCE_SCATTER(shard, buf, group=group, async_op=True)], timeout)
    if term.op == "all_gather":
        part = torch.ones(numel // n, dtype=dtype, device=device)
        return lambda: _wait_all([_ALL_GATHER(buf, part, group=group, async_op=True)], timeout)
    if term.op == "all_to_all":
        out = torch.empty_like(buf)
        return lambda: _wait_all([dist.all_to_all_single(out, buf, group=group, async_op=True)], timeout)
    if term.op in ("send_recv", "ring_exchange"):
        return _shift(term, group, buf, timeout)
    raise ValueError(f"not a collective: {term.op}")


def gemm_call(term: TermSpec, device: torch.device) -> Callable[[], None]:
    """A function that runs one (M x K) @ (K x N) matmul in the term's dtype (synchronised on GPU)."""
    assert term.gemm_mnk is not None
    m, n, k = term.gemm_mnk
    dtype = GEMM_DTYPES[term.dtype]
    a = torch.randn(m, k, dtype=dtype, device=device)
    b = torch.randn(k, n, dtype=dtype, device=device)
    c = torch.empty(m, n, dtype=dtype, device=device)
    if device.type == "cuda":

        def run_cuda() -> None:
            torch.mm(a, b, out=c)
            torch.cuda.synchronize(device)

        return run_cuda
    return lambda: torch.mm(a, b, out=c)  # type: ignore[no-any-return]
