"""Collective communication: placement of each process group and the alpha-beta cost model.

Collective times (ARCHITECTURE 8.5; Thakur, Rabenseifner and Gropp 2005, 'Optimization of Collective
Communication Operations in MPICH', ring algorithms; the bus-bandwidth convention of
nccl-tests' PERFORMANCE.md), for n ranks, M bytes, bus bandwidth BW and per-step latency alpha:
  all-reduce                      2(n-1)/n * M/BW + 2(n-1)*alpha
  all-gather, reduce-scatter      (n-1)/n * M/BW + (n-1)*alpha     (M = the full buffer)
  all-to-all                      (n-1)/n * M/BW + (n-1)*alpha, split by where the bytes go
  send/recv                       M/BW + alpha
In-network reduction (NVLS, SHARP), where a profile has measured it, prices an all-reduce as
M / (link bandwidth * in_network_efficiency) + its fixed cost (each rank sends and receives M
once; the switch adds), when that beats the ring.

Placement (ARCHITECTURE 8.6). Ranks fill nodes (fast domains of D GPUs) in order. A group of n ranks
whose neighbours are ``stride`` apart occupies aligned blocks of span = n*stride consecutive
ranks. The group stays in one domain when span <= D and D % span == 0; otherwise it crosses the
slow tier (a span that does not divide D leaves some blocks straddling two domains, and the
slowest group sets the pace). A crossing group has k = gcd(D, span)/stride members in the
domain it has fewest in (at least 1). What the slow tier then delivers depends on the pattern:
  rings (all-reduce, all-gather, reduce-scatter): NCCL runs one channel per NIC and DGX-class
      nodes have one NIC per GPU (rail-optimised), so the k members drive k NICs in parallel:
      BW = min(intra, k * inter). This is why nccl-tests' multi-node busbw approaches a node's
      aggregate NIC bandwidth when all its GPUs take part.
  send/recv (PP, the CP ring): one hop through one NIC: BW = inter.
A switchless fast tier (MI300X's xGMI mesh, ``Interconnect.point_to_point_links`` L) gives a
collective over m GPUs of a domain m - 1 of its L links (BW = intra * (m-1)/L) and a send one
(intra / L): a TP 2 group there moves 1/7 of what TP 8 does.
  all-to-all (EP): each rank sends (n-k)/n of its buffer through its own NIC and (k-1)/n over
      the fast tier, concurrently; the slower of the two sets the time. A DeepEP/HybridEP dispatch
      sends a token through the NIC once per other domain holding one of its experts and forwards
      it over the fast tier there (``all_to_all_s`` with a fanout).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.mesh import MeshArrays
from planner.schemas.hardware import ClusterSpec, Interconnect

TIER_NONE, TIER_INTRA, TIER_INTER = 0, 1, 2
TIER_NAMES = ("none", "intra_node", "inter_node")


@dataclass(frozen=True)
class GroupLink:
    """Where a process group runs (columns): its size, tier code, members per fast domain (k, the
    fewest of any domain it touches), and both tiers' bus bandwidth and latency."""

    size: np.ndarray
    tier: np.ndarray
    per_domain: np.ndarray
    intra_bytes_per_s: np.ndarray | float
    inter_bytes_per_s: float
    latency_s: np.ndarray
    in_network_bytes_per_s: np.ndarray  # 0 where the tier has no (measured) in-network reduction
    in_network_latency_s: np.ndarray
    intra_send_bytes_per_s: np.ndarray | float | None = None  # one send on the fast tier (None: intra's)

    @property
    def crosses(self) -> np.ndarray:
        return self.tier == TIER_INTER

    @property
    def ring_bytes_per_s(self) -> np.ndarray:
        """Bus bandwidth of a ring collective: min(intra, k * inter) across domains."""
        across = np.minimum(self.intra_bytes_per_s, self.per_domain * self.inter_bytes_per_s)
        return np.where(self.crosses, across, self.intra_bytes_per_s)

    @property
    def p2p_bytes_per_s(self) -> np.ndarray:
        """Bandwidth of one send/recv hop: one NIC when it leaves the domain, one link of a
        switchless domain inside it (``Interconnect.send_share``)."""
        send = self.intra_bytes_per_s if self.intra_send_bytes_per_s is None else self.intra_send_bytes_per_s
        return np.where(self.crosses, self.inter_bytes_per_s, send)


