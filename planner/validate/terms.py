"""The collectives a plan runs, as replayable terms priced on the replay's hardware profile.

Message sizes and call counts per step are ``planner.cost.traffic``'s own (its message-size and
count functions; its module docstring gives the sources; tests/test_validate_terms.py checks that
these terms, summed, give traffic's times): TP all-reduce (or reduce-scatter + all-gather with
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

from collections.abc import Callable

import numpy as np

from planner.cost import comm, traffic
from planner.cost.memory import step_params
from planner.cost.pipeline import moe_layers_of, num_microbatches, rank_layers
from planner.cost.step import slowest_rank
from planner.mesh import MeshArrays
from planner.schemas.hardware import ClusterSpec
from planner.schemas.job import JobSpec
from planner.schemas.model import ModelSpec
from planner.schemas.parallel import ParallelConfig
from planner.validate.schemas import TermSpec

PRICE: dict[str, Callable[[np.ndarray, comm.GroupLink], np.ndarray]] = {
    "all_reduce": comm.all_reduce_s,
    "reduce_scatter": comm.reduce_scatter_s,
    "all_gather": comm.all_gather_s,
    "all_to_all": comm.all_to_all_s,
    "send_recv": comm.send_recv_s,
    "ring_exchange": comm.send_recv_s,  # one step of the ring: each rank sends one block one hop
}
"""The cost function of each replayed collective (``planner.cost.comm``)."""


def predict_collective_s(op: str, message_bytes: float, link: comm.GroupLink) -> float:
    """Predicted seconds of one call of ``op`` on ``link`` (a one-row GroupLink)."""
    return float(np.asarray(PRICE[op](np.asarray([message_bytes]), link))[0])


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
    pm = MeshArrays.from_configs([plan])
    links = comm.mesh_links(replay_cluster, MeshArrays.from_configs([replica]))
    m = num_microbatches(job.batch_size, pm)
    rank = slowest_rank(model, replay_cluster, job, plan)  # the rank the step waits for, as the GEMM terms
    layers = np.array([rank.layers])
    moe = moe_layers_of(model, np.array([rank.decoders]), rank.mtp)
    out: list[TermSpec | None] = []

    def add(name: str, op: str, group: str, plan_size: int, message: np.ndarray, calls: np.ndarray | float) -> None:
        link = links["dp" if group == "dp_cp" else group]
        one = (float(np.asarray(message).reshape(-1)[0]), float(np.asarray(calls).reshape(-1)[0]))
        out.append(collective_term(name, op, group, link, plan_size, *one, max_message_bytes))

    tp_message = traffic.tp_message_bytes(model, job, pm)
    tp_calls, etp_calls = traffic.tp_collectives_per_microbatch(pm, layers, moe)
    tp_gathered = traffic.tp_all_gather_bytes(model, job, pm)
    for op in ("reduce_scatter", "all_gather") if plan.sequence_parallel else ("all_reduce",):
        add(f"tp.{op}", op, "tp", plan.tp, tp_gathered if op == "all_gather" else tp_message, m * tp_calls)
    routed = traffic.routed_message_bytes(model, job, pm)
    add("etp.all_reduce", "all_reduce", "etp", plan.expert_tp, routed, m * etp_calls)
    dispatch = traffic.ep_dispatch(model, job, pm)
    ep_calls = m * traffic.ep_all_to_alls_per_microbatch(job, pm, layers, moe)
    if dispatch.op == "all_gather":  # the combine is the reduce-scatter of the same buffer
        add("ep.all_gather", "all_gather", "ep", plan.ep, dispatch.message_bytes, ep_calls / 2.0)
        add("ep.reduce_scatter", "reduce_scatter", "ep", plan.ep, dispatch.message_bytes, ep_calls / 2.0)
    else:
        add("ep.all_to_all", "all_to_all", "ep", plan.ep, dispatch.message_bytes, ep_calls)
    cp_steps = traffic.cp_ring_steps_per_microbatch(pm, layers)
    add("cp.ring_exchange", "ring_exchange", "cp", plan.cp, traffic.cp_block_bytes(model, job, pm), m * cp_steps)
    pp_message = traffic.pp_message_bytes(job, pm, model.hidden_size)
    add("pp.send_recv", "send_recv", "pp", plan.pp, pp_message, traffic.pp_sends_per_step(pm, m))

    params = step_params(model, pm, rank_layers(model, job, pm))
    (dense_grads, expert_grads), (dense_weights, expert_weights) = traffic.dp_buffers_bytes(job, params)
    z = plan.zero_stage
    for prefix, group, size, grads, weights in (
        ("dp", "dp_cp", plan.dp * plan.cp, dense_grads, dense_weights),
        ("edp", "edp", plan.expert_dp, expert_grads, expert_weights),
    ):
        if z == 0:
            add(f"{prefix}.all_reduce", "all_reduce", group, size, grads, 1.0)
        elif z >= 3:
            # ZeRO-3/FSDP: layer by layer, each micro-batch (traffic.dp_per_step)
            units = np.maximum(layers, 1)
            add(f"{prefix}.reduce_scatter", "reduce_scatter", group, size, grads / units, m * units)
            add(f"{prefix}.all_gather", "all_gather", group, size, weights / units, 2.0 * m * units)
        else:
            add(f"{prefix}.reduce_scatter", "reduce_scatter", group, size, grads, 1.0)
            add(f"{prefix}.all_gather", "all_gather", group, size, weights, 1.0)
    return [t for t in out if t is not None]
