"""Disaggregated serving (ARCHITECTURE 9.6): prefill and decode in separate pools (DistServe,
Zhong et al., OSDI 2024, arXiv:2401.09670; Splitwise, Patel et al., ISCA 2024).

  prefill pool  each replica runs batches of whole prompts, the engine's token budget at a time
                (at least one prompt): rate_p = prompts per round / round time; TTFT = a round
                + the KV transfer + the server's request path. At a request rate a replica's round
                holds the fewest prompts that keep up with its share (a light load prefills one
                prompt at a time); otherwise, the engine at capacity, a full budget, or under a
                TTFT target the most prompts whose round meets it (``prefill_within``), at most
                what its memory holds. Fewer prompts than pipeline stages still pass every stage in
                turn: a round of pp prompts.
  KV transfer   isl x KV bytes per token (all layers), and a hybrid's Mamba-2 state (the same at any
                length), from the prefill replica to a decode replica, each prefill GPU sending its
                share and each decode GPU receiving the share it keeps (MLA's latent or a sequence
                under attention DP whole), over its own link: NVLink inside one fast domain, else
                its NIC (NIXL/UCX over RDMA, one NIC per GPU on DGX-class nodes); the busier end.
  decode pool   each replica decodes B sequences with no prompt in its rounds:
                rate_d = B / (osl x TPOT); where the prefill pool or the load bounds the rate
                below what the grid's batch serves, the batch that serves it (``_decode_at``).
  split         the integer numbers of prefill and decode replicas (n_p g_p + n_d g_d <= N) that
                maximise min(n_p rate_p, n_d rate_d): the pool ratio that balances them; at a
                concurrency C also at most C / (TTFT + (osl - 1) x TPOT) (Little's law); ties go to
                the shorter TTFT.
Output tokens/s per GPU counts every GPU of the cluster, idle ones included. At a request rate the
chosen split is then replayed (``replayed_split``): each pool through the engine's admission at its
share of the rate, its TTFT and TPOT the replay's; without a load or at a concurrency it is priced
at the steady state (a closed loop through two pools is not replayed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from planner.serving.kv import kv_bytes_per_token, kv_split, sequence_state_bytes_per_gpu
from planner.serving.layout import Layouts
from planner.serving.memory import MemoryPlan, reserved_context
from planner.serving.replay import Replayed, replay
from planner.serving.schemas import ServeCandidate, ServeRequest
from planner.serving.step import RoundTerms, Setting, round_terms


def kv_transfer_s(s: Setting, prefill: Layouts, decode: Layouts, input_len: int) -> np.ndarray:
    """Seconds to move one prompt's KV cache (and a hybrid's Mamba-2 state) from a prefill replica to
    a decode replica (pairs of layouts, columns): each prefill GPU sends its share and each decode
    GPU receives the share it keeps (its stage's layers, its heads unless MLA or attention DP, where
    one rank keeps the sequence's whole cache: ``kv.kv_split``), each over its own link; the busier
    side sets the time."""
    whole = input_len * kv_bytes_per_token(s.model, s.kv_dtype, float(input_len), s.engine.chunked_kv)
    state = float(sequence_state_bytes_per_gpu(s.model, s.ssm_state_dtype, 1.0, 1.0, False))  # the whole state
    send = (whole + state) / prefill.gpus_per_replica
    receive = whole * kv_split(s.model, decode.tp, decode.attention_dp) / decode.pp + sequence_state_bytes_per_gpu(
        s.model, s.ssm_state_dtype, decode.tp, decode.pp, decode.attention_dp
    )
    one_domain = s.cluster.num_gpus <= s.cluster.fast_domain_gpus
    link = s.cluster.intra_node if one_domain else s.cluster.inter_node
    return np.maximum(send, receive) / link.bus_bandwidth_bytes_per_s + link.latency_s


def prefill_prompts(s: Setting, req: ServeRequest) -> int:
    """Whole prompts in one prefill round of a pipeline stage: the engine's token budget at a time,
    at least one."""
    return max(1, s.engine.max_num_batched_tokens // req.input_len)


def prefill_rounds(s: Setting, lay: Layouts, req: ServeRequest) -> tuple[np.ndarray, np.ndarray]:
    """(round seconds, fits) of each layout as a prefill-only replica holding q = 1 .. Q prompts at a
    time (columns q - 1; Q = ``prefill_prompts`` x pp, one round in each pipeline stage): a replica
    at a light load runs the prompts it has, not a full budget. A round's prompts are spread over
    the pp micro-batches, a whole prompt in each at least (``step.RoundPricer.cost``): fewer than pp
    prompts still pass every stage one after the other, so they take pp's round. A prompt longer than
    the token budget runs in budget-sized pieces one after another (``search.prefill_chunk``), so its
    round is that many rounds of a piece each (a review, 2026-12-07: a 16K prompt on TensorRT-LLM's
    8K budget at TP4 x PP2 had been priced as one piece's pass, 657 ms against 1,268 at PP1)."""
    from planner.serving.search import prefill_chunk

    isl = req.input_len
    piece = prefill_chunk(s.engine, isl)
    pieces = math.ceil(isl / piece)
    mem = s.memory(lay, float(isl))
    # at most the prompts its memory (and the engine's batch limit) holds at once: 8B's 4-token prompts
    # make a budget of 2,048, beyond vLLM's 1,024 sequences, which had left no prefill layout at all
    most = np.minimum(prefill_prompts(s, req) * lay.pp, np.maximum(mem.max_concurrency, 1))
    fits = mem.max_concurrency >= 1
    zeros = np.zeros(len(lay))
    context = np.full(len(lay), float(isl))
    rounds = np.full((len(lay), int(most.max())), np.inf)
    for q in range(1, int(most.max()) + 1):
        on = q <= most
        rounds[:, q - 1] = np.where(
            on, pieces * round_terms(s, lay, zeros, context, np.full(len(lay), q * float(piece)), isl).total_s, np.inf
        )
    return rounds, fits


def prefill_within(rounds: np.ndarray, extra_s: float, ttft_s: float | None) -> int:
    """Prompts a round (a column of one layout's ``prefill_rounds`` row) a prefill replica at
    capacity runs under a TTFT target: the most whose round, plus ``extra_s`` (the KV's move and
    the server's path), is within it; the full round without a target, one prompt where none is.
    Fewer prompts a round lower the pool's rate for a shorter first token (a review, 2026-12-07: a
    disaggregated 70B on four DGX H100 was refused at a 300 ms TTFT target, every pool priced at a
    full budget's round of 4 prompts, 388 ms, where one prompt takes about 116)."""
    finite = int(np.isfinite(rounds).sum())
    if ttft_s is None:
        return finite
    within = np.flatnonzero(rounds[:finite] + extra_s <= ttft_s)
    return int(within[-1]) + 1 if len(within) else 1


def concurrency_ttft_s(req: ServeRequest, ttft_s: float, rate: np.ndarray, tpot_s: np.ndarray) -> np.ndarray:
    """The TTFT of a closed loop of ``req.concurrency`` requests through a split serving ``rate``
    requests/s at ``tpot_s``: by Little's law each request spends N / rate in the system, of which
    (osl - 1) x TPOT decoding after its first token, so its first token comes N / rate - (osl - 1) x
    TPOT after it was sent, the round's TTFT (``ttft_s``) where the loop is what bounds the rate and
    more where a pool is: the requests the pools cannot hold wait for admission. A review
    (2026-12-07): 70B on four DGX H100 at 2,000 in flight, bound by its decode pool's KV room (820
    sequences), printed the prefill round's 1.8 s as its TTFT: 2,000 in flight at 36.6 requests/s
    spend 55 s each, 19 s of them decoding 511 tokens at 37.9 ms, so the first token comes after 35 s."""
    osl = float(req.output_len)
    assert req.concurrency is not None
    return np.maximum(ttft_s, req.concurrency / rate - (osl - 1.0) * tpot_s)


def queue_wait_s(rate: float, capacity: float) -> float:
    """Mean wait in the queue of a server of ``capacity`` requests/s offered Poisson arrivals at
    ``rate``: the Pollaczek-Khinchine formula for a deterministic service time (M/D/1), rho / (2 mu
    (1 - rho)), rho = rate / capacity; inf at or past capacity. The steady state's stand-in for a
    prefill replica's queue at a request rate, which ranks the splits before their replay
    (``replayed_split``): a replica at 80% of its capacity waits two service times on average
    before its round, which the round alone had left out (70B on 16 DGX H100 at 30 req/s: a split
    priced at 261 ms replayed at 1.0 s)."""
    rho = rate / capacity
    return math.inf if rho >= 1.0 else rho / (2.0 * capacity * (1.0 - rho))


def prefill_at(rounds: np.ndarray, rate: float | np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """(requests/s a prefill replica sustains, its round in seconds) of each layout (rows of
    ``prefill_rounds``) at ``rate`` requests/s per replica: the fewest prompts a round whose rate
    keeps up with it, or the full round where none does or no rate is given (the engine at
    capacity). A column of rates against one layout's row gives its round at each."""
    q = np.arange(1, rounds.shape[1] + 1, dtype=float)
    rates = q / rounds  # inf rounds (beyond a layout's Q) give 0
    full = np.argmax(np.where(np.isfinite(rounds), q, 0.0), axis=1)
    pick = full if rate is None else np.where((rates >= rate).any(axis=1), np.argmax(rates >= rate, axis=1), full)
    rows = np.arange(len(rounds))
    return rates[rows, full], rounds[rows, pick]


SPLITS_REPLAYED = 4
"""At a request rate, the splits of one decode layout replayed at most, in the steady state's order,
until one meets the targets on its replay: the steady state leaves out a prompt's wait for
admission, so its first split may be one whose prefill pool queues (70B on 16 DGX H100 at 30 req/s
with a 500 ms TTFT target: two decode layouts' first splits replayed at 885 and 913 ms, their second
at 214 and 241). Ranked by the round alone, before ``queue_wait_s``, their first four had all
replayed at 0.9-2.1 s. A bound on the work, not a measurement."""


def disaggregated_candidates(s: Setting, lay: Layouts, req: ServeRequest) -> tuple[list[ServeCandidate], int, str, int]:
    """One candidate per decode layout: its best prefill layout, split and batch. At a request
    rate, among the splits that sustain it the smallest decode batch (the shortest TPOT), then the
    shortest TTFT; otherwise the highest rate, then the shortest TTFT. A prefill replica's TTFT is its
    round at the prompts its share of a request rate needs (``prefill_at``), at a concurrency N its
    round of at most ceil(N / prefill replicas) prompts (70B on two DGX H100 at 1 in flight had been
    priced at a full round of 4 prompts, 392 ms, where its one prompt takes 116 ms: a review of
    `plan serve`, 2026-12-07), else a full round. At a concurrency N the rate is also at most N /
    (TTFT + (osl - 1) x TPOT), Little's law over a request's time in the system, its prompt's
    included. Returns the candidates, the points priced, why none where none, and how many decode
    layouts were not replayed (at a rate: ``REPLAYED_TPOT_FLOOR``)."""
    from planner.serving.search import BATCH_GRID, _meets

    N = s.cluster.num_gpus
    if N < 2:
        return [], 0, "disaggregation needs at least 2 GPUs (one prefill, one decode replica)", 0
    isl, osl = float(req.input_len), float(req.output_len)
    rounds, p_fits = prefill_rounds(s, lay, req)
    p_rate, _ = prefill_at(rounds, None)
    mem = s.memory(lay, reserved_context(s.engine, isl, osl))
    cands: list[ServeCandidate] = []
    considered = 0
    fastest_ttft_s = fastest_tpot_s = math.inf  # what the targets could be met at: one prompt, one sequence
    replays: dict[tuple[str, int, int], tuple[Replayed, bool]] = {}  # pools shared by the splits tried
    pending: list[_Splits] = []
    for j in range(len(lay)):
        cap = mem.max_concurrency[j]
        if cap < 1:
            continue
        batches = np.asarray(sorted({b for b in BATCH_GRID if b < cap} | {int(cap)}), dtype=float)
        dl = lay.take(np.full(len(batches), j))
        terms = round_terms(s, dl, batches, np.full(len(batches), isl + osl / 2.0), np.zeros(len(batches)), isl)
        tpot = terms.total_s
        d_rate = batches / (osl * tpot)
        g_d = float(lay.gpus_per_replica[j])
        # the server's request path and the KV's move to this decode layout, per prefill layout
        extra = kv_transfer_s(s, lay, lay.take(np.full(len(lay), j)), req.input_len) + s.params.request_path_s
        if p_fits.any():
            fastest_ttft_s = min(fastest_ttft_s, float(np.min((rounds[:, 0] + extra)[p_fits])))
        fastest_tpot_s = min(fastest_tpot_s, float(tpot[0]))
        options: list[_Option] = []
        for i in np.flatnonzero(p_fits):
            g_p = float(lay.gpus_per_replica[i])
            full = int(np.isfinite(rounds[i]).sum())  # a round at capacity: the full budget
            # at capacity without a load, the most prompts a round within the TTFT target
            within = prefill_within(rounds[i], float(extra[i]), req.ttft_s)
            for n_p in range(1, int((N - g_d) // g_p) + 1):
                n_d = int((N - n_p * g_p) // g_d)
                if n_d < 1:
                    continue
                # at capacity a full round; at a rate the round its share of it needs; at a concurrency
                # a round of at most the replica's share of the requests in flight
                prompts, p_rate_i = full, p_rate[i]
                at_capacity = req.request_rate is None and req.concurrency is None
                if req.request_rate is not None:
                    share = req.request_rate / n_p
                    ttft = float(prefill_at(rounds[i : i + 1], share)[1][0] + extra[i] + queue_wait_s(share, p_rate[i]))
                elif req.concurrency is not None:
                    q = min(full, math.ceil(req.concurrency / n_p))
                    ttft = float(rounds[i, q - 1] + extra[i])
                else:
                    prompts, p_rate_i = within, within / rounds[i, within - 1]
                rate = np.minimum(n_p * p_rate_i, n_d * d_rate)
                if at_capacity:
                    # at capacity each prefill replica runs the fewest prompts a round that keep up
                    # with what the pool serves: where the decode pool bounds it, fewer than its cap
                    # (``prompts``, which its launch command keeps for bursts; 70B on two DGX H100
                    # with a 30 ms TPOT: the same split quoted 1,020 ms of TTFT at a full budget's
                    # round, 272 at the round its rate needs; a review, 2026-12-08)
                    waited = prefill_at(rounds[i : i + 1, :within], (rate / n_p)[:, None])[1] + extra[i]
                else:
                    waited = np.full(len(rate), ttft)
                if req.concurrency is not None:  # Little's law: a request's prompt is part of its time
                    rate = np.minimum(rate, req.concurrency / (ttft + (osl - 1.0) * tpot))
                    waited = concurrency_ttft_s(req, ttft, rate, tpot)
                considered += len(rate)
                ok = _meets(req, waited, tpot)
                if req.request_rate is not None:
                    ok &= rate >= req.request_rate * (1.0 - 1e-9)
                    score = np.where(ok, -batches, -np.inf)
                elif req.concurrency is not None:
                    ok &= batches * n_d <= max(req.concurrency, n_d)
                    score = np.where(ok, rate, -np.inf)
                else:
                    score = np.where(ok, rate, -np.inf)
                k = int(np.argmax(score))
                if np.isfinite(score[k]):
                    key = (float(score[k]), -float(waited[k]))
                    ttft_k = float(waited[k]) if at_capacity else ttft
                    options.append((key, int(i), n_p, n_d, k, ttft_k, float(rate[k]), prompts))
        options.sort(key=lambda o: o[0], reverse=True)  # stable: ties keep the loop's order
        if options:
            pending.append(_Splits(j, options, batches, tpot, terms, extra))
    reason = "" if pending else _no_split_reason(req, fastest_ttft_s, fastest_tpot_s)

    def steady(p: _Splits, option: _Option) -> ServeCandidate:
        return _split_candidate(s, lay, req, option, p.j, p.batches, p.tpot, p.terms, mem, p_rate, p.extra)

    if req.request_rate is None:
        return [steady(p, p.options[0]) for p in pending], considered, reason, 0
    # at a rate every split serves the rate, and the shortest TPOT ranks first: the decode layouts are
    # replayed in the order of their first split's steady TPOT, until the next cannot reach the top
    firsts = sorted(((steady(p, p.options[0]), n, p) for n, p in enumerate(pending)), key=lambda f: (f[0].tpot_s, f[1]))
    met: list[float] = []
    unreplayed = 0
    for first, _, p in firsts:
        if REPLAYED_TPOT_FLOOR * first.tpot_s > _top_tpot_s(met, req.top):
            unreplayed += 1
            continue
        c = None
        for m, option in enumerate(p.options[:SPLITS_REPLAYED]):
            at_steady = first if m == 0 else steady(p, option)  # the first split's priced once
            tried = _replayed_option(s, lay, req, at_steady, option, p, replays)
            c = c or tried  # where none meets the targets on its replay, the steady state's first
            if tried.meets_targets:
                c = tried
                break
        assert c is not None
        cands.append(c)
        if c.meets_targets:
            met.append(c.tpot_s)  # type: ignore[arg-type]
    return cands, considered, reason, unreplayed


REPLAYED_TPOT_FLOOR = 0.95
"""A decode pool's replayed TPOT over its steady round's is at least this: its iterations decode
the running batch alone, whose time mean is Little's law's batch, and a round's time grows with
its batch, so the Poisson swings of the batch cost more than they save. Measured on this planner
(2026-12-07, the 103 replayed candidates of DeepSeek-V3 on a GB200 rack at 10 req/s, 70B on 16
DGX H100 at 30 req/s and Qwen3-30B-A3B on two DGX H100 at 20 req/s): 0.993 to 1.214; the margin
below 0.993 is a judgement. A decode layout whose steady TPOT times this cannot reach the top
ranks found so far is not replayed (``disaggregated_candidates``)."""


def _top_tpot_s(met: list[float], top: int) -> float:
    """The TPOT a split must beat to enter the ``top`` ranks, given the replayed TPOTs of those found
    so far that meet the targets (``met``): the ``top``-th shortest of their distinct values (splits
    priced alike share one rank, ``search.merge_equivalents``), inf until there are that many."""
    distinct: list[float] = []
    for value in sorted(met):
        if not distinct or abs(value - distinct[-1]) > 1e-9 * value:
            distinct.append(value)
    return distinct[top - 1] if len(distinct) >= top else math.inf


_Option = tuple[tuple[float, float], int, int, int, int, float, float, int]
"""A split of one decode layout (``disaggregated_candidates``): its steady-state key, prefill layout
index, prefill and decode replicas, the decode grid's batch index, TTFT, rate and prompts a
prefill round."""


@dataclass(frozen=True)
class _Splits:
    """A decode layout's splits in the steady state's order, with the grid arrays ``_split_candidate``
    prices them from."""

    j: int
    options: list[_Option]
    batches: np.ndarray
    tpot: np.ndarray
    terms: RoundTerms
    extra: np.ndarray


def _split_candidate(
    s: Setting,
    lay: Layouts,
    req: ServeRequest,
    option: _Option,
    j: int,
    batches: np.ndarray,
    tpot: np.ndarray,
    terms: RoundTerms,
    mem: MemoryPlan,
    p_rate: np.ndarray,
    extra: np.ndarray,
) -> ServeCandidate:
    """The candidate of decode layout ``j`` and one split ``option`` (``_Option``) at the steady state
    (``_replayed_option`` replays it at a request rate)."""
    from planner.serving.search import _kv_per_token

    _, i, n_p, n_d, k, ttft, rate, prompts = option
    N, osl, g_d, cap = s.cluster.num_gpus, float(req.output_len), float(lay.gpus_per_replica[j]), mem.max_concurrency[j]
    if req.request_rate is not None:
        rate = req.request_rate
    bound = float(n_p * p_rate[i])  # the prefill pool's rate at capacity, which a concurrency's may not pass
    batch, tpot_s, tpot_terms, rate = _decode_at(
        s, lay, j, n_d, bound, rate, float(batches[k]), float(tpot[k]), ttft, req
    )
    if req.concurrency is not None:
        ttft = float(concurrency_ttft_s(req, ttft, np.array([rate]), np.array([tpot_s]))[0])
    if tpot_terms is None:
        tpot_terms = terms.as_dict(k)
    split = {
        "prefill_replicas": n_p,
        "prefill_tp": int(lay.tp[i]),
        "prefill_pp": int(lay.pp[i]),
        "prefill_ep": int(lay.ep[i]),
        "prefill_attention_dp": bool(lay.attention_dp[i]),
        "prefill_gpus": int(n_p * lay.gpus_per_replica[i]),
        "prefill_batch": prompts,
        "decode_replicas": n_d,
        "decode_gpus": int(n_d * g_d),
    }
    cfg = {
        "tp": int(lay.tp[j]),
        "pp": int(lay.pp[j]),
        "ep": int(lay.ep[j]),
        "attention_dp": bool(lay.attention_dp[j]),
        "replicas": n_d,
        "gpus_per_replica": int(g_d),
        "prefill_decode_split": split,
    }
    transfer = float(extra[i]) - s.params.request_path_s
    c = ServeCandidate(
        config=cfg,
        batch_per_replica=batch,
        ttft_s=ttft,
        tpot_s=tpot_s,
        output_tokens_per_s_per_gpu=float(rate * osl / N),
        output_tokens_per_s_per_user=float(1.0 / tpot_s),
        max_concurrency=int(cap * n_d),
        memory_per_gpu_bytes=float(mem.total_bytes[j]),
        memory_breakdown_bytes=mem.breakdown(j),
        kv_cache_bytes_per_token=_kv_per_token(s, req),
        tpot_breakdown_s=tpot_terms,
        meets_targets=True,
        warnings=[
            f"prefill:decode GPUs {split['prefill_gpus']}:{split['decode_gpus']}; KV transfer "
            f"{transfer * 1e3:.2f} ms per request",
        ],
    )
    return c


def _replayed_option(
    s: Setting,
    lay: Layouts,
    req: ServeRequest,
    c: ServeCandidate,
    option: _Option,
    p: _Splits,
    replays: dict[tuple[str, int, int], tuple[Replayed, bool]],
) -> ServeCandidate:
    """``c``, the steady-state candidate of decode layout ``p.j`` and split ``option``, replayed at the
    request rate (``replayed_split``; its pools' replays kept in ``replays``)."""
    _, i, n_p, n_d, *_ = option
    p_pool = replace(lay.take(np.array([i])), replicas=np.array([float(n_p)]))
    d_pool = replace(lay.take(np.array([p.j])), replicas=np.array([float(n_d)]))
    transfer = float(p.extra[i]) - s.params.request_path_s
    return replayed_split(c, s, p_pool, d_pool, req, transfer, replays, ((i, n_p), (p.j, n_d)))


def replayed_split(
    c: ServeCandidate,
    s: Setting,
    prefill: Layouts,
    decode: Layouts,
    req: ServeRequest,
    transfer_s: float,
    replays: dict[tuple[str, int, int], tuple[Replayed, bool]],
    keys: tuple[tuple[int, int], tuple[int, int]],
) -> ServeCandidate:
    """``c`` (a split at ``req``'s request rate) with its TTFT, TPOT and decode batch from replays of
    its two pools (``replay.replay``, as ``search._replayed`` replays a colocated layout; the same
    requests per replica and measured middle half): the prefill pool (``prefill``, one row, its
    replicas) at the rate with one output token, whose mean TTFT is a prompt's wait for admission
    and its rounds, Poisson bursts included, which the steady round at the prompts its share needs
    (``prefill_at``) leaves out; then the decode pool (``decode``) at the same rate, each request
    arriving with its KV cache (``prompt_done``) and joining the next iteration, whose first
    iteration gives the first token. So TTFT = prefill replay + the KV's move (``transfer_s``) +
    the decode replica's wait and first iteration + the server's request path, the path of vLLM's
    disaggregated serving, where the prefill instance runs the prompt for one token and the decode
    instance, given the KV cache, generates every token the client sees (examples/online_serving/
    disaggregated_serving, the proxy's max_tokens=1 to the prefiller); TPOT = the decode replay's
    mean inter-token latency. Arrivals at the decode pool are taken as Poisson at the rate (what
    leaves the prefill pool is smoother, so its waits come out no shorter). A pool whose admission
    queue grows does not sustain the rate and meets no target. ``replays``: each pool's replay and
    whether it keeps up, by (pool, layout index, replicas) of ``keys`` (the prefill pool's, the
    decode pool's), kept across the splits tried (``SPLITS_REPLAYED``), which share pools."""
    from planner.serving.search import QUEUE_GROWTH_TOLERANCE, REPLAY_MEASURED, REPLAY_MIN_REQUESTS, _meets

    assert req.request_rate is not None
    isl, osl, rate = req.input_len, req.output_len, req.request_rate
    split = c.config["prefill_decode_split"]
    assert isinstance(split, dict)
    pools = []
    for name, pool, out, in_flight, key in (
        ("prefill", prefill, 1, float(split["prefill_batch"]), keys[0]),
        ("decode", decode, osl, c.batch_per_replica, keys[1]),
    ):
        held = replays.get((name, *key))
        if held is None:
            per_replica = max(REPLAY_MIN_REQUESTS, 4 * math.ceil(in_flight))
            window = per_replica * (REPLAY_MEASURED[1] - REPLAY_MEASURED[0])
            requests = per_replica * int(pool.replicas[0])
            r = replay(s, pool, isl, out, rate, requests, REPLAY_MEASURED, prompt_done=name == "decode")
            held = replays[(name, *key)] = (r, r.queue_growth <= QUEUE_GROWTH_TOLERANCE * window)
        pools.append(held)
    (p, p_keeps), (d, d_keeps) = pools
    ttft = p.ttft_s + transfer_s + d.ttft_s + s.params.request_path_s
    tpot = d.itl_s if math.isfinite(d.itl_s) else c.tpot_s  # one output token: no gap to measure
    sustains = p_keeps and d_keeps
    return c.model_copy(
        update={
            "ttft_s": ttft,
            "tpot_s": tpot,
            "output_tokens_per_s_per_user": 1.0 / tpot,
            "batch_per_replica": round(d.running, 9),
            "meets_targets": sustains and bool(_meets(req, np.array([ttft]), np.array([tpot]))[0]),
            "replayed": True,
            "sustains_rate": sustains,
            "steady_state_ttft_s": c.ttft_s,
            "steady_state_tpot_s": c.tpot_s,
        }
    )


def _no_split_reason(req: ServeRequest, fastest_ttft_s: float, fastest_tpot_s: float) -> str:
    """Why no split is a candidate: the target no layout reaches even at one prompt a prefill round
    and one sequence a decode replica, else memory or the load."""
    if math.isinf(fastest_ttft_s) or math.isinf(fastest_tpot_s):
        return "no prefill/decode split fits in memory"
    if req.ttft_s is not None and fastest_ttft_s > req.ttft_s:
        return (
            f"no prefill/decode split meets the TTFT target of {req.ttft_s * 1e3:g} ms: the shortest is "
            f"{fastest_ttft_s * 1e3:.1f} ms (one prompt a prefill round, its KV's move and the server's path)"
        )
    if req.tpot_s is not None and fastest_tpot_s > req.tpot_s:
        return (
            f"no prefill/decode split meets the TPOT target of {req.tpot_s * 1e3:g} ms: the shortest is "
            f"{fastest_tpot_s * 1e3:.1f} ms (one sequence a decode replica)"
        )
    return "no prefill/decode split meets the targets at the load within memory"


def _decode_at(
    s: Setting,
    lay: Layouts,
    j: int,
    replicas: int,
    bound: float,
    rate: float,
    batch: float,
    tpot_s: float,
    ttft_s: float,
    req: ServeRequest,
) -> tuple[float, float, dict[str, float] | None, float]:
    """(batch, TPOT, TPOT's terms, requests/s) of ``replicas`` decode replicas of layout ``j`` serving
    ``rate`` requests/s: the grid's ``batch`` (TPOT ``tpot_s``) serves at least that, and where it
    serves more (the prefill pool, a request rate or a concurrency bounds the rate) a replica runs
    the batch that serves the rate, Little's law B = rate / replicas x osl x TPOT(B), found from the
    grid's batch down (TPOT grows with the batch, so the iteration falls to the fixed point); at a
    concurrency N the rate is min(``bound``, N / (TTFT + (osl - 1) x TPOT(B))) at each step. A review
    (2026-12-07): a prefill-bound 70B split on four DGX H100 printed 192 a decode replica at its
    29.2 ms, which serve 411 tokens/s per GPU where the plan served 337. None for the terms where the
    grid's batch is kept."""
    osl = float(req.output_len)
    if batch <= 1.0 or rate / replicas * osl * tpot_s >= batch * (1.0 - 1e-9):
        return batch, tpot_s, None, rate
    one = lay.take(np.array([j]))
    b = batch
    for _ in range(50):
        terms = round_terms(s, one, np.array([b]), np.array([req.input_len + osl / 2.0]), np.zeros(1), req.input_len)
        tpot_s = float(terms.total_s[0])
        if req.concurrency is not None:  # Little's law over a request's time, its prompt's included
            rate = min(bound, req.concurrency / (ttft_s + (osl - 1.0) * tpot_s))
        nb = max(1.0, min(batch, rate / replicas * osl * tpot_s))
        if abs(nb - b) <= 1e-9 * b:
            break
        b = nb
    return b, tpot_s, terms.as_dict(0), rate
