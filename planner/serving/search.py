"""Layout search for serving (ARCHITECTURE 9.5): every (tp, pp, ep, attention DP) the cluster and
the pins allow, times a grid of batch sizes, priced as numpy columns; ranked by output tokens/s
per GPU among those that meet the latency targets.

Load (``ServeRequest``): a concurrency N puts ceil(N / replicas) sequences on each replica; a
request rate R is served at the smallest batch B whose rate B / (TTFT + osl x TPOT) reaches
R / replicas (Little's law, L = lambda W; the engine's TTFT, without the server's request path, in
which a request holds no slot of the engine); with neither, each layout runs the largest batch that
meets the targets and its memory allows (maximum throughput), judged, with targets or without, on a
closed-loop replay at that batch (``_replayed_at_targets``), or at the batch the engine ran where
its token budget queued the rest (``_without_queue``). Under continuous batching with
chunked prefill each round carries B decode tokens plus B x isl / osl prompt tokens on average
(every finished request is replaced by one whose prompt must be prefilled), so prefill slows
TPOT as it does in the engines; TTFT is the prompt's chunks at that mixed round plus half a round
of waiting to be admitted, plus the server's request path a client measures it through
(``FittedParameters.request_path_ms``).

Disaggregation (``disaggregate``, DistServe, Zhong et al. OSDI 2024; Splitwise, Patel et al.
ISCA 2024): prefill replicas run prompts only, decode replicas decode only, the KV cache moves
between them over the links (NVLink inside one fast domain, else the NICs of the prefill replica's
GPUs); replica counts are the integer split of the cluster that maximises min(prefill rate,
decode rate).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from planner.error_bar import INTERVAL_QUANTILES, interval, quantile
from planner.errors import PlannerError, SchemaError
from planner.figures import seconds
from planner.hf_config import unfamiliar_type_note
from planner.schemas.hardware import ClusterSpec
from planner.schemas.model import ModelSpec
from planner.serving.engine import ENGINES, EngineProfile, ErrorMetric, load_engine
from planner.serving.kv import kv_bytes_per_token
from planner.serving.layout import Layouts, layout_text
from planner.serving.memory import MemoryPlan, reserved_context
from planner.serving.schemas import ServeCandidate, ServeRanking, ServeRequest
from planner.serving.step import (
    RoundTerms,
    Setting,
    fp4_tensor_cores,
    prompt_piece,
    resolve_ssm_dtype,
    round_terms,
    schedulers,
    steady_round,
)

BATCH_GRID = tuple(sorted({2**i for i in range(14)} | {3 * 2**i for i in range(12)}))
"""Batch sizes tried per replica (1, 2, 3, 4, 6, 8, 12, ... 8192), plus each layout's max
concurrency."""


def _powers_of_two_up_to(n: int) -> list[int]:
    return [2**i for i in range(int(math.log2(max(n, 1))) + 1)]


def enumerate_layouts(model: ModelSpec, cluster: ClusterSpec, engine: EngineProfile, req: ServeRequest) -> Layouts:
    """Every layout the cluster and pins allow: tp a power of two (or the pin) within the fast
    domain dividing the attention heads unless attention DP, pp up to the layers, ep a divisor of
    tp and of the experts (MoE only), attention DP where the engine has it (MoE models, ep = tp)."""
    n = cluster.num_gpus
    rows: list[tuple[int, int, int, bool, int]] = []
    tps = [req.tp] if req.tp else _powers_of_two_up_to(min(n, cluster.fast_domain_gpus))
    pps = [req.pp] if req.pp else _powers_of_two_up_to(min(n, model.num_hidden_layers))
    for tp in tps:
        for pp in pps:
            if tp * pp > n:
                continue
            eps = [1]
            if model.is_moe:
                eps = [e for e in range(1, tp + 1) if tp % e == 0 and model.num_experts_total % e == 0]
                if engine.expert_parallel == "all_ranks":  # vLLM: EP over every rank or none
                    eps = [e for e in eps if e in (1, tp)]
            if req.ep:
                eps = [req.ep] if req.ep in eps else []
            for ep in eps:
                adps = [False]
                if engine.attention_dp and model.is_moe and ep == tp and tp > 1:
                    adps.append(True)
                if req.attention_dp is not None:
                    adps = [a for a in adps if a == req.attention_dp]
                for adp in adps:
                    if not adp and (model.num_attention_heads % tp or not _splits_mamba(model, tp)):
                        continue
                    rows.append((tp, pp, ep, adp, n // (tp * pp)))
    if not rows:
        raise PlannerError(_no_layout_reason(model, cluster, engine, req))
    tp_, pp_, ep_, adp_, rep_ = zip(*rows, strict=True)
    return Layouts.of(list(tp_), list(pp_), list(ep_), list(adp_), list(rep_))


def _splits_mamba(model: ModelSpec, tp: int) -> bool:
    """Whether ``tp`` ranks split a hybrid's Mamba-2 mixers: tp divides the heads, and the B/C groups
    unless there is one (replicated) (vLLM MambaMixer2: 'Tensor parallel world size must divide num
    heads', groups extended by ``extra_groups_for_head_shards`` only from one; TensorRT-LLM's
    MambaCacheManager asserts both divide). True for a model without Mamba layers."""
    if not model.blocks_of("M"):
        return True
    groups = model.mamba_n_groups or 1
    return (model.mamba_num_heads or 0) % tp == 0 and (groups % tp == 0 or groups == 1)


def _no_layout_reason(model: ModelSpec, cluster: ClusterSpec, engine: EngineProfile, req: ServeRequest) -> str:
    n = cluster.num_gpus
    if req.tp and req.tp > n:  # a pinned tp may span domains (priced over the slow links, step.py)
        return f"tp: pinned {req.tp} exceeds the cluster's {n} GPUs"
    if (req.tp or 1) * (req.pp or 1) > n:
        return f"tp x pp: pinned {(req.tp or 1) * (req.pp or 1)} GPUs, the cluster has {n}"
    if req.ep and req.ep > n:  # the experts split over a replica's tp ranks: ep divides tp
        return f"ep: pinned {req.ep} exceeds the cluster's {n} GPUs (ep divides a replica's tp)"
    if req.ep and not model.is_moe:
        return f"ep: {model.name} has no experts; leave ep unset"
    if req.ep and (model.num_experts_total % req.ep or (req.tp and req.tp % req.ep)):
        return f"ep: {req.ep} must divide tp and the {model.num_experts_total} experts"
    if req.attention_dp and not engine.attention_dp:
        return f"attention_dp: {engine.name} runs no attention DP (engines/{engine.name}.yaml attention_dp: false)"
    if req.attention_dp and not model.is_moe:
        return f"attention_dp: {engine.name} runs attention DP only for MoE models with ep = tp > 1"
    if req.attention_dp and (req.tp == 1 or (req.ep and req.tp and req.ep != req.tp) or req.ep == 1):
        return (
            "attention_dp: runs with ep = tp > 1 (every rank holds whole sequences and a share of the experts); "
            f"pinned tp {req.tp or 'any'}, ep {req.ep or 'any'}"
        )
    if req.ep and engine.expert_parallel == "all_ranks" and req.tp and req.ep not in (1, req.tp):
        return (
            f"ep: {engine.name} runs expert parallelism over every rank of a replica or none (--enable-expert-"
            f"parallel has no size of its own): pin ep 1 or ep = tp ({req.tp}), or use sglang or trtllm"
        )
    if req.tp and model.num_attention_heads % req.tp:
        return f"tp: {req.tp} does not divide the {model.num_attention_heads} attention heads"
    if req.tp and not _splits_mamba(model, req.tp):
        return (
            f"tp: {req.tp} does not split the Mamba-2 mixers ({model.mamba_num_heads} heads, "
            f"{model.mamba_n_groups} groups: tp must divide both, or the heads with one group)"
        )
    return "no layout satisfies the pins; loosen --tp/--pp/--ep"


def setting_for(
    model: ModelSpec, cluster: ClusterSpec, req: ServeRequest, engine: EngineProfile | None = None
) -> Setting:
    """What ``req`` serves on ``cluster``: its formats (a hybrid's SSM state's by ``resolve_ssm_dtype``)
    and the engine's fitted parameters for the GPU."""
    engine = (engine or load_engine(req.engine)).for_gpu(cluster.gpu)
    ssm = resolve_ssm_dtype(model, engine, req.mamba_ssm_dtype)
    params = engine.parameters(cluster.gpu.architecture)
    return Setting(model, cluster, engine, req.weights_dtype, req.kv_dtype, params, ssm)


@dataclass(frozen=True)
class Priced:
    """Layouts x batches, flattened: the layout columns, the batch, memory and the round terms."""

    lay: Layouts
    batch: np.ndarray
    memory: MemoryPlan
    terms: RoundTerms
    engine_ttft_s: np.ndarray  # the engine's first token, in which a request holds a slot
    tpot_s: np.ndarray
    request_path_s: float = 0.0  # the server's part of the client's TTFT (``FittedParameters.request_path_ms``)

    @property
    def ttft_s(self) -> np.ndarray:
        """The TTFT a client of the engine's server measures: the engine's first token and the
        request path."""
        return self.engine_ttft_s + self.request_path_s

    @property
    def tokens_per_s_per_gpu(self) -> np.ndarray:
        return self.batch / self.tpot_s / self.lay.gpus_per_replica


