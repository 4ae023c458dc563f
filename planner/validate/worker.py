"""One rank of a replay (torch): join the process group, build each block's groups, time every
term, and report through ``emit``.

Groups of a candidate come from ``torch.distributed.device_mesh``: the world's ranks laid out by
the plan's rank order (innermost axis fastest), reshaped to (replica, pp, dp, cp, tp); dense
gradients reduce over dp x cp (the flattened sub-mesh, as Megatron-LM does); expert groups
re-split each stage's tp*cp*dp ranks, taken in rank order, as (expert-DP, EP, expert-TP), expert-TP
innermost (Megatron-Core's MoE parallel folding, ARCHITECTURE 8.1). The sweep's groups are the
first w ranks. Every group gets the replay's timeout.

Events: ('joining',) as the rank starts the rendezvous (torch imported), ('ready',) once it has
joined the world; per term ('enter', block, term) before
it, ('leave', block, term) after it, and on rank 0 ('result', Measurement) in between; ('done',)
at the end; ('error', message) when anything raises (the rank then exits with code 1).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from datetime import timedelta
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh

from planner.validate.bench import barrier, time_call
from planner.validate.layer import layer_call
from planner.validate.ops import collective_call, gemm_call
from planner.validate.runtime import STARTUP_S, die_with_parent
from planner.validate.schemas import Measurement, ReplayBlock, ReplayJob, ReplicaMesh

Emit = Callable[[str, Any], None]
MESH_DIMS = ("replica", "pp", "dp", "cp", "tp")


def mesh_rank_tensor(mesh: ReplicaMesh) -> np.ndarray:
    """Global ranks of the replica mesh as an array of shape (replica, pp, dp, cp, tp): ranks
    fill the plan's order innermost first (``order`` 'tp-cp-dp-pp': tp neighbours adjacent)."""
    inner_first = mesh.order.split("-")
    sizes = [getattr(mesh, axis) for axis in reversed(inner_first)]
    ranks = np.arange(mesh.replicas * mesh.ranks_per_replica).reshape([mesh.replicas, *sizes])
    outer_first = ["replica", *reversed(inner_first)]
    return ranks.transpose([outer_first.index(d) for d in MESH_DIMS])


