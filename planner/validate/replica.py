"""Fit a plan's mesh into the world that replays it (the issue's 'scaled-down replica').

Every axis the plan runs above 1 first gets its smallest degree above 1 (a divisor of its own)
while the world has room, innermost first in the plan's rank order (tp before cp, dp, pp by
default), so each kind of the plan's traffic is replayed: a review (2026-12-07) found the pipeline
always dropped on one node (tp4 pp4 dp8 on 8 ranks had become tp4 dp2, and pp 16 had become pp 1),
its send/recv never measured. Then, in the same order, the groups that matter most for placement grow back:
each axis to the plan's degree while the world has room, else to its largest divisor that fits.
An axis the world has no room for is said in a note with the traffic left unreplayed. EP and expert-TP are then
refolded into the replica's tp*cp*dp ranks of a stage (ARCHITECTURE 8.1). When the plan needs
fewer ranks than the world, the world holds ``world // ranks`` replicas of it, side by side as
the outermost axis (their groups communicate at the same time, as a larger job's would), and
leftover ranks idle. Every change is said in a note.
"""

from __future__ import annotations

from planner.schemas.parallel import ParallelConfig
from planner.validate.schemas import ReplicaMesh

UNREPLAYED = {
    "tp": "tensor-parallel traffic",
    "cp": "context-parallel ring",
    "dp": "gradient reduction and sharded-weight gathers",
    "pp": "pipeline send/recv",
}
"""What the plan sends on an axis the replica drops to 1, for the note that says so."""


def _largest_divisor_at_most(n: int, cap: int) -> int:
    return max(d for d in range(1, n + 1) if n % d == 0 and d <= max(cap, 1))


def fit_replica(config: ParallelConfig, world_size: int) -> tuple[ReplicaMesh, list[str]]:
    """The replica mesh for ``config`` on ``world_size`` ranks, and notes on what changed."""
    notes: list[str] = []
    axes = config.order.split("-")
    planned = {axis: int(getattr(config, axis)) for axis in axes}
    degrees = dict.fromkeys(axes, 1)
    used = 1
    for axis in axes:  # each axis the plan runs, at its smallest degree above 1 the world has room for
        if planned[axis] > 1:
            least = min(d for d in range(2, planned[axis] + 1) if planned[axis] % d == 0)
            if used * least <= world_size:
                degrees[axis], used = least, used * least
    for axis in axes:  # then grown back to the plan's degree, innermost first
        others = used // degrees[axis]
        degrees[axis] = _largest_divisor_at_most(planned[axis], world_size // others)
        used = others * degrees[axis]
        if degrees[axis] != planned[axis]:
            ranks = f"{world_size} rank{'' if world_size == 1 else 's'}"
            lost = f"; not replayed: its {UNREPLAYED[axis]}" if degrees[axis] == 1 else ""
            notes.append(f"{axis} {planned[axis]} -> {degrees[axis]}: the world has {ranks}{lost}")
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