def prefill_chunk(engine: EngineProfile, input_len: int) -> int:
    """Prompt tokens one iteration takes (``step.prompt_piece``), whole."""
    return int(prompt_piece(engine, input_len))


def runs_chunked(engine: EngineProfile, input_len: int) -> bool:
    """Whether the engine runs prompts of ``input_len`` tokens in chunks beside the running
    sequences' decode tokens: by default, or where a prompt exceeds its token budget, which only
    chunked prefill admits (the plan's warning says so and ``--export`` turns it on for TensorRT-LLM:
    ``enable_chunked_prefill``). Run whole instead, a budget-sized piece fits beside no decode token,
    so the replay held each 32K prompt of Llama-3.1-70B (TensorRT-LLM, 8,192 tokens) until every
    running sequence had finished: 0.3 req/s on one DGX H100 replayed TTFTs of 5,600-6,500 s on the
    layouts the steady state let through."""
    return engine.chunked_prefill or input_len > engine.max_num_batched_tokens


def price_colocated(s: Setting, lay: Layouts, batch: np.ndarray, req: ServeRequest) -> Priced:
    """TTFT and TPOT of each layout at ``batch`` running sequences per replica."""
    isl, osl = float(req.input_len), float(req.output_len)
    mem = s.memory(lay, reserved_context(s.engine, isl, osl))
    context = np.full(len(lay), isl + osl / 2.0)
    terms = steady_round(s, lay, batch, isl, osl).terms(s.params)
    tpot = terms.total_s
    first = first_token_s(s, lay, batch, context, req.input_len, tpot)
    return Priced(lay, batch, mem, terms, first, tpot, s.params.request_path_s)


def first_token_s(
    s: Setting, lay: Layouts, batch: np.ndarray, context: np.ndarray, input_len: int, tpot_s: np.ndarray
) -> np.ndarray:
    """Steady-state TTFT at ``batch`` running sequences per replica: the prompt's chunks, each in a
    round beside the other batch - 1 sequences' decode tokens, plus half a round of ``tpot_s`` (a
    request arrives in the middle of an iteration and joins the next) where others run."""
    chunk = float(prefill_chunk(s.engine, input_len))
    first = round_terms(
        s, lay, np.maximum(batch - 1, 0), context, np.full(len(lay), chunk) * lay.pp, float(input_len)
    ).total_s
    return math.ceil(input_len / chunk) * first + 0.5 * tpot_s * (batch > 1)


def _grid(lay: Layouts, mem: MemoryPlan, concurrency: int | None = None) -> tuple[Layouts, np.ndarray]:
    """Each layout once per batch of the grid below its max concurrency, at it, and at the asked
    concurrency per replica where one is asked and fits."""
    idx, batch = [], []
    for i, cap in enumerate(mem.max_concurrency):
        if cap < 1:
            continue
        sizes = {b for b in BATCH_GRID if b < cap} | {int(cap)}
        if concurrency is not None:
            sizes.add(int(min(cap, math.ceil(concurrency / lay.replicas[i]))))
        sizes = sorted(sizes)
        idx += [i] * len(sizes)
        batch += sizes
    index = np.asarray(idx, dtype=int)
    return lay.take(index), np.asarray(batch, dtype=float)


def _meets(req: ServeRequest, ttft: np.ndarray, tpot: np.ndarray) -> np.ndarray:
    ok = np.ones(len(ttft), dtype=bool)
    if req.ttft_s is not None:
        ok &= ttft <= req.ttft_s
    if req.tpot_s is not None:
        ok &= tpot <= req.tpot_s
    return ok


def _kv_per_token(s: Setting, req: ServeRequest) -> float:
    return kv_bytes_per_token(s.model, s.kv_dtype, float(req.input_len + req.output_len), s.engine.chunked_kv)


def _config(
    lay: Layouts, i: int, split: dict[str, int | bool] | None = None
) -> dict[str, int | bool | dict[str, int | bool] | None]:
    return {
        "tp": int(lay.tp[i]),
        "pp": int(lay.pp[i]),
        "ep": int(lay.ep[i]),
        "attention_dp": bool(lay.attention_dp[i]),
        "replicas": int(lay.replicas[i]),
        "gpus_per_replica": int(lay.gpus_per_replica[i]),
        "prefill_decode_split": split,
    }


def _warnings(s: Setting, req: ServeRequest) -> list[str]:
    out = []
    gpu = s.cluster.gpu
    if req.weights_dtype == "fp4" and not fp4_tensor_cores(gpu):
        out.append(
            f"fp4 weights on {gpu.name}: no FP4 tensor cores, priced as weight-only with bf16 activations (W4A16), "
            "at the BF16 rate"
        )
    if req.weights_dtype == "fp8" and "fp8" not in gpu.peak_tflops:
        out.append(f"fp8 weights on {gpu.name}: no FP8 tensor cores, priced as weight-only at the BF16 rate")
    if s.engine.calibrated_like and not s.engine.fitted:
        out.append(f"{s.engine.name} has no fit of its own: {s.engine.calibrated_like}'s fitted parameters stand in")
        fitted = load_engine(s.engine.calibrated_like).fitted
        if s.model.is_moe:
            out.append(_borrowed_expert_rate_note(s))
    else:
        fitted = s.engine.fitted
    if gpu.architecture not in fitted:
        what = "uncalibrated defaults" if not fitted else "the mean of its other architectures' fits"
        out.append(f"no fitted parameters for {gpu.architecture}: {what}")
    if req.input_len > s.engine.max_num_batched_tokens and not s.engine.chunked_prefill:
        out.append(
            f"prompts of {req.input_len} tokens exceed {s.engine.name}'s token budget of "
            f"{s.engine.max_num_batched_tokens}: priced in budget-sized chunks, as chunked prefill runs them "
            "(--export turns it on)"
        )
    if s.model.blocks_of("M"):
        out.append(_hybrid_note(s))
    if (unfamiliar := unfamiliar_type_note(s.model)) is not None:
        out.append(unfamiliar)
    return out


BORROWED_MOE_CHECKS = {
    ("vllm", "hopper"): "its three published GPT-OSS-20B rows (one H100, 8 in flight of 20K / 2K) ran 37-41% "
    "above their throughput priced so, their TTFTs and TPOTs 36-43% below theirs: expect its MoE plans to be slow",
}
"""Published rows of an engine without a fit of its own that check its borrowed routed-expert rate,
by (engine, GPU architecture): what `benchmarks/serving_accuracy.py` measured on 2026-12-07 with
the borrowed parameters (ARCHITECTURE 9.7; 41-45% and 38-43% before MXFP4's own bytes, session 58).
A report of a check, not a fitted figure."""


def _borrowed_expert_rate_note(s: Setting) -> str:
    """What a MoE plan of an engine that borrows another's fit assumes of its experts' kernels: the
    routed-expert rate (``FittedParameters.expert_gemm_fraction``) is the other engine's own MoE
    kernels' (TensorRT-LLM's PyTorch backend on Hopper: 0.35 of the dense GEMMs'), and what the
    published rows, where any, say of it (``BORROWED_MOE_CHECKS``)."""
    arch = s.cluster.gpu.architecture
    checked = BORROWED_MOE_CHECKS.get((s.engine.name, arch), f"no published {s.engine.name} MoE row checks it")
    return (
        f"{s.engine.name} prices its routed experts at {s.engine.calibrated_like}'s fitted rate on {arch}, "
        f"{s.params.expert_gemm_fraction:.2f} of the dense GEMMs' (expert_gemm_fraction, fitted to "
        f"{s.engine.calibrated_like}'s own MoE kernels): {checked}"
    )


def _hybrid_note(s: Setting) -> str:
    """What a hybrid Mamba-2 plan assumes, and how far it is checked (ARCHITECTURE 9.8)."""
    m = s.model
    where = (
        f"in {s.engine.name}'s shared block pool, one page per Mamba layer without prefix caching (two with it)"
        if s.engine.mamba_state == "shared_pages"
        else "one slot per running sequence beside the KV cache"
    )
    return (
        f"hybrid Mamba-2: each of the {m.blocks_of('M')} Mamba layers keeps a {s.ssm_state_dtype} SSM state per "
        f"sequence ({where}), read and written once per decoded token; KV only in the {m.blocks_of('*')} attention "
        "layers. The state traffic and the scan are counted from the kernels, not fitted to hybrid serving runs"
    )


def _candidate(p: Priced, i: int, s: Setting, req: ServeRequest, meets: bool, why: str) -> ServeCandidate:
    m = p.memory
    rate = float(p.tokens_per_s_per_gpu[i])
    if req.request_rate is not None:  # the offered load, served: rate x osl over the cluster's GPUs
        rate = req.request_rate * req.output_len / float(p.lay.num_gpus[i])
    return ServeCandidate(
        config=_config(p.lay, i),
        batch_per_replica=float(p.batch[i]),
        ttft_s=float(p.ttft_s[i]),
        tpot_s=float(p.tpot_s[i]),
        output_tokens_per_s_per_gpu=rate,
        output_tokens_per_s_per_user=float(1.0 / p.tpot_s[i]),
        max_concurrency=int(m.max_concurrency[i] * p.lay.replicas[i]),
        memory_per_gpu_bytes=float(m.total_bytes[i]),
        memory_breakdown_bytes=m.breakdown(i),
        kv_cache_bytes_per_token=_kv_per_token(s, req),
        tpot_breakdown_s=p.terms.as_dict(i),
        meets_targets=meets,
        why=why,
    )