def expert_rank_groups(mesh: ReplicaMesh, axis: str) -> list[list[int]]:
    """Rank lists of every ep, etp or edp group: each stage's tp*cp*dp ranks, sorted, reshaped as
    (expert-DP, EP, expert-TP)."""
    ranks = mesh_rank_tensor(mesh)
    fold = mesh.tp * mesh.cp * mesh.dp
    position = {"edp": 0, "ep": 1, "etp": 2}[axis]
    groups: list[list[int]] = []
    for replica in range(mesh.replicas):
        for stage in range(mesh.pp):
            stage_ranks = np.sort(ranks[replica, stage].reshape(-1))
            split = stage_ranks.reshape(fold // (mesh.ep * mesh.expert_tp), mesh.ep, mesh.expert_tp)
            lines = np.moveaxis(split, position, -1).reshape(-1, split.shape[position])
            groups += [[int(r) for r in line] for line in lines]
    return groups


def _group_options(backend: str, timeout: timedelta) -> Any:
    options = dist.ProcessGroupNCCL.Options() if backend == "nccl" else dist.ProcessGroupGloo._Options()
    options._timeout = timeout
    return options


def mesh_groups(job: ReplayJob, mesh: ReplicaMesh, needed: set[str], device: torch.device) -> dict[str, Any]:
    """This rank's process group for each name in ``needed`` (None where it is in no such group)."""
    timeout = timedelta(seconds=job.timeout_s)
    ranks = mesh_rank_tensor(mesh)
    member = dist.get_rank() < ranks.size  # ranks past the replicas idle (replica.fit_replica)
    device_mesh = DeviceMesh(
        device.type,
        torch.as_tensor(ranks),
        mesh_dim_names=MESH_DIMS,
        # one options object per dimension: creating a group writes its name into the object
        backend_override=tuple((job.backend, _group_options(job.backend, timeout)) for _ in MESH_DIMS),
    )
    groups: dict[str, Any] = {}
    for name in ("tp", "cp", "pp", "dp"):
        groups[name] = device_mesh.get_group(name) if member else None
    if "dp_cp" in needed:
        groups["dp_cp"] = device_mesh["dp", "cp"]._flatten("dp_cp").get_group() if member else None
    for name in ("ep", "etp", "edp"):
        if name in needed:
            mine, _ = dist.new_subgroups_by_enumeration(expert_rank_groups(mesh, name), timeout=timeout)
            groups[name] = mine
    return groups


def prefix_group(size: int, cache: dict[int, Any], timeout: timedelta) -> Any:
    """The group of ranks 0..size-1 (every rank must call this, members or not)."""
    if size not in cache:
        cache[size] = dist.new_group(list(range(size)), timeout=timeout)
    return cache[size] if dist.get_rank() < size else None


def run_block(job: ReplayJob, index: int, block: ReplayBlock, device: torch.device, emit: Emit, cache: dict) -> None:
    """Time every term of one block; rank 0 emits each Measurement."""
    timeout = timedelta(seconds=job.timeout_s)
    needed = {t.group for t in block.terms}
    groups = mesh_groups(job, block.mesh, needed, device) if block.mesh is not None else {}
    # Every group before the first timed call: group creation waits on peers without the
    # per-call timeout, so a rank that fails mid-run does so inside a timed collective.
    for size in sorted({t.group_size for t in block.terms if t.group.startswith("first:")}):
        prefix_group(size, cache, timeout)
    rank = dist.get_rank()
    comm_dtype = torch.bfloat16 if job.backend == "nccl" else torch.float32
    for i, term in enumerate(block.terms):
        emit("enter", (index, i))
        if term.op in ("gemm", "layer"):
            compute_call = gemm_call if term.op == "gemm" else layer_call
            run = compute_call(term, device) if job.gemm_on_all_ranks or rank == 0 else None
        else:
            if term.group.startswith("first:"):
                group = prefix_group(term.group_size, cache, timeout)
            else:
                group = groups.get(term.group)
            member = group is not None and group != dist.GroupMember.NON_GROUP_MEMBER
            run = collective_call(term, group, device, comm_dtype, timeout) if member else None
        median, p10, p90 = time_call(run, job.warmup, job.repeats, device, timeout)
        if rank == 0:
            emit("result", Measurement(block=index, term=i, median_s=median, p10_s=p10, p90_s=p90, repeats=job.repeats))
        emit("leave", (index, i))
    barrier(device, timeout)


def run_job(job: ReplayJob, device: torch.device, emit: Emit) -> None:
    """Every block in order, on an initialised process group."""
    cache: dict[int, Any] = {}
    for index, block in enumerate(job.blocks):
        run_block(job, index, block, device, emit, cache)


def init(job: ReplayJob, rank: int, world_size: int, local_rank: int, init_method: str) -> torch.device:
    """Join the world (rendezvous allowance ``STARTUP_S``); one thread per rank on CPU (the profile's
    numbers are one-core measurements), one GPU per rank with NCCL."""
    if job.backend == "nccl":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(1)
    dist.init_process_group(
        job.backend,
        init_method=init_method,
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=max(job.timeout_s, STARTUP_S)),
    )
    return device


def spawned_entry(
    payload: dict, rank: int, world_size: int, init_method: str, pipe: Connection, parent_pid: int
) -> None:
    """Entry point of a locally spawned rank: events go as (kind, data) to ``pipe``, this rank's
    own (sent synchronously: no feeder thread, no lock shared with other ranks). The rank dies
    with the launcher (``die_with_parent``): a killed ``plan validate`` leaves no orphaned ranks."""
    die_with_parent(parent_pid)

    def emit(kind: str, data: Any) -> None:
        pipe.send((kind, data.model_dump() if isinstance(data, Measurement) else data))

    try:
        job = ReplayJob.model_validate(payload)
        emit("joining", None)  # torch imported: the rendezvous starts
        device = init(job, rank, world_size, rank, init_method)
        emit("ready", None)
        run_job(job, device, emit)
        dist.destroy_process_group()
        emit("done", None)
    except BaseException as err:  # report, then exit non-zero: the parent names this rank
        lines = traceback.format_exception_only(type(err), err)
        try:
            emit("error", " ".join(lines[-1].split()) if lines else type(err).__name__)
        except OSError:  # the launcher is gone (its end of the pipe closed): nobody to tell
            pass
        raise SystemExit(1) from None