def crosses_domains(
    cluster: ClusterSpec, size: np.ndarray, stride: np.ndarray, span: np.ndarray | None = None
) -> np.ndarray:
    """Whether groups of ``size`` ranks ``stride`` apart over ``span`` consecutive ranks (default
    size * stride) leave one fast domain: they span more than a domain, or their span does not
    tile the domains of a cluster larger than one (so some group straddles two). ``group_link``'s
    tier, for the rules that need no bandwidths."""
    size = np.asarray(size)
    span = size * np.maximum(np.asarray(stride), 1) if span is None else np.asarray(span)
    domain = cluster.fast_domain_gpus
    straddles = (domain % np.maximum(span, 1) != 0) & (cluster.num_gpus > domain)
    return (size > 1) & ((span > domain) | straddles)


def fast_tier_bytes_per_s(
    fast: Interconnect, bus_bytes_per_s: float, members: np.ndarray
) -> tuple[np.ndarray | float, np.ndarray | float | None]:
    """(collective, send) bandwidth of a group with ``members`` GPUs in one fast domain whose bus
    bandwidth is ``bus_bytes_per_s``: all of it through a switch (send None: the same); on a
    switchless domain the links among the members and one link (``Interconnect.members_share``,
    ``send_share``). The one rule ``group_link`` and the validator's calibration price links by."""
    if fast.point_to_point_links is None:
        return bus_bytes_per_s, None
    return bus_bytes_per_s * fast.members_share(members), bus_bytes_per_s * fast.send_share


