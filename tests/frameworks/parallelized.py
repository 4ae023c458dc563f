"""What the torchtitan parallelize checks report of each rank (tests/frameworks/
torchtitan_parallelize.py for 0.2.2, torchtitan03_parallelize.py for 0.3.0), in one place: the
fake process group a rank runs under, and for each model part it holds, its pipeline stage and
decoder layers, which blocks are wrapped for activation checkpointing (``CheckpointWrapper``) and
for FSDP (``FSDPModule``) and which of those free their gathered weights after forward, whether
it holds the embedding and the output head, its parameters' elements before data-parallel
sharding, and the DTensor placements of one attention and one expert weight. It imports torch
only, so either release's script imports it after putting its own torchtitan in place; the
releases differ in module names and mesh-dimension names, which the scripts pass in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor
from torch.testing._internal.distributed.fake_pg import FakeStore

REFUSALS = (AssertionError, ValueError, TypeError, KeyError, RuntimeError, NotImplementedError)
"""What torchtitan or torch raise to refuse a rank's configuration: the answer for that rank."""


def fake_rank(rank: int, world: int) -> None:
    """torch's fake process-group backend (collectives return at once, no data moves) standing in
    for ``world`` ranks, as ``rank``."""
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)


def per_rank(ranks: list[int], run: Callable[[int], dict[str, Any]]) -> dict[str, Any]:
    """``run(rank)`` for each rank, or the error torchtitan or torch raised for it."""
    out: dict[str, Any] = {}
    for rank in ranks:
        try:
            out[str(rank)] = run(rank)
        except REFUSALS as err:
            out[str(rank)] = {"error": f"{type(err).__name__}: {err}"}
    return out


def stage_indices(schedule: Any) -> list[int]:
    """The pipeline stage indices a rank's schedule runs (one stage, or the interleaved ones)."""
    return [stage.stage_index for stage in list(getattr(schedule, "_stages", None) or [schedule._stage])]


def model_parallel_elements(module: torch.nn.Module, data_parallel: tuple[str, ...]) -> int:
    """The parameters' elements on this rank before data-parallel sharding: each DTensor's global
    size divided by the mesh dims it is sharded over other than ``data_parallel``."""
    total = 0
    for param in module.parameters():
        if not isinstance(param, DTensor):
            total += param.numel()
            continue
        names = param.device_mesh.mesh_dim_names or ()
        ways = 1
        for i, (dim, placement) in enumerate(zip(names, param.placements, strict=True)):
            if placement.is_shard() and dim not in data_parallel:
                ways *= param.device_mesh.size(i)
        total += param.numel() // ways
    return total


def placements(module: torch.nn.Module, suffixes: tuple[str, ...]) -> list[str] | None:
    """The DTensor mesh dims and placements of the first parameter whose name ends in one of
    ``suffixes`` ([] for a plain tensor, None where there is none)."""
    for name, param in module.named_parameters():
        if name.endswith(suffixes):
            if isinstance(param, DTensor):
                names = param.device_mesh.mesh_dim_names or ()
                return [f"{d}:{p}" for d, p in zip(names, param.placements, strict=True)]
            return []
    return None


def reshards(block: torch.nn.Module) -> bool:
    """Whether FSDP frees the block's gathered weights after its forward (ZeRO-3) rather than
    keeping them for backward (ZeRO-2): each of its parameter groups (a MoE block's experts are
    a group of their own, on the expert mesh) has a post-forward mesh."""
    if not isinstance(block, FSDPModule):
        return False
    groups = block._get_fsdp_state()._fsdp_param_groups
    return bool(groups) and all(group.post_forward_mesh_info is not None for group in groups)


def part_report(
    stage: int,
    part: torch.nn.Module,
    head: str,
    wq: tuple[str, ...],
    experts: tuple[str, ...],
    data_parallel: tuple[str, ...],
) -> dict[str, Any]:
    """What the test compares of one model part: the release's output-head attribute ``head``,
    query and expert weight names ``wq`` and ``experts``, and data-parallel mesh dims."""
    layers = part.get_submodule("layers")
    return {
        "stage": stage,
        "layers": [int(i) for i, _ in layers.named_children()],
        "checkpointed": [int(i) for i, block in layers.named_children() if isinstance(block, CheckpointWrapper)],
        "sharded": [int(i) for i, block in layers.named_children() if isinstance(block, FSDPModule)],
        "resharded": [int(i) for i, block in layers.named_children() if reshards(block)],
        "embedding": getattr(part, "tok_embeddings", None) is not None,
        "head": getattr(part, head, None) is not None,
        "model_parallel_elements": model_parallel_elements(part, data_parallel),
        "wq": placements(part, wq),
        "experts": placements(part, experts),
    }
