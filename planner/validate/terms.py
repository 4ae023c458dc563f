"""The collectives a plan runs, as replayable terms priced on the replay's hardware profile.

The collectives are ``planner.cost.traffic.step_collectives``: the same lists, group by group,
that the step prices (its module docstring gives the sources; tests/test_validate_terms.py checks
that these terms, summed, give traffic's times): TP all-reduce (or reduce-scatter + all-gather with
SP) of b*s/c*h activations, expert-TP all-reduce of the routed tokens, EP dispatch/combine
all-to-all, one CP ring step of the K and V blocks, PP sends of b*s/c*h/t, DP all-reduce or ZeRO
reduce-scatter + all-gather of the rank's gradients and weights (ZeRO-3 layer by layer). Message sizes come from the
*plan's* mesh; the time of one call is priced with ``planner.cost.comm`` on the link each group
of the *replica* mesh has on the replay profile, so predicted and measured describe the same
groups on the same machine.

A message above ``max_message_bytes`` is replayed at the cap and counted as plan/cap calls (the
buckets a framework would split it into; DDP and FSDP do so anyway).
"""

from __future__ import annotations

import numpy as np

from planner.cost import comm, traffic
from planner.cost.memory import step_params
from planner.cost.pipeline import moe_layers_of, num_microbatches, rank_layers, with_recompute_every
from planner.cost.step import slowest_rank
from planner.mesh import MeshArrays
from planner.schemas.hardware import ClusterSpec
from planner.schemas.job import JobSpec
from planner.schemas.model import ModelSpec
from planner.schemas.parallel import ParallelConfig
from planner.validate.schemas import TermSpec


def predict_collective_s(op: str, message_bytes: float, link: comm.GroupLink) -> float:
    """Predicted seconds of one call of ``op`` on ``link`` (a one-row GroupLink)."""
    return float(np.asarray(traffic.PRICE[op](np.asarray([message_bytes]), link))[0])


def link_row(link: comm.GroupLink) -> tuple[int, str, int]:
    """(size, tier name, members per domain) of a one-row GroupLink, as a TermSpec stores them."""
    return int(link.size[0]), comm.TIER_NAMES[int(link.tier[0])], int(link.per_domain[0])


def collective_term(
    name: str,
    op: str,
    group: str,
    link: comm.GroupLink,
    plan_group_size: int,
    plan_message_bytes: float,
    calls_per_step: float,
    max_message_bytes: float | None,
) -> TermSpec | None:
    """A term for ``op`` of ``plan_message_bytes`` over ``group``, capped and priced; None when
    the plan or the replica has no such traffic (a group of one, nothing sent)."""
    size, tier, per_domain = link_row(link)
    if plan_group_size <= 1 or size <= 1 or plan_message_bytes <= 0 or calls_per_step <= 0:
        return None
    message = plan_message_bytes
    if max_message_bytes is not None and message > max_message_bytes:
        message = float(max_message_bytes)
    return TermSpec(
        name=name,
        op=op,  # type: ignore[arg-type]
        group=group,
        group_size=size,
        plan_group_size=plan_group_size,
        tier=tier,  # type: ignore[arg-type]
        per_domain=per_domain,
        message_bytes=message,
        plan_message_bytes=plan_message_bytes,
        calls_per_step=calls_per_step * plan_message_bytes / message,
        predicted_s=predict_collective_s(op, message, link),
    )


def comm_terms(
    model: ModelSpec,
    job: JobSpec,
    plan: ParallelConfig,
    replica: ParallelConfig,
    replay_cluster: ClusterSpec,
    max_message_bytes: float | None = None,
) -> list[TermSpec]:
    """Every collective of one step of ``plan`` on its worst stage, replayed on ``replica``'s
    groups and priced on ``replay_cluster`` (see the module docstring)."""
    pm = with_recompute_every(model, job, MeshArrays.from_configs([plan]))
    links = comm.mesh_links(replay_cluster, MeshArrays.from_configs([replica]))
    m = num_microbatches(job.batch_size, pm)
    rank = slowest_rank(model, replay_cluster, job, plan)  # the rank the step waits for, as the GEMM terms
    layers = np.array([rank.layers])
    moe = moe_layers_of(model, np.array([rank.decoders]), rank.mtp)
    params = step_params(model, pm, rank_layers(model, job, pm))
    plan_sizes = {
        "tp": plan.tp,
        "etp": plan.expert_tp,
        "ep": plan.ep,
        "cp": plan.cp,
        "pp": plan.pp,
        "dp": plan.dp * plan.cp,
        "edp": plan.expert_dp,
    }
    out: list[TermSpec | None] = []
    for c in traffic.step_collectives(model, job, pm, m, layers, moe, params, replay_cluster.gpu.architecture):
        calls = c.calls * m if c.per_microbatch else c.calls
        one = (float(np.asarray(c.message_bytes).reshape(-1)[0]), float(np.asarray(calls).reshape(-1)[0]))
        group = "dp_cp" if c.group == "dp" else c.group  # dense gradients reduce over dp x cp
        out.append(collective_term(c.name, c.op, group, links[c.group], plan_sizes[c.group], *one, max_message_bytes))
    return [t for t in out if t is not None]