def group_link(cluster: ClusterSpec, size: np.ndarray, stride: np.ndarray, span: np.ndarray | None = None) -> GroupLink:
    """Tier, k, bandwidths and latency of groups of ``size`` ranks ``stride`` apart, laid over
    ``span`` consecutive ranks (default size * stride). See the module docstring."""
    size = np.asarray(size)
    stride = np.maximum(np.asarray(stride), 1)
    span = size * stride if span is None else np.asarray(span)
    domain = cluster.fast_domain_gpus
    crosses = crosses_domains(cluster, size, stride, span)
    per_domain = np.clip(np.gcd(domain, span) // stride, 1, np.maximum(size, 1))
    intra, inter = cluster.intra_node, cluster.inter_node
    ring, send = fast_tier_bytes_per_s(intra, intra.bus_bandwidth_bytes_per_s, np.where(crosses, per_domain, size))
    return GroupLink(
        size=size,
        tier=np.where(size <= 1, TIER_NONE, np.where(crosses, TIER_INTER, TIER_INTRA)),
        per_domain=per_domain,
        intra_bytes_per_s=ring,
        intra_send_bytes_per_s=send,
        inter_bytes_per_s=inter.bus_bandwidth_bytes_per_s,
        latency_s=np.where(crosses, inter.latency_s, intra.latency_s),
        in_network_bytes_per_s=np.where(crosses, inter.in_network_bytes_per_s, intra.in_network_bytes_per_s),
        in_network_latency_s=np.where(
            crosses, (inter.in_network_latency_us or 0.0) * 1e-6, (intra.in_network_latency_us or 0.0) * 1e-6
        ),
    )


def _fold_to_global(mesh: MeshArrays, fold_distance: np.ndarray, span: bool = False) -> np.ndarray:
    """Global rank distance of a distance within the tp*cp*dp ranks of one pipeline stage, or
    (``span``) the global extent of a span of them.

    Those ranks are contiguous when pp is the outermost axis. Otherwise pp sits inside some of
    them: distances below the block of axes inside pp are unchanged, larger ones are stretched
    pp-fold. A span as long as that block covers the block alone, so it is unchanged too: with pp
    outermost, a group spanning a whole stage (32 ranks) lies in those 32 consecutive ranks, not
    across the pp-fold extent (which made an EP group of a stage straddling two NVL72 racks look
    as if it sat inside one)."""
    inside_pp = mesh.stride("pp")
    within = fold_distance <= inside_pp if span else fold_distance < inside_pp
    return np.where(within, fold_distance, fold_distance * mesh.pp)


def mesh_links(cluster: ClusterSpec, mesh: MeshArrays) -> dict[str, GroupLink]:
    """The link of every group a mesh uses: tp, cp, pp, dp (gradients of dense weights are
    reduced over dp x cp, as Megatron-LM does), ep, etp (expert TP) and edp (expert data
    parallel). Expert groups are carved from the stage's tp*cp*dp ranks, expert-TP innermost,
    then EP, then expert-DP (Megatron-Core's MoE parallel folding)."""
    s_cp, s_dp = mesh.stride("cp"), mesh.stride("dp")
    dp_group = mesh.dp * mesh.cp
    dp_stride = np.where(mesh.cp > 1, np.minimum(s_cp, s_dp), s_dp)
    dp_span = np.maximum(s_cp * mesh.cp, s_dp * mesh.dp)
    etp, ep = mesh.expert_tp, mesh.ep
    fold = mesh.tp * mesh.cp * mesh.dp
    return {
        "tp": group_link(cluster, mesh.tp, mesh.stride("tp")),
        "cp": group_link(cluster, mesh.cp, s_cp),
        "pp": group_link(cluster, mesh.pp, mesh.stride("pp")),
        "dp": group_link(cluster, dp_group, dp_stride, dp_span),
        "ep": group_link(cluster, ep, _fold_to_global(mesh, etp), _fold_to_global(mesh, ep * etp, span=True)),
        "etp": group_link(cluster, etp, np.ones_like(etp), _fold_to_global(mesh, etp, span=True)),
        "edp": group_link(
            cluster, mesh.expert_dp, _fold_to_global(mesh, ep * etp), _fold_to_global(mesh, fold, span=True)
        ),
    }


def _ring_steps(n: np.ndarray) -> np.ndarray:
    return np.maximum(np.asarray(n) - 1, 0)


def all_reduce_s(message_bytes: np.ndarray, link: GroupLink) -> np.ndarray:
    """Ring all-reduce, 2(n-1)/n * M/BW + 2(n-1)*alpha, or the in-network all-reduce where the
    tier has one, M/BW_in + alpha_in, whichever is faster (NCCL picks its algorithm by size);
    zero for a group of one."""
    n = link.size
    steps = _ring_steps(n)
    ring = 2.0 * steps / np.maximum(n, 1) * message_bytes / link.ring_bytes_per_s + 2.0 * steps * link.latency_s
    has_in_network = link.in_network_bytes_per_s > 0
    in_network = message_bytes / np.where(has_in_network, link.in_network_bytes_per_s, 1.0) + link.in_network_latency_s
    return np.where(has_in_network & (n > 1), np.minimum(ring, in_network), ring)


def all_gather_s(message_bytes: np.ndarray, link: GroupLink) -> np.ndarray:
    """Ring all-gather or reduce-scatter of an M-byte buffer: (n-1)/n * M/BW + (n-1)*alpha."""
    n = link.size
    steps = _ring_steps(n)
    return steps / np.maximum(n, 1) * message_bytes / link.ring_bytes_per_s + steps * link.latency_s


reduce_scatter_s = all_gather_s


@dataclass(frozen=True)
class Fanout:
    """How a MoE dispatch spreads a token: over ``experts`` routed experts, ``top_k`` of them, from
    its ``groups_per_token`` best of ``groups`` contiguous expert groups (DeepSeek-V3's group-limited
    routing, n_group 8 and topk_group 4; 1 and 1 without a limit)."""

    experts: float
    top_k: int
    groups: int = 1
    groups_per_token: int = 1


def holders_reached(experts: float, top_k: int, holders: np.ndarray) -> np.ndarray:
    """Expected number of ``holders`` (ranks, or fast domains of ranks) that hold at least one of a
    token's ``top_k`` experts, the ``experts`` split evenly over them and chosen uniformly without
    replacement: H * (1 - prod_{i<k} (E - E/H - i) / (E - i)); DeepSeek-V3 (E 256, k 8) reaches
    5.3 of 8 holders and 7.7 of 64, a model of one expert per holder k of them. Force-balanced
    routing is uniform; natural routing, and DeepSeek-V3's routing limited to 4 node groups,
    concentrate on fewer holders, so this is an upper bound there."""
    holders = np.maximum(np.asarray(holders, dtype=float), 1.0)
    missed = np.ones_like(holders)
    for i in range(top_k):
        missed = missed * np.maximum(experts - experts / holders - i, 0.0) / (experts - i)
    return holders * (1.0 - missed)


def domains_reached(fanout: Fanout, domains: np.ndarray) -> np.ndarray:
    """Expected number of ``domains`` (equal, contiguous shares of the experts) that hold at least
    one of a token's experts. Without a group limit, ``holders_reached``. With one, the token's
    top-k come from ``groups_per_token`` groups chosen uniformly (force-balanced) and uniformly
    among their C = groups_per_token * E/groups experts: where domains split the groups (G/D whole
    groups each), a domain holding j chosen groups (hypergeometric) is missed with probability
    prod_{i<k} (C - j E/G - i)/(C - i); where groups span D/G domains each, the chosen groups'
    groups_per_token * D/G domains share the C experts (``holders_reached``). Other layouts: no
    limit. DeepSeek-V3 over 8 nodes: 3.6 nodes reached (5.3 without the limit)."""
    domains = np.asarray(domains, dtype=float)
    if fanout.groups <= 1 or fanout.groups_per_token >= fanout.groups:
        return holders_reached(fanout.experts, fanout.top_k, domains)
    # a search prices many meshes over a few domain counts: each distinct count once
    counts, where = np.unique(domains, return_inverse=True)
    reached = np.array([_group_limited_domains_reached(fanout, float(d)) for d in counts])
    return reached[where].reshape(domains.shape)


def _group_limited_domains_reached(fanout: Fanout, domains: float) -> float:
    """``domains_reached`` of one domain count under a group limit (see there)."""
    g, g_tok, k = fanout.groups, fanout.groups_per_token, fanout.top_k
    d = round(domains)
    candidates = g_tok * fanout.experts / g
    if d > 1 and abs(domains - d) <= 1e-9 and g % d == 0:  # each domain holds g/d whole groups
        per = g // d
        reached = 0.0
        for j in range(1, min(per, g_tok) + 1):
            p_j = math.comb(per, j) * math.comb(g - per, g_tok - j) / math.comb(g, g_tok)
            missed = math.prod(max(candidates - j * fanout.experts / g - m, 0.0) / (candidates - m) for m in range(k))
            reached += p_j * (1.0 - missed)
        return d * reached
    if d > 1 and abs(domains - d) <= 1e-9 and d % g == 0:  # each group spans d/g domains
        return float(holders_reached(candidates, k, np.asarray(g_tok * d // g, dtype=float)))
    return float(holders_reached(fanout.experts, k, np.asarray(domains)))


def all_to_all_s(message_bytes: np.ndarray, link: GroupLink, fanout: Fanout | None = None) -> np.ndarray:
    """All-to-all of an M-byte buffer per rank: (n-1)/n of it leaves the rank, (n-k)/n through
    the rank's NIC when the group crosses domains, the rest over the fast tier, concurrently.

    With a ``fanout`` (a dispatch of the rank's tokens, M holding one copy per rank reached) the
    buffer crosses domains once per domain reached, not once per rank: DeepEP's
    internode kernels, and HybridEP's, send a token over RDMA to the GPU of the same local index
    on each node holding one of its experts, which forwards it over NVLink to the others there
    (deepseek-ai/DeepEP README, 'asymmetric-domain bandwidth forwarding'; DeepSeek-V3, arXiv:2412.19437
    section 3.2.2: 'first transmitted via IB to the GPUs with the same in-node index on their target
    nodes ... then forwarded via NVLink'). The NIC carries the other domains reached
    (``domains_reached`` of the n/k domains, x (D-1)/D) in place of (n-k)/n of the copies; the
    fast tier every copy but the rank's own, sent or forwarded."""
    n = np.maximum(link.size, 1)
    k = np.where(link.crosses, link.per_domain, n)
    if fanout is None:
        off_share, in_share = (n - k) / n, (k - 1) / n
    else:
        domains = n / k
        copies = np.maximum(holders_reached(fanout.experts, fanout.top_k, n), 1.0)
        off_share = domains_reached(fanout, domains) * (domains - 1.0) / domains / copies
        in_share = (n - 1) / n
    off_domain = off_share * message_bytes / link.inter_bytes_per_s
    in_domain = in_share * message_bytes / link.intra_bytes_per_s
    return np.maximum(off_domain, in_domain) + _ring_steps(link.size) * link.latency_s


def send_recv_s(message_bytes: np.ndarray, link: GroupLink) -> np.ndarray:
    """Point-to-point: M/BW + alpha over one hop; zero when the group has one rank."""
    return np.where(link.size > 1, message_bytes / link.p2p_bytes_per_s + link.latency_s, 0.0)


def all_reduce_bytes_sent(message_bytes: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Bytes one rank sends in a ring all-reduce: 2(n-1)/n * M."""
    return 2.0 * _ring_steps(n) / np.maximum(n, 1) * message_bytes


def all_gather_bytes_sent(message_bytes: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Bytes one rank sends in a ring all-gather/reduce-scatter/all-to-all: (n-1)/n * M."""
    return _ring_steps(n) / np.maximum(n, 1) * message_bytes
