"""Fit a plan's mesh into the world that replays it (the issue's 'scaled-down replica').

Axes are taken innermost first in the plan's rank order (tp before cp, dp, pp by default), so
the groups that matter most for placement keep their size: each axis keeps its degree while the
world has room and otherwise shrinks to its largest divisor that fits. EP and expert-TP are then
refolded into the replica's tp*cp*dp ranks of a stage (ARCHITECTURE 8.1). When the plan needs
fewer ranks than the world, the world holds ``world // ranks`` replicas of it, side by side as
the outermost axis (their groups communicate at the same time, as a larger job's would), and
leftover ranks idle. Every change is said in a note.
"""

from __future__ import annotations

from planner.schemas.parallel import ParallelConfig
from planner.validate.schemas import ReplicaMesh


def _largest_divisor_at_most(n: int, cap: int) -> int:
    return max(d for d in range(1, n + 1) if n % d == 0 and d <= max(cap, 1))


def fit_replica(config: ParallelConfig, world_size: int) -> tuple[ReplicaMesh, list[str]]:
    """The replica mesh for ``config`` on ``world_size`` ranks, and notes on what changed."""
    notes: list[str] = []
    degrees: dict[str, int] = {}
    used = 1
    for axis in config.order.split("-"):
        planned = int(getattr(config, axis))
        kept = _largest_divisor_at_most(planned, world_size // used)
        if kept != planned:
            notes.append(f"{axis} {planned} -> {kept}: the world has {world_size} rank{'' if world_size == 1 else 's'}")
        degrees[axis] = kept
        used *= kept
    fold = degrees["tp"] * degrees["cp"] * degrees["dp"]
    etp = _largest_divisor_at_most(config.expert_tp, fold)
    ep = max(d for d in range(1, config.ep + 1) if config.ep % d == 0 and (fold // etp) % d == 0)
    for name, planned, kept in (("expert_tp", config.expert_tp, etp), ("ep", config.ep, ep)):
        if kept != planned:
            notes.append(f"{name} {planned} -> {kept}: it must fold into the replica's tp*cp*dp = {fold} ranks")
    replicas = max(world_size // used, 1)
    if replicas > 1:
        notes.append(f"the plan needs {used} ranks: the world of {world_size} runs {replicas} replicas side by side")
    idle = world_size - replicas * used
    if idle:
        notes.append(f"ranks {replicas * used}..{world_size - 1} idle")
    mesh = ReplicaMesh(**degrees, ep=ep, expert_tp=etp, order=config.order, replicas=replicas)
    return mesh, notes


def replica_config(config: ParallelConfig, mesh: ReplicaMesh) -> ParallelConfig:
    """``config`` with the replica's degrees, valid again (SP needs tp > 1, interleaving pp > 1, a
    layout the plan's pipeline size: a replica with fewer stages drops it)."""
    fields = config.model_dump()
    fields.update(tp=mesh.tp, pp=mesh.pp, dp=mesh.dp, cp=mesh.cp, ep=mesh.ep, expert_tp=mesh.expert_tp)
    if mesh.pp != config.pp:
        fields["pipeline_layout"] = None
    if mesh.tp == 1:
        fields["sequence_parallel"] = False
    if mesh.pp == 1 and config.schedule == "interleaved-1f1b":
        fields.update(schedule="1f1b", virtual_stages=1)
    return ParallelConfig(**fields)
