"""Collective communication: placement of each process group and the alpha-beta cost model.

Collective times (DESIGN 4.4; Thakur, Rabenseifner and Gropp 2005, 'Optimization of Collective
Communication Operations in MPICH', ring algorithms; the same bus-bandwidth convention as
nccl-tests' PERFORMANCE.md), for n ranks, M bytes, bus bandwidth BW and per-step latency alpha:
  all-reduce             2(n-1)/n * M/BW + 2(n-1)*alpha
  all-gather, reduce-scatter, all-to-all   (n-1)/n * M/BW + (n-1)*alpha   (M = full buffer)
  send/recv              M/BW + alpha
In-network reduction (NVLS, SHARP) is recorded in the profiles but not yet priced: the ring
formula is an upper bound for all-reduce on such fabrics.

Placement (DESIGN 4.5): ranks fill nodes in order; a group of n ranks whose neighbours are
``stride`` apart spans n*stride consecutive ranks. If that fits in the fast domain (an NVLink
domain of ``fast_domain_gpus``) it runs at the intra-node tier; otherwise at the inter-node
tier, where the k members sharing a domain each drive their own NIC (rail-optimised DGX
networks: one NIC per GPU), so the ring's bus bandwidth is min(intra, k * inter). This is why a
DP group whose k = 8 members share each node reaches about the node's aggregate NIC bandwidth in
nccl-tests, while a group with one member per node gets one NIC's worth.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.mesh import MeshArrays
from planner.schemas.hardware import ClusterSpec

TIER_NONE, TIER_INTRA, TIER_INTER = 0, 1, 2
TIER_NAMES = ("none", "intra_node", "inter_node")


@dataclass(frozen=True)
class GroupLink:
    """Where a process group runs: its size, tier code, bus bandwidth and latency (columns)."""

    size: np.ndarray
    tier: np.ndarray
    bandwidth_bytes_per_s: np.ndarray
    latency_s: np.ndarray


def group_link(cluster: ClusterSpec, size: np.ndarray, stride: np.ndarray, span: np.ndarray | None = None) -> GroupLink:
    """Tier, bandwidth and latency of groups of ``size`` ranks, ``stride`` apart, covering ``span``
    consecutive ranks (default size * stride). See the module docstring for the rule."""
    size = np.asarray(size)
    stride = np.asarray(stride)
    span = size * stride if span is None else np.asarray(span)
    domain = cluster.fast_domain_gpus
    intra, inter = cluster.intra_node, cluster.inter_node
    crosses = (size > 1) & (span > domain)
    per_domain = np.clip(domain // np.maximum(stride, 1), 1, np.maximum(size, 1))
    inter_bw = np.minimum(intra.bus_bandwidth_bytes_per_s, per_domain * inter.bus_bandwidth_bytes_per_s)
    bandwidth = np.where(crosses, inter_bw, intra.bus_bandwidth_bytes_per_s)
    latency = np.where(crosses, inter.latency_s, intra.latency_s)
    tier = np.where(size <= 1, TIER_NONE, np.where(crosses, TIER_INTER, TIER_INTRA))
    return GroupLink(size=size, tier=tier, bandwidth_bytes_per_s=bandwidth, latency_s=latency)


def _fold_span(mesh: MeshArrays, fold_span: np.ndarray) -> np.ndarray:
    """Global rank span of a group laid out inside the tp*cp*dp ranks of one pipeline stage.

    Those ranks are contiguous when pp is the outermost axis; otherwise a group larger than the
    axes inside pp is spread over pp times as many ranks (a conservative approximation)."""
    inside_pp = mesh.stride("pp")
    return np.where(fold_span <= inside_pp, fold_span, fold_span * mesh.pp)


def mesh_links(cluster: ClusterSpec, mesh: MeshArrays) -> dict[str, GroupLink]:
    """The link of every group a mesh uses: tp, cp, pp, dp (grads of dense weights are reduced
    over dp x cp, as Megatron-LM does), ep, and edp (expert-data-parallel)."""
    s_cp, s_dp = mesh.stride("cp"), mesh.stride("dp")
    dp_group = mesh.dp * mesh.cp
    dp_span = np.maximum(s_cp * mesh.cp, s_dp * mesh.dp)
    ep_span = _fold_span(mesh, mesh.ep * mesh.expert_tp)
    expert_dp = mesh.tp * mesh.cp * mesh.dp // (mesh.ep * mesh.expert_tp)
    return {
        "tp": group_link(cluster, mesh.tp, mesh.stride("tp")),
        "cp": group_link(cluster, mesh.cp, s_cp),
        "pp": group_link(cluster, mesh.pp, mesh.stride("pp")),
        "dp": group_link(cluster, dp_group, np.minimum(np.where(mesh.cp > 1, s_cp, s_dp), s_dp), dp_span),
        "ep": group_link(cluster, mesh.ep, mesh.expert_tp, ep_span),
        "edp": group_link(cluster, expert_dp, mesh.ep * mesh.expert_tp, _fold_span(mesh, mesh.tp * mesh.cp * mesh.dp)),
    }


def _ring_steps(n: np.ndarray) -> np.ndarray:
    return np.maximum(np.asarray(n) - 1, 0)


def all_reduce_s(message_bytes: np.ndarray, link: GroupLink) -> np.ndarray:
    """Ring all-reduce: 2(n-1)/n * M/BW + 2(n-1)*alpha; zero for a group of one."""
    n = link.size
    steps = _ring_steps(n)
    return 2.0 * steps / np.maximum(n, 1) * message_bytes / link.bandwidth_bytes_per_s + 2.0 * steps * link.latency_s


def all_gather_s(message_bytes: np.ndarray, link: GroupLink) -> np.ndarray:
    """Ring all-gather (also reduce-scatter, all-to-all) of an M-byte buffer: (n-1)/n*M/BW + (n-1)*alpha."""
    n = link.size
    steps = _ring_steps(n)
    return steps / np.maximum(n, 1) * message_bytes / link.bandwidth_bytes_per_s + steps * link.latency_s


reduce_scatter_s = all_gather_s
all_to_all_s = all_gather_s


def send_recv_s(message_bytes: np.ndarray, link: GroupLink) -> np.ndarray:
    """Point-to-point: M/BW + alpha; zero when the group has one rank."""
    return np.where(link.size > 1, message_bytes / link.bandwidth_bytes_per_s + link.latency_s, 0.0)


def all_reduce_bytes_sent(message_bytes: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Bytes one rank sends in a ring all-reduce: 2(n-1)/n * M."""
    return 2.0 * _ring_steps(n) / np.maximum(n, 1) * message_bytes


def all_gather_bytes_sent(message_bytes: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Bytes one rank sends in a ring all-gather/reduce-scatter/all-to-all: (n-1)/n * M."""
    return _ring_steps(n) / np.maximum(n, 1) * message_bytes