REPLAY_MIN_REQUESTS = 1600
"""Requests per replica a plan at a load replays at least (four times its steady-state batch
where that is more), in each of the four arrival draws at a request rate and in the one closed
loop at a concurrency, the middle half measured
(``REPLAY_MEASURED``): the first quarter covers the ramp from an empty engine (about one batch of
arrivals) and the last the drain after the last arrival, so what is measured is the load
sustained. Measured on this planner (70B, ISL 2048 / OSL 256 at 8 req/s on one DGX H100, vLLM):
the mean TTFT of 2 x TP4 went 299 / 356 / 336 / 345 ms at 400 / 800 / 1,600 / 3,200 requests
per replica (TP8: 240 / 311 / 298 / 293 ms), the inter-token latency within 2% from 1,600 on;
single draws of 1,600 spread 303-378 ms (TP8 260-367), hence the four. Near capacity a queue's
mean converges slowly, and what is left is that spread, not a bias."""

REPLAY_MEASURED = (0.25, 0.75)

QUEUE_GROWTH_TOLERANCE = 0.05
"""A replayed replica keeps up with the rate where the queue waiting for admission grows over the
measured requests by at most this share of them: an unstable queue grows by (1 - capacity / rate)
of the arrivals, so this flags a replica more than 5% short of its share of the rate. A
judgement, not a measurement: set above the noise of a stable queue's length (a few requests at
the end of an 800-request window, averaged over the four arrival draws: -2 to +1 requests for
the layouts of 70B at 8 req/s in ``REPLAY_MIN_REQUESTS``)."""


def _replayed_at_targets(p: Priced, s: Setting, req: ServeRequest) -> tuple[list[ServeCandidate], int]:
    """Maximum throughput, at latency targets or without them, replayed: per layout, the largest batch of the grid
    whose closed-loop replay at that batch (``_replayed`` at a concurrency of the batch on every
    replica) meets the targets, found by ``_largest_meeting``, the steady state's pick probed first.
    The steady-state round spreads every prompt evenly over the rounds, under the decode's weight
    reads; the engine runs a prompt whole in one iteration, which every running sequence waits for:
    70B at ISL 2048 / OSL 512 on one DGX H100 (vLLM), 2 x TP4 at 48 sequences per replica has a
    steady-state TPOT of 26.2 ms and a replayed one of 36 ms, so a 30 ms target is met at 24 (27.5
    ms), not 48. The replay can come out faster than the steady state too: a dense model's a few %
    (its iterations of decode tokens alone; 70B TP1 x PP2 on two DGX H200 at 128/2,048: 61.0 ms
    replayed, 61.3 steady, which had cost a target the no-target plan met 16% of its throughput), a
    MoE model's far more, as the experts a round reads grow slower than its tokens
    (``experts_touched_fraction``), so rounds of decode tokens alone read far fewer of them than the
    even spread's every round does (DeepSeek-V3 on 2 x 8 H200, TP8 EP8, 6 sequences a replica: 17.5
    ms replayed, 43.8 ms steady). So the search runs over every batch whose TTFT meets the target at
    the steady state and whose round of decode tokens alone (the replay's fastest iteration at that
    batch) meets the TPOT target; where the steady state accepts
    none of them, the smallest is probed first, and where its replay fails the layout has none. The
    replayed latencies are the ones the benchmark checks against published online runs
    (``runs.predict``); the steady state prices no latency row. A layout none of whose batches meets
    the targets on the replay keeps the replay of the smallest it probed, which meets none.
    Layouts are searched from the highest bound on their throughput down (their largest batch
    searched, over a round of its decode tokens alone: a replay's iterations are no faster, and fewer
    running sequences make fewer tokens); one whose bound is below the ``top``-th throughput found
    meeting the targets cannot rank and is not replayed. Returns the candidates and how many layouts
    were not replayed so (DeepSeek-V3 on a GB200 rack: 97 layouts, 262 replays and 28 s before, 8 s so).

    Without targets every batch meets them, so each layout is replayed once, at its largest batch:
    the maximum throughput is the replay's, not the steady round's. Until 2026-12-06 it was the
    steady round's, which hides the prompts' compute under the decode's weight reads; under a
    pipeline a micro-batch holds B / pp of the decode tokens, far below the roofline's ridge, so
    the whole prompt work hid there: 70B at 2K/512 on one DGX H100 (vLLM), 2 x TP1 x PP4 at 200
    sequences a replica was priced at 642 tokens/s per GPU and replays at 451, TP1 x PP8 644 and
    535, where TP8 (428 and 439) and 2 x TP4 (532 and 527) agree; the ranking had put the two
    pipelines first, the replay puts TP2 x PP4 (588) first. The serving benchmark scores a published
    maximum-throughput row by the same replay: of its run where the row states a request count
    (every request sent at once, the tail of the last requests included, ``runs.served``), else at
    the row's batch (``replay_at_batch``); the fit prices the rows by their waves
    (``runs._waves``), which the replay of the run tracks (median 0.0% over 1,031 rows, 90% within
    -3% .. +3%). A probe whose engine ran fewer than it was sent is replayed at what it ran
    (``_without_queue``)."""
    group = _layout_groups(p)
    steady = _meets(req, p.ttft_s, p.tpot_s)
    context = np.full(len(p.batch), req.input_len + req.output_len / 2.0)
    decode_only = round_terms(s, p.lay, p.batch, context, np.zeros(len(p.batch)), float(req.input_len)).total_s
    # a replay's TPOT can come out below the steady round's: a MoE model's far below, a dense model's
    # a few % (its iterations of decode tokens alone), so the search runs up to the batches whose
    # round of decode tokens alone meets the target
    possible = _meets(req, p.ttft_s, np.minimum(decode_only, p.tpot_s))
    # what no replay of a layout can beat: its largest batch searched over a round of decode alone
    bound = np.where(possible, p.batch / decode_only / p.lay.gpus_per_replica, 0.0)
    layouts = [np.flatnonzero((group == g) & possible) for g in range(group.max() + 1)]
    layouts = [rows for rows in layouts if len(rows)]
    layouts.sort(key=lambda rows: -float(bound[rows].max()))
    out: list[ServeCandidate] = []
    met: list[float] = []  # the throughputs found meeting the targets
    unreplayed = 0
    for rows in layouts:
        if float(bound[rows].max()) < _rank_floor(met, req.top) * (1.0 - 1e-6):
            unreplayed += 1
            continue
        rows = rows[np.argsort(p.batch[rows], kind="stable")]
        accepted = np.flatnonzero(steady[rows])
        prices: dict[tuple[int, int], np.ndarray] = {}  # one layout's iterations, priced once for every probe

        def probe(k: int, rows: np.ndarray = rows, prices: dict = prices) -> ServeCandidate:
            i = int(rows[k])
            one = p.lay.take(np.array([i]))
            return _closed_loop(_candidate(p, i, s, req, True, ""), float(p.batch[i]), s, one, req, prices)

        # first the steady state's pick (where it accepts none, the smallest batch, so that a layout
        # whose replay meets no target costs one replay)
        best, last = _largest_meeting(len(rows), int(accepted[-1]) if len(accepted) else 0, probe)
        if last is not None:
            out.append(best or last)
        if best is not None:
            met.append(best.output_tokens_per_s_per_gpu)
    return out, unreplayed


QUEUED = 0.95
"""A closed loop whose replay ran under this share of the batch it sent on average queued the rest
(``_without_queue``). A judgement, not a measurement: a loop the budget does not limit runs its
whole batch bar the ramp (70B on one DGX H100 at its KV room: 99-100% of it on eight layouts), one
it limits well under it (GPT-OSS-120B on one DGX B200 as 4 x TP2 x EP2 with TensorRT-LLM: 1,536 of
2,048; 8B at one output token: 4 of 214; DeepSeek-V3 TP4 x PP4 on two DGX H200 had run 6,144 of
8,136 until each pipeline micro-batch got a budget of its own, 2026-12-07). The rerun is kept where
its throughput is within 1% of the loop's, also a judgement (DeepSeek-V3's rerun had come within
0.1%: 1,059 against 1,060 tokens/s per GPU)."""


def _closed_loop(
    c: ServeCandidate, batch: float, s: Setting, one: Layouts, req: ServeRequest, prices: dict
) -> ServeCandidate:
    """``c`` (layout ``one`` at ``batch`` per replica) replayed as a closed loop of that batch on
    every replica (``_replayed``), or of as many as the engine ran (``_without_queue``)."""
    replayed = _replayed(c, s, one, _sent(req, batch, one), prices)
    return _without_queue(replayed, batch, s, one, req, prices)


def replay_at_batch(s: Setting, one: Layouts, req: ServeRequest, batch: float) -> ServeCandidate:
    """What a plan without targets reports for layout ``one`` (one row) at ``batch`` sequences per
    replica: its closed-loop replay (``_closed_loop``), as ``_replayed_at_targets`` probes each
    batch. The serving benchmark prices a published maximum-throughput row so (``runs.served``),
    which makes the band of ``plan serve``'s throughput the errors of the number it prints."""
    q = price_colocated(s, one, np.array([batch]), req)
    return _closed_loop(_candidate(q, 0, s, req, True, ""), batch, s, one, req, {})


def replay_at_load(s: Setting, one: Layouts, req: ServeRequest, path_s: float | None = None) -> ServeCandidate | None:
    """What a plan at ``req``'s load (a concurrency or a request rate) reports for layout ``one``
    (one row), as ``_colocated_candidates`` prices each layout: its batch of the grid
    (``_grid``, ``_select_batch``) replayed at the load (``_replayed``); None where no batch of it
    fits or keeps up. ``path_s``: the server's request path in a closed loop's cycle (unset, the
    engine's fitted one, as plan serve prices it; 0 for a client in the engine's process). The
    serving benchmark prices a published concurrency row so (``runs.served``)."""
    mem = s.memory(one, reserved_context(s.engine, req.input_len, req.output_len))
    if not mem.fits.any():
        return None
    glay, batch = _grid(one, mem, req.concurrency)
    p = price_colocated(s, glay, batch, req)
    (i,) = _select_batch(p, req)
    path = s.params.request_path_s if path_s is None else path_s
    return None if i < 0 else _replayed_at_load(p, int(i), s, req, path)


def _replayed_at_load(p: Priced, i: int, s: Setting, req: ServeRequest, path_s: float) -> ServeCandidate:
    """Row ``i`` of ``p`` (the batch ``_select_batch`` chose for its layout) replayed at ``req``'s load,
    a closed loop's cycle holding ``path_s`` of the server's request path."""
    return _replayed(_candidate(p, i, s, req, True, ""), s, p.lay.take(np.array([i])), req, path_s=path_s)


def _sent(req: ServeRequest, batch: float, one: Layouts) -> ServeRequest:
    """``req`` as a closed loop of ``batch`` requests in flight on every replica of ``one``."""
    return req.model_copy(update={"concurrency": int(batch * one.replicas[0])})


def _without_queue(
    c: ServeCandidate, batch: float, s: Setting, one: Layouts, req: ServeRequest, prices: dict
) -> ServeCandidate:
    """``c``, the replay of a closed loop of ``batch`` in flight per replica, or where the engine ran
    fewer (``QUEUED``) the replay of as many as it ran, which keeps its throughput (within 1%) and
    meets the targets where ``c`` does. An iteration's token budget admits the prompts of about
    max_num_batched_tokens x osl / (isl + osl) running sequences a replica (a scheduler), and a loop
    of more only queues the rest, which adds their wait to the TTFT: GPT-OSS-120B on one DGX B200
    (TensorRT-LLM, 4 x TP2 x EP2, 2K/512) at its KV room of 2,048 a replica ran 1,536 and replayed a
    TTFT of 12 s, at 1,536 the same throughput and 87 ms (tests/test_serve_replay.py)."""
    if c.batch_per_replica >= QUEUED * batch:
        return c
    ran = float(math.ceil(c.batch_per_replica * (1.0 - 1e-9)))  # 6,144.0000000003 ran 6,144, not 6,145
    q = price_colocated(s, one, np.array([ran]), req)
    again = _replayed(_candidate(q, 0, s, req, True, ""), s, one, _sent(req, ran, one), prices)
    keeps = again.output_tokens_per_s_per_gpu >= 0.99 * c.output_tokens_per_s_per_gpu
    chosen = again if keeps and (again.meets_targets or not c.meets_targets) else c
    return chosen.model_copy(update={"warnings": [*chosen.warnings, _budget_note(s, one, req, batch, ran)]})


def budget_batch(s: Setting, one: Layouts, input_len: int, output_len: int) -> float:
    """Running sequences a replica (layout ``one``) sustains under its engine's token budget: each
    of its schedulers (attention-DP ranks scheduled apart) admits pp x budget tokens a round (each
    micro-batch its own, ``replay.replay``), and in a steady state the prompts of the osl-th of its
    sequences that finish each round, B x isl / osl, beside their B decode tokens: B = pp x budget
    x osl / (isl + osl). An engine without chunked prefill runs a prompt (or a budget-sized piece
    of one) whole beside at most budget - piece decode tokens. More in flight only queue
    (``_without_queue``: GPT-OSS-120B at its KV room of 2,048 a replica ran 1,536)."""
    e = s.engine
    budget = e.max_num_batched_tokens
    pp = int(one.pp[0])
    per_rank = pp * budget * output_len / (input_len + output_len)  # the prompts of as many as finish
    if not runs_chunked(e, input_len):  # a prompt runs whole, beside the running ones' decode tokens
        per_rank = min(per_rank, pp * max(budget - prefill_chunk(e, input_len), 1))
    return int(schedulers(s, one)[0]) * per_rank


def _budget_note(s: Setting, one: Layouts, req: ServeRequest, sent: float, ran: float) -> str:
    """Why a replica ran ``ran`` of the ``sent`` sequences the closed loop kept in flight (its KV
    room, or fewer where the search sent fewer to meet a target): the engine's token budget, and
    what raises it."""
    e = s.engine
    ranks = int(schedulers(s, one)[0])
    each = " on each attention-DP rank" if ranks > 1 else ""
    budget = e.max_num_batched_tokens
    pp = int(one.pp[0])  # each micro-batch of a round its own budget (replay.replay)
    how = ("pp x " if pp > 1 else "") + "budget x osl / (isl + osl)"
    if not runs_chunked(e, req.input_len):  # a prompt runs whole, beside the running ones' decode tokens
        piece = prefill_chunk(e, req.input_len)
        beside = budget - piece
        how += f"; a whole prompt of {piece:,} tokens beside " + (
            f"at most {beside:,} decode tokens" if beside > 0 else "no decode token"
        )
    admitted = budget_batch(s, one, req.input_len, req.output_len)
    plural = "s" if round(admitted) != 1 else ""
    admits = f"admits the prompts of about {admitted:,.0f} running sequence{plural} a replica ({how})"
    flag = {"sglang": "--chunked-prefill-size", "vllm": "--max-num-batched-tokens"}.get(e.name, "--max_num_tokens")
    remedy = f"a larger budget ({flag}, which --export writes)" + (
        "" if runs_chunked(e, req.input_len) else " or chunked prefill"
    )
    per = "a micro-batch" if pp > 1 else "an iteration"
    return (
        f"ran {ran:,.0f} of the {sent:,.0f} sequences in flight a replica: {e.name}'s token budget of "
        f"{budget:,} tokens {per}{each} {admits}, and more only queue; {remedy} runs more"
    )


def _rank_floor(met: list[float], top: int) -> float:
    """The throughput a layout must reach to enter the ``top`` ranks, given those found so far that
    meet the targets (``met``): the ``top``-th largest of their distinct values (layouts priced
    alike share one rank, ``merge_equivalents``), 0 until there are that many."""
    distinct: list[float] = []
    for value in sorted(met, reverse=True):
        if not distinct or abs(distinct[-1] - value) > 1e-9 * max(abs(value), 1e-30):
            distinct.append(value)
    return distinct[top - 1] if len(distinct) >= top else 0.0


def _largest_meeting(
    n: int, first: int, probe: Callable[[int], ServeCandidate]
) -> tuple[ServeCandidate | None, ServeCandidate | None]:
    """The largest of ``n`` batches (ascending) whose replay meets the targets, taken to hold up to
    some batch and fail beyond it, by a search from the guess ``first`` outwards: where it meets them
    the next batch up, then the largest (a MoE layout's replay often meets them up to its memory);
    where it fails, the batches 1, 2, 4, ... below it, the replay usually landing near the steady
    state's pick; then halving between the largest met and the smallest failed. Two replays settle a
    layout whose answer is the guess or next to it. Returns (the largest that meets, or None; the
    last probed)."""
    if n == 0:
        return None, None
    met, failed = -1, n  # the answer lies in [met, failed - 1]
    best: ServeCandidate | None = None
    last: ServeCandidate | None = None

    def trial(k: int) -> bool:
        nonlocal met, failed, best, last
        last = probe(k)
        if last.meets_targets:
            met, best = k, last
            return True
        failed = k
        return False

    if trial(first):
        for k in (first + 1, n - 1):
            if not met < k < failed or not trial(k):
                break
    else:
        step = 1
        while met + 1 < failed and not trial(max(first - step, met + 1)) and failed > 0:
            step *= 2
    while failed - met > 1:
        trial((met + failed) // 2)
    return best, last


def _replayed(
    c: ServeCandidate,
    s: Setting,
    one: Layouts,
    req: ServeRequest,
    prices: dict[tuple[int, int], np.ndarray] | None = None,
    path_s: float = 0.0,
) -> ServeCandidate:
    """``c`` with its TTFT, TPOT (mean inter-token latency) and batch from a replay of the offered
    load (``replay.replay``): queueing, whole prompts landing in some iterations and not others,
    and, at a request rate, Poisson bursts, which the steady-state round at the batch averages
    away. At a request rate a replica that does not keep up with its share of it
    (``QUEUE_GROWTH_TOLERANCE``) meets no target; at a concurrency the load is a closed loop (each
    request finished sends the next, one deterministic draw) on each replica of its share of the N
    in flight (``_closed_loop_at``), whose throughput is that share over a request's time in it
    (Little's law: share x osl / (TTFT + (osl - 1) x TPOT)), summed over the replicas (and an
    engine's attention-DP schedulers): N below them leaves some idle (8B on one DGX H100 at 1 in
    flight, 8 replicas of TP1: one busy, 14.9 tokens/s per GPU, where every replica had been given
    ceil(N / replicas) = 1, 121). Whether it meets the targets is judged on the replay."""
    from planner.serving.replay import busy_ranks, replay

    replicas = int(one.replicas[0])
    isl, osl = req.input_len, req.output_len
    if req.concurrency is not None:
        # N in flight over the R replicas' S schedulers each (an engine that schedules each
        # attention-DP rank apart: its ranks): N mod RS of them hold ceil(N / RS), the others
        # floor(N / RS), none where N < RS (those idle); a replica is replayed with every scheduler
        # at a share (``_closed_loop_at``), and the means are over the requests, weighted by the rate
        # each scheduler completes them
        ranks = int(schedulers(s, one)[0])
        low, high = divmod(req.concurrency, replicas * ranks)
        loops = [(n, count) for n, count in ((low + 1, high), (low, replicas * ranks - high)) if n and count]
        # fewer in flight than schedulers: a replica's busy ranks alone share its rounds (replay.replay's
        # active ranks); one request at TP 8 with attention DP had been replayed beside 7 others
        busy = busy_ranks(ranks, req.concurrency, replicas)
        runs = [(count / busy, _closed_loop_at(c, s, one, req, n * busy, prices, path_s)) for n, count in loops]
        completed = sum(share * done for share, (done, _, _, _) in runs)
        ttft = sum(share * done * t for share, (done, t, _, _) in runs) / completed
        tpot = sum(share * done * g for share, (done, _, g, _) in runs) / completed
        running = sum(share * b for share, (_, _, _, b) in runs) / replicas
        rate = completed * osl / float(one.num_gpus[0])
        sustains = None
    else:
        assert req.request_rate is not None
        per_replica = max(REPLAY_MIN_REQUESTS, 4 * math.ceil(c.batch_per_replica))
        r = replay(s, one, isl, osl, req.request_rate, per_replica * replicas, REPLAY_MEASURED)
        tpot = r.itl_s if math.isfinite(r.itl_s) else c.tpot_s  # one output token: no gap to measure
        ttft, rate, running = r.ttft_s, c.output_tokens_per_s_per_gpu, r.running
        sustains = r.queue_growth <= QUEUE_GROWTH_TOLERANCE * per_replica * (REPLAY_MEASURED[1] - REPLAY_MEASURED[0])
    ttft += s.params.request_path_s  # the TTFT its client measures: the server's request path too
    meets = sustains is not False and bool(_meets(req, np.array([ttft]), np.array([tpot]))[0])
    return c.model_copy(
        update={
            "ttft_s": ttft,
            "tpot_s": tpot,
            "output_tokens_per_s_per_gpu": rate,
            "output_tokens_per_s_per_user": 1.0 / tpot,
            "batch_per_replica": round(running, 9),  # a time average: 47.99999999999954 for 48 in flight
            "meets_targets": meets,
            "replayed": True,
            "sustains_rate": sustains,
            "steady_state_ttft_s": c.ttft_s,
            "steady_state_tpot_s": c.tpot_s,
        }
    )


def _closed_loop_at(
    c: ServeCandidate,
    s: Setting,
    one: Layouts,
    req: ServeRequest,
    in_flight: int,
    prices: dict | None,
    path_s: float = 0.0,
) -> tuple[float, float, float, float]:
    """One replica of ``one`` (``c``'s layout) under a closed loop of ``in_flight`` requests (a
    replay, ``replay.replay``, of one deterministic draw): (requests it completes per second, mean
    TTFT, mean inter-token latency, time-mean batch). A closed loop reaches its steady state only with
    more requests than in flight; beyond twice its KV room the engine is saturated and the rest only
    queue: Little's law over the replay, the share beyond those replayed waiting behind them at the
    rate the saturated engine completes them (the throughput stops growing with N, the TTFT does
    not). The engine's TTFT. A client's semaphore is held through the server's request path
    (``path_s``; vllm bench serve's --max-concurrency wraps the whole request), so a request's cycle
    is path + TTFT + (osl - 1) x TPOT: the loop completes that much fewer, path / cycle, 0.05% at
    2K/512 and 20% at 128/2 (a review, 2026-12-07: 8B at 64 in flight, 128 in and 2 out, printed a
    TTFT of 34 ms with the path and a throughput without it, 451 tokens/s per GPU where Little's law
    over the printed figures gives 377). The replay itself keeps every request in the engine (the
    engine's batch a little above the loop's, its latencies a little long: an upper bound)."""
    from planner.serving.replay import replay

    replicas = int(one.replicas[0])
    isl, osl = req.input_len, req.output_len
    # beyond twice a replica's KV room the engine is saturated (the room, not c's batch: a replica
    # replayed with each attention-DP rank at its share holds the ranks' shares, more than a batch of 1)
    simulated = min(in_flight, 2 * max(1, math.ceil(c.max_concurrency / replicas)))
    per_replica = max(REPLAY_MIN_REQUESTS, 4 * simulated)
    r = replay(
        s,
        one,
        isl,
        osl,
        math.inf,
        per_replica * replicas,
        REPLAY_MEASURED,
        draws=1,
        concurrency=simulated * replicas,
        prices=prices,
    )
    tpot = r.itl_s if math.isfinite(r.itl_s) else c.tpot_s  # one output token: no gap to measure
    completions_per_s = simulated / (r.ttft_s + path_s + (osl - 1) * tpot)
    return completions_per_s, r.ttft_s + (in_flight - simulated) / completions_per_s, tpot, r.running


def _layout_groups(p: Priced) -> np.ndarray:
    """Per row of ``p``, the number of its layout (rows differing only in batch share one)."""
    layout_key = np.stack([p.lay.tp, p.lay.pp, p.lay.ep, p.lay.attention_dp.astype(float)], axis=1)
    _, group = np.unique(layout_key, axis=0, return_inverse=True)
    return group.ravel()


def _select_batch(p: Priced, req: ServeRequest) -> np.ndarray:
    """Per layout (one row each), the index into ``p`` of the batch it runs at under the request's
    load (a concurrency or a request rate; without one ``_replayed_at_targets`` picks it) (-1: none)."""
    group = _layout_groups(p)
    chosen = np.full(group.max() + 1, -1)
    if req.concurrency is not None:
        want = np.ceil(req.concurrency / p.lay.replicas)
        score = -np.abs(p.batch - want)  # the grid point nearest the asked batch, at or below capacity
        ok = p.batch <= want
        ok |= p.batch == p.memory.max_concurrency  # capacity below the asked batch: run full
    else:
        assert req.request_rate is not None
        ok = _steady_rates(p, req) * p.lay.replicas >= req.request_rate  # Little's law over a slot's time
        score = -p.batch  # the smallest batch that keeps up
    for g in range(group.max() + 1):
        rows = np.flatnonzero((group == g) & ok)
        if len(rows):
            chosen[g] = rows[np.argmax(score[rows])]
    return chosen


def _most_over_cluster(best: ServeCandidate, ok: list[ServeCandidate], gpus: int, req: ServeRequest) -> str:
    """Where #1 leaves GPUs idle, the layout among ``ok`` that serves the most tokens over the whole
    cluster, if another: a capacity planner on a fixed cluster may want the total, not the rate of
    the GPUs used (a review, 2026-12-07: 70B on 12 H100, #1 1 x TP2 x PP4 on 8 at 583 tokens/s per
    GPU, 4,664 in all, where 3 x TP4 on all 12 serves 6,276). None at a request rate, where every
    layout serves the offered load, or for a disaggregated plan, whose figures count the whole
    cluster already."""
    if req.request_rate is not None or req.disaggregate:
        return ""
    from planner.serving.render import layout_label

    def total(c: ServeCandidate) -> float:
        return c.output_tokens_per_s_per_gpu * gpus_used(c)

    most = max(ok, key=total)
    if total(most) <= total(best) * (1.0 + 1e-9):
        return ""
    return (
        f"; over the whole cluster {layout_label(most)} serves the most, {total(most):,.0f} tokens/s on "
        f"{gpus_used(most)} GPUs against #1's {total(best):,.0f}"
    )


def gpus_used(c: ServeCandidate) -> int:
    """The GPUs a candidate runs on: its replicas' (a disaggregated one's prefill and decode pools)."""
    split = c.config.get("prefill_decode_split")
    if isinstance(split, dict):
        return int(split["prefill_gpus"]) + int(split["decode_gpus"])
    return int(c.config["replicas"]) * int(c.config["gpus_per_replica"])  # type: ignore[arg-type]


def _why(best: ServeCandidate, others: list[ServeCandidate], req: ServeRequest) -> str:
    c = best.config
    parts = [
        f"tp{c['tp']} pp{c['pp']}"
        + (f" ep{c['ep']}" if c["ep"] != 1 else "")
        + (" attention-DP" if c["attention_dp"] else "")
    ]
    split = c.get("prefill_decode_split")
    if isinstance(split, dict):  # the decode layout above, its replicas and the prefill pool beside it
        from planner.serving.render import prefill_text

        parts[0] = f"decode {split['decode_replicas']}x {parts[0]} beside prefill {prefill_text(split)}"
        if best.replayed and best.steady_state_ttft_s is not None:
            steady_ms = best.steady_state_ttft_s * 1e3
            parts.append(f"TTFT {best.ttft_s * 1e3:.0f} ms replayed (its steady-state estimate {steady_ms:.0f} ms)")
    terms = best.tpot_breakdown_s
    top = max(terms, key=lambda k: terms[k])
    share = f"{terms[top] / sum(terms.values()):.0%} {top.removesuffix('_s').replace('_', ' ')}"
    if best.tpot_s is None:  # one output token (_one_token)
        parts.append(f"one output token: TTFT {best.ttft_s * 1e3:.0f} ms, its round {share}")
    elif best.replayed:  # the breakdown is the steady-state round's
        parts.append(f"TPOT {best.tpot_s * 1e3:.1f} ms replayed, its steady-state round {share}")
    else:
        parts.append(f"TPOT {best.tpot_s * 1e3:.1f} ms is {share}")
    replicas = int(c["replicas"])  # type: ignore[call-overload]
    room = f"KV room for {best.max_concurrency}" + (f" over its {replicas} replicas" if replicas > 1 else "")
    from planner.serving.render import batch_text

    parts.append(f"batch {batch_text(best.batch_per_replica)} per replica ({room})")
    if others and req.request_rate is not None:
        nxt = others[0]
        margin = ""
        if best.tpot_s is not None and nxt.tpot_s is not None:
            # a review: 2 x TP4 x PP8 over four nodes won on 46.2 ms against one node's TP4 at 49.3, well
            # inside the TPOT band; the gap is what a reader weighs against a simpler layout
            margin = (
                f" ({best.tpot_s * 1e3:.1f} ms; the next's {nxt.tpot_s * 1e3:.1f} ms is "
                f"{100 * (nxt.tpot_s / best.tpot_s - 1):.1f}% slower: weigh the gap against the TPOT band below)"
            )
        parts.append(f"every layout serves the offered {req.request_rate:g} req/s; the lowest TPOT wins{margin}")
    elif others:
        nxt = others[0]
        parts.append(f"{best.output_tokens_per_s_per_gpu / max(nxt.output_tokens_per_s_per_gpu, 1e-9):.2f}x the next")
    sized = [x for x in (best, *others) if x.replicas_for_rate is not None]
    if req.request_rate is not None and sized:
        # how few GPUs would keep up: a capacity planner's question, which the ranking by TPOT does not answer
        def gpus(x: ServeCandidate) -> int:
            return int(x.replicas_for_rate or 0) * int(x.config["gpus_per_replica"])  # type: ignore[call-overload]

        least = min(sized, key=gpus)
        x = least.config
        layout = layout_text(
            int(least.replicas_for_rate or 0),
            int(x["tp"]),
            int(x["pp"]),
            int(x["ep"]),
            bool(x["attention_dp"]),  # type: ignore[call-overload]
        )
        mine = f"; #1's layout on {gpus(best)}" if least is not best and best.replicas_for_rate else ""
        parts.append(
            f"the fewest GPUs that keep up with the rate at the steady state: {gpus(least)} ({layout}{mine}; the "
            "replay may need more)"
        )
    return "; ".join(parts)


def _priced_alike(a: ServeCandidate, b: ServeCandidate) -> bool:
    """Same throughput, latencies, batch and memory to 1e-9: layouts the model prices identically."""
    pairs = (
        (a.output_tokens_per_s_per_gpu, b.output_tokens_per_s_per_gpu),
        (a.tpot_s, b.tpot_s),
        (a.ttft_s, b.ttft_s),
        (a.batch_per_replica, b.batch_per_replica),
        (a.memory_per_gpu_bytes, b.memory_per_gpu_bytes),
    )
    return all(abs(x - y) <= 1e-9 * max(abs(x), abs(y), 1e-30) for x, y in pairs)


def merge_equivalents(ranked: list[ServeCandidate]) -> list[ServeCandidate]:
    """Consecutive candidates priced alike, shown once: the first keeps its place and lists the
    others' layouts (as ``plan`` lists equivalent meshes)."""
    from planner.serving.render import layout_label

    out: list[ServeCandidate] = []
    for c in ranked:
        if out and _priced_alike(out[-1], c):
            head = out[-1]
            out[-1] = head.model_copy(update={"equivalent_layouts": [*head.equivalent_layouts, layout_label(c)]})
        else:
            out.append(c)
    return out


def serve_search(model: ModelSpec, cluster: ClusterSpec, req: ServeRequest) -> ServeRanking:
    """Rank the feasible layouts (see the module docstring). A figure that comes out infinite or
    NaN (a profile's memory or rate far beyond any GPU's: an HBM of 1e300 GiB leaves infinite KV
    room) is the one line the training estimate gives (``pricing.out_of_range``), not a traceback."""
    if req.mamba_ssm_dtype is not None and not model.blocks_of("M"):
        raise PlannerError(f"mamba_ssm_dtype: {model.name} has no Mamba-2 layers; leave it unset")
    req = resolve_request(model, req)
    check_request(model, cluster, req)
    try:
        return _ranked(model, cluster, req)
    except SchemaError as err:
        from planner.pricing import out_of_range

        raise PlannerError(out_of_range(err.validation)) from None


def resolve_request(model: ModelSpec, req: ServeRequest) -> ServeRequest:
    """``req`` with what it left to the model filled in: the weight format, the checkpoint's
    (``ModelSpec.checkpoint_weights_dtype``) else bf16, as an engine serves the repository it loads."""
    if req.weights_dtype is not None:
        return req
    return req.model_copy(update={"weights_dtype": model.checkpoint_weights_dtype or "bf16"})


MODEL_FEATURES: dict[str, tuple[str, Callable[[ModelSpec], bool]]] = {
    "mla": ("multi-head latent attention (kv_lora_rank)", lambda m: m.is_mla),
    "hybrid_mamba": ("Mamba-2 layers among its attention layers (hybrid_override_pattern)", lambda m: m.is_hybrid),
    "attention_sinks": ("learned attention sinks", lambda m: m.attention_sinks),
    "chunked_attention": ("chunked local attention (attention_chunk_size)", lambda m: m.num_chunked_layers > 0),
}
"""Each ``engine.ModelFeature``: what it is, as an error names it, and whether a model has it."""


def check_request(model: ModelSpec, cluster: ClusterSpec, req: ServeRequest) -> None:
    """Refuse a question the engines would refuse at launch: a GPU the engine does not run on
    (``EngineProfile.gpu_architectures``), a weight or KV format it does not run on that GPU
    (``EngineProfile.format_architectures``; NVFP4, ``EngineProfile.nvfp4_architectures``), a model
    with a feature the engine builds no model with (``EngineProfile.unbuilt_model_features``), a
    request longer than the model's context (``max_position_embeddings``: vLLM refuses a
    max_model_len beyond it, TensorRT-LLM and SGLang likewise), and a disaggregated plan on one GPU."""
    engine = load_engine(req.engine)
    arch = cluster.gpu.architecture
    if engine.gpu_architectures is not None and arch not in engine.gpu_architectures:
        raise PlannerError(
            f"engine: {engine.name} runs on {', '.join(engine.gpu_architectures)} GPUs; {cluster.gpu.name} is "
            f"{arch or 'of no stated architecture'}: use vllm or sglang"
        )
    formats = engine.format_architectures or {}
    for what, dtype in (("--weights-dtype", req.weights_dtype), ("--kv-dtype", req.kv_dtype)):
        if dtype in formats and arch not in formats[dtype]:
            raise PlannerError(
                f"{what} {dtype}: {engine.name} runs {dtype} on {', '.join(formats[dtype])} GPUs; {cluster.gpu.name} "
                f"is {arch or 'of no stated architecture'} (engines/{engine.name}.yaml format_architectures): use "
                f"{what} bf16, or vllm or sglang"
            )
    nvfp4 = req.weights_dtype == "fp4" and model.checkpoint_fp4_format != "mxfp4"
    if nvfp4 and engine.nvfp4_architectures is not None and arch not in engine.nvfp4_architectures:
        raise PlannerError(
            f"--weights-dtype fp4: {engine.name} runs NVFP4 on {', '.join(engine.nvfp4_architectures)} GPUs and "
            f"{cluster.gpu.name} is {arch or 'of no stated architecture'} (engines/{engine.name}.yaml "
            f"nvfp4_architectures); {model.name}'s checkpoint is not MXFP4 (checkpoint_fp4_format), the fp4 it runs "
            "elsewhere: use --weights-dtype fp8, or vllm"
        )
    for feature in engine.unbuilt_model_features or []:
        what, has = MODEL_FEATURES[feature]
        if has(model):
            others = [e for e in ENGINES if feature not in (load_engine(e).unbuilt_model_features or [])]
            raise PlannerError(
                f"engine: {engine.name} builds no model with {what}, which {model.name} has "
                f"(engines/{engine.name}.yaml unbuilt_model_features); use {', '.join(others[:-1])} or {others[-1]}"
            )
    total = req.input_len + req.output_len
    if total > model.max_position_embeddings:
        raise PlannerError(
            f"input_len + output_len: {req.input_len} + {req.output_len} = {total} tokens exceed {model.name}'s "
            f"context of {model.max_position_embeddings} (max_position_embeddings); shorten the request"
        )
    if req.output_len == 1 and req.tpot_s is not None:
        raise PlannerError(
            "tpot_s: a request of output_len 1 has no token after the first to time; give a TTFT target instead"
        )
    if req.disaggregate and cluster.num_gpus < 2:
        raise PlannerError(
            f"disaggregate: needs at least 2 GPUs (one prefill, one decode replica); the cluster has {cluster.num_gpus}"
        )
    replica = (req.tp or 1) * (req.pp or 1)  # a pinned tp and pp hold for the replicas of both pools
    if req.disaggregate and 2 * replica > cluster.num_gpus:
        raise PlannerError(
            f"disaggregate: tp x pp pinned at {replica} GPUs a replica, so a prefill and a decode replica need "
            f"{2 * replica}; the cluster has {cluster.num_gpus}"
        )


def _ranked(model: ModelSpec, cluster: ClusterSpec, asked: ServeRequest) -> ServeRanking:
    engine = load_engine(asked.engine)
    req, searched, band_notes = _targets_at_band_end(asked, engine, model, cluster.gpu.architecture)
    s = setting_for(model, cluster, req, engine)
    warnings = band_notes + _warnings(s, req)
    lay = enumerate_layouts(model, cluster, engine, req)
    if req.disaggregate:
        from planner.serving.disagg import disaggregated_candidates

        cands, considered, reason, unreplayed = disaggregated_candidates(s, lay, req)
    else:
        cands, considered, reason, unreplayed = _colocated_candidates(s, lay, req)
    price = cluster.profile.price_per_gpu_hour_usd
    if price is not None:
        cands = [c.model_copy(update={"cost_per_million_output_tokens_usd": cost_per_million(c, price)}) for c in cands]
    ok = [c for c in cands if c.meets_targets]
    # at a fixed request rate every layout serves the same tokens: the faster one per user wins
    ok.sort(key=lambda c: (-round(c.output_tokens_per_s_per_gpu, 6), c.tpot_s))
    ranked = merge_equivalents(ok)[: req.top]
    if req.output_len == 1:
        ranked = [_one_token(c) for c in ranked]
    if ranked:
        ranked[0] = ranked[0].model_copy(update={"why": _why(ranked[0], ranked[1:], req)})
        used = gpus_used(ranked[0])
        if used < cluster.num_gpus:
            counted = (
                "which its tokens/s per GPU and $/Mtok count as serving nothing (a disaggregated plan's figures are "
                "per GPU of the cluster)"
                if req.disaggregate
                else "which its tokens/s per GPU and $/Mtok leave out (they count the GPUs it uses)"
            )
            warnings.append(
                f"#1 runs on {used} of the {cluster.num_gpus} GPUs: the other {cluster.num_gpus - used} idle, {counted}"
                + _most_over_cluster(ranked[0], ok, cluster.num_gpus, req)
            )
        if req.concurrency is not None and ranked[0].max_concurrency < req.concurrency:
            wait = (
                "a wait its TTFT holds by Little's law (a disaggregated plan at a concurrency is not replayed)"
                if req.disaggregate
                else "a wait its replayed TTFT includes"
            )
            warnings.append(
                f"concurrency {req.concurrency} exceeds the KV room of #1 ({ranked[0].max_concurrency} sequences "
                f"over the cluster): it runs at most that many at once and the rest wait in the engine's queue, {wait}"
            )
    elif not reason:
        reason = _empty_reason(cands, req)
    if searched:  # the reason names the targets searched: say which were asked
        reason = reason.replace(_asked(req), f"{_asked(asked)}; searched at the band's slow end: {_targets(req)}")
    ranked, bases = _with_intervals(ranked, engine, model, cluster.gpu.architecture, req)
    if ranked:
        warnings.extend(_band_warnings(ranked[0], asked))
    return ServeRanking(
        model=model.name,
        cluster=cluster.name,
        engine=engine.name,
        num_gpus=cluster.num_gpus,
        request=asked,
        searched_targets_s=searched,
        candidates=ranked,
        considered=considered,
        feasible=len(ok),
        unreplayed=unreplayed,
        reason=reason,
        interval_basis=bases,
        warnings=warnings,
        mamba_ssm_dtype=s.ssm_state_dtype if model.blocks_of("M") else None,  # type: ignore[arg-type]
        token_budget=s.engine.max_num_batched_tokens,
        gpus_per_host=cluster.gpus_per_host,
        price_per_gpu_hour_usd=cluster.profile.price_per_gpu_hour_usd,
        request_path_s=s.params.request_path_s,
    )


def _with_intervals(
    ranked: list[ServeCandidate], engine: EngineProfile, model: ModelSpec, architecture: str, req: ServeRequest
) -> tuple[list[ServeCandidate], dict[ErrorMetric, str]]:
    """The candidates with their throughput, TTFT and TPOT intervals (``error_bar.interval`` of the
    published runs' errors that match, ``EngineProfile.published_errors``), and what each is read
    from, for the metrics some candidate has one for. No throughput interval at a stated request
    rate: the throughput is then the offered load, not a prediction; no TPOT interval where there
    is no TPOT (one output token)."""
    fields: dict[ErrorMetric, str] = {"throughput": "output_tokens_per_s_per_gpu", "ttft": "ttft_s", "tpot": "tpot_s"}
    bases: dict[ErrorMetric, str] = {}
    for metric, name in fields.items():
        if metric == "throughput" and req.request_rate is not None:
            continue
        errors, basis = engine.published_errors(metric, architecture, model.is_moe)
        if not errors or not any(getattr(c, name) for c in ranked):
            continue
        bases[metric] = basis + (", none of them disaggregated" if req.disaggregate else "")
        ranked = [
            c.model_copy(update={f"{name}_interval": interval(v, errors)}) if (v := getattr(c, name)) else c
            for c in ranked
        ]
    return ranked, bases


def _targets_at_band_end(
    req: ServeRequest, engine: EngineProfile, model: ModelSpec, architecture: str
) -> tuple[ServeRequest, dict[ErrorMetric, float], list[str]]:
    """The request the search runs for ``targets_at_band_end``: each latency target times 1 + the
    10th percentile error of its band's runs (``error_bar.quantile``), so that a candidate meets
    it where its band's slow end, prediction / (1 + that error), meets the asked target; one
    engine and GPU give every candidate the same relative band, so scaling the target is exact.
    Returns (the request to search, the targets searched, notes); the request unchanged without
    the option, and a target without a band is kept, with a note."""
    if not req.targets_at_band_end:
        return req, {}, []
    searched: dict[ErrorMetric, float] = {}
    notes = []
    targets: tuple[tuple[ErrorMetric, float | None], ...] = (("ttft", req.ttft_s), ("tpot", req.tpot_s))
    for metric, target in targets:
        if target is None:
            continue
        errors, basis = engine.published_errors(metric, architecture, model.is_moe)
        if not errors:
            notes.append(f"{metric.upper()} target checked at the prediction: {basis} to read a band from")
            continue
        near = quantile(errors, INTERVAL_QUANTILES[0])
        searched[metric] = target * (1.0 + near / 100.0)
        slow_end_pct = 100.0 / (1.0 + near / 100.0) - 100.0
        notes.append(
            f"{metric.upper()} target {seconds(target)} met at the slow end of the band, {slow_end_pct:+.0f}% on "
            f"the prediction: searched at {seconds(searched[metric])} ({basis})"
        )
    update = {f"{metric}_s": value for metric, value in searched.items()}
    if req.ttft_s is None and req.tpot_s is None:
        notes.append("--targets-at-band-end: no TTFT or TPOT target to check")
    return req.model_copy(update=update), searched, notes


def _band_warnings(best: ServeCandidate, req: ServeRequest) -> list[str]:
    """A latency target #1 meets by the prediction but not by its band: published runs priced like
    it measured more than the target at the band's near end, so the target is likely missed."""
    out = []
    for label, target, band in (("TTFT", req.ttft_s, best.ttft_s_interval), ("TPOT", req.tpot_s, best.tpot_s_interval)):
        if target is not None and band is not None and band[0] > target:
            out.append(
                f"{label} target {seconds(target)} lies below #1's band ({seconds(band[0])} to {seconds(band[1])}, "
                f"where published runs priced like it measured): it is likely missed"
            )
    return out


def _one_token(c: ServeCandidate) -> ServeCandidate:
    """A candidate for requests of one output token, which have no token after the first: no
    TPOT (vLLM's benchmark_serving reports 0 there, (e2e - TTFT) / (osl - 1) being undefined; it
    was shown as the steady-state round, seconds long under a full prefill), and a user's rate is
    that one token over the TTFT."""
    update = {"tpot_s": None, "steady_state_tpot_s": None, "output_tokens_per_s_per_user": 1.0 / c.ttft_s}
    return c.model_copy(update=update)


def cost_per_million(c: ServeCandidate, price_per_gpu_hour_usd: float) -> float:
    """Dollars per million output tokens: a GPU-hour's price over the output tokens one GPU
    generates in an hour. On one cluster it orders as 1 / tokens per GPU, so the ranking by
    throughput per GPU is also the ranking by cost."""
    return price_per_gpu_hour_usd / 3600.0 / c.output_tokens_per_s_per_gpu * 1e6


@dataclass(frozen=True)
class Curve:
    """One co-located layout over the batch grid: the serving trade-off it offers (output
    tokens/s per user against per GPU), and which batches meet the targets."""

    label: str
    tokens_per_s_per_user: np.ndarray
    tokens_per_s_per_gpu: np.ndarray
    meets: np.ndarray


def layout_curves(model: ModelSpec, cluster: ClusterSpec, req: ServeRequest) -> list[Curve]:
    """Every co-located layout that fits, priced over the batch grid at the steady-state round
    (``price_colocated``), from which the ranking starts: the curves ``plan serve --plot`` draws.
    A ranked candidate's figures are replayed (``_replayed_at_targets``): a dense model's lie on,
    below or a few % above its layout's curve (below it most under a pipeline, whose steady round
    hides the prompts under the decode's weight reads), a MoE model's can lie far above it (rounds
    of decode tokens alone read fewer experts than the steady round's)."""
    req = resolve_request(model, req)
    engine = load_engine(req.engine)
    s = setting_for(model, cluster, req, engine)
    lay = enumerate_layouts(model, cluster, engine, req)
    context = reserved_context(engine, req.input_len, req.output_len)
    mem = s.memory(lay, context)
    glay, batch = _grid(lay, mem, req.concurrency)
    p = price_colocated(s, glay, batch, req)
    meets = _meets(req, p.ttft_s, p.tpot_s)
    keys = np.stack([glay.tp, glay.pp, glay.ep, glay.attention_dp.astype(float), glay.replicas], axis=1)
    curves = []
    for key in np.unique(keys, axis=0):
        on = np.all(keys == key, axis=1)
        tp, pp, ep, adp, replicas = (int(v) for v in key)
        label = layout_text(replicas, tp, pp, ep, bool(adp))
        curves.append(Curve(label, 1.0 / p.tpot_s[on], p.tokens_per_s_per_gpu[on], meets[on]))
    return curves


def _colocated_candidates(s: Setting, lay: Layouts, req: ServeRequest) -> tuple[list[ServeCandidate], int, str, int]:
    """Colocated layouts priced at the request: (candidates, layout x batch points priced, why none
    when none, layouts not replayed at targets, ``_replayed_at_targets``)."""
    context = reserved_context(s.engine, req.input_len, req.output_len)
    mem = s.memory(lay, context)
    if not mem.fits.any():
        need = float(mem.weights_bytes.min()) / 2**30
        held = s.cluster.gpu.hbm_capacity_gib
        if need >= held:  # the weights alone: the KV cache's format and the context are beside the point
            room, remedies = f"more than the {held:.1f} GiB a GPU holds", ["more GPUs"]
        else:
            reserved = "all" if s.engine.kv_reservation == "full" else "half"
            room = (
                f"and no layout leaves room for one sequence's {context:,.0f} tokens of KV cache ({s.engine.name} "
                f"reserves the prompt and {reserved} of the output)"
            )
            remedies = ["more GPUs", *(["--kv-dtype fp8"] if req.kv_dtype == "bf16" else []), "a shorter context"]
        hint = _smaller_weights_hint(s, req).removeprefix(", ")
        remedies[1:1] = [hint] if hint else []
        listed = remedies[0] if len(remedies) == 1 else ", ".join(remedies[:-1]) + " or " + remedies[-1]
        why = f"no layout fits: the smallest weight shard is {need:.1f} GiB per GPU, {room}; use {listed}"
        return [], len(lay), why, 0
    glay, batch = _grid(lay, mem, req.concurrency)
    p = price_colocated(s, glay, batch, req)
    loaded = req.request_rate is not None or req.concurrency is not None
    unreplayed = 0
    if not loaded:  # without targets too: every batch meets them, so each layout's largest is replayed
        cands, unreplayed = _replayed_at_targets(p, s, req)
    else:  # the replay of the load judges the targets
        picked = [int(i) for i in _select_batch(p, req) if i >= 0]
        cands = [_replayed_at_load(p, i, s, req, s.params.request_path_s) for i in picked]
        if req.request_rate is not None:
            fewest = replicas_for_rate(p, req)
            cands = [c.model_copy(update={"replicas_for_rate": fewest[i]}) for c, i in zip(cands, picked, strict=True)]
    if not cands and req.request_rate is not None:
        return [], len(p.batch), _too_fast(p, req), 0
    if not cands:
        return (
            [],
            len(p.batch),
            f"no layout meets the targets: {_extremes(p.tpot_s, p.ttft_s, p.lay.text)} ({_asked(req)})",
            unreplayed,
        )
    return cands, len(p.batch), "", unreplayed


def _steady_rates(p: Priced, req: ServeRequest) -> np.ndarray:
    """Requests/s each row's replica completes at the steady state: its batch over a slot's time in
    the engine (Little's law, as ``_select_batch`` judges a rate)."""
    return p.batch / (p.engine_ttft_s + req.output_len * p.tpot_s)


def replicas_for_rate(p: Priced, req: ServeRequest) -> list[int | None]:
    """Per row of ``p``, the fewest replicas of its layout that keep up with ``req``'s rate at the
    steady state: the rate over the most a replica of the layout completes at any batch of the grid
    that meets the targets (``_steady_rates``; None where none does). At a rate every layout that
    keeps up serves the same tokens per GPU of the cluster, so what a capacity planner asks is how few
    GPUs would (a review, 2026-12-07: DeepSeek-V3 at 10 req/s on a GB200 rack tied at 80 tokens/s per
    GPU on 64 GPUs, with no word of how many the rate needs)."""
    assert req.request_rate is not None
    rates = np.where(_meets(req, p.ttft_s, p.tpot_s), _steady_rates(p, req), 0.0)
    group = _layout_groups(p)
    best = np.zeros(group.max() + 1)
    np.maximum.at(best, group, rates)
    most = best[group]
    return [math.ceil(req.request_rate / m * (1.0 - 1e-9)) if m > 0 else None for m in most]


def _too_fast(p: Priced, req: ServeRequest) -> str:
    """Why no layout takes ``req``'s rate at the steady state, with the most any does: a replica's
    batch over a slot's time in the engine (``_select_batch``'s Little's law), over the replicas,
    at its best batch of the grid, and whether its KV room or its rounds' time bounds it (a review:
    70B at 14 req/s had been told the rate exceeded what any layout sustains 'within memory', where
    the rounds' prefill compute bound it)."""
    assert req.request_rate is not None
    rates = p.lay.replicas * _steady_rates(p, req)
    i = int(np.argmax(rates))
    at_room = p.batch[i] >= p.memory.max_concurrency[i]
    bound = "its KV room" if at_room else "its rounds' time, which grows faster than the batch beyond it"
    layout = p.lay.text(i)
    return (
        f"request rate {req.request_rate:g}/s exceeds what any layout sustains at the steady state: at most "
        f"{rates[i]:.3g}/s, {layout} at {p.batch[i]:.0f} in flight a replica (bound by {bound}); use more GPUs or "
        "a lower rate"
    )


def _smaller_weights_hint(s: Setting, req: ServeRequest) -> str:
    """The next smaller weight format worth trying: fp8 from bf16, fp4 from fp8 where the GPU has
    fp4 tensor cores (Blackwell; elsewhere fp4 is priced as weight-only), else none."""
    if req.weights_dtype == "bf16":
        return ", --weights-dtype fp8"
    if req.weights_dtype == "fp8" and fp4_tensor_cores(s.cluster.gpu):
        return ", --weights-dtype fp4"
    return ""


def _ms(x: float | None) -> str:
    return "any" if x is None else f"{x * 1e3:g} ms"


def _targets(req: ServeRequest) -> str:
    """A request's latency targets: 'TPOT 30 ms, TTFT any'."""
    return f"TPOT {_ms(req.tpot_s)}, TTFT {_ms(req.ttft_s)}"


def _asked(req: ServeRequest) -> str:
    """The targets a reason names: 'asked: TPOT 30 ms, TTFT any'."""
    return f"asked: {_targets(req)}"


def _empty_reason(cands: list[ServeCandidate], req: ServeRequest) -> str:
    if not cands:
        return "no layout fits"
    if req.request_rate is not None and not any(c.sustains_rate for c in cands if c.replayed):
        steady = sum(c.replayed for c in cands)
        return (
            f"request rate {req.request_rate:g}/s: no layout keeps up with it when its arrivals are replayed "
            f"({steady} did at the steady-state estimate, which spreads every prompt evenly over the rounds); "
            "use more GPUs or a lower rate"
        )
    from planner.serving.render import layout_label

    tpots, ttfts = (np.array([getattr(c, f) for c in cands]) for f in ("tpot_s", "ttft_s"))
    extremes = _extremes(tpots, ttfts, lambda k: layout_label(cands[k]))
    return f"no layout meets the targets at this load: {extremes} ({_asked(req)})"


def _extremes(tpot_s: np.ndarray, ttft_s: np.ndarray, label: Callable[[int], str]) -> str:
    """The lowest TPOT and the lowest TTFT among layouts (``label`` names row i), each with its layout
    and that layout's other latency, so a reason tells which target to relax: the two minima come
    from different layouts where the targets conflict (70B on two DGX H100 at 512 in flight: 8 x TP2
    the lowest TPOT, 35.5 ms, its KV room 64 a replica, so the rest queue for seconds; 2 x TP8 the
    lowest TTFT, 525 ms, at a TPOT of 76 ms), and the bare minima had each read as inside targets
    of TPOT 40 ms and TTFT 2 s (a review, 2026-12-07)."""
    i, j = int(np.argmin(tpot_s)), int(np.argmin(ttft_s))
    if i == j:
        return f"the lowest TPOT and TTFT are {label(i)}'s, {tpot_s[i] * 1e3:.1f} ms and {ttft_s[i] * 1e3:,.0f} ms"
    return (
        f"the lowest TPOT is {tpot_s[i] * 1e3:.1f} ms ({label(i)}, its TTFT {ttft_s[i] * 1e3:,.0f} ms) and the lowest "
        f"TTFT {ttft_s[j] * 1e3:,.0f} ms ({label(j)}, its TPOT {tpot_s[j] * 1e3:.1f} ms)"
    )
