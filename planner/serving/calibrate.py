"""Fit the serving engines' per-architecture parameters to published rows and cross-validate
(ARCHITECTURE 9.7).

Eight physically named parameters per (engine, GPU architecture; TensorRT-LLM's two runtimes are
two engines), ``engine.FittedParameters``
(``FIT`` holds their bounds):
  compute_fraction      weight GEMMs' (and decode attention's FLOP side) throughput in serving, vs the
                        profile's GEMM figures (a prompt's attention runs at the profile's measured
                        kernel figure: ``step.RoundCost``)
  decode_hbm_fraction   HBM bandwidth decode GEMMs reach reading weights (and the element-wise passes
                        over the activations), vs the profile's STREAM rate
  expert_gemm_fraction  routed experts' grouped GEMMs vs dense GEMMs of the same FLOPs and bytes
  kv_read_fraction      HBM bandwidth decode attention reaches reading the paged KV cache
  tp_comm_fraction      speed the TP all-reduces reach, vs ``step.tp_all_reduce_s``
  block_overhead_us     fixed time per block (attention, MLP, Mamba) and iteration (kernel launches, gaps)
  sequence_overhead_us  host time per running sequence and iteration (per scheduler)
  routed_copy_ns        time per routed token copy a rank's MoE layer routes (gating, sort, maps)
fitted by bounded least squares on log(predicted / published) with a soft-L1 (Huber-like) loss,
over the throughput rows (output tokens/s per GPU) and the replayed TPOT rows (``_tpot_rows``:
TensorRT-LLM's online-serving table, vLLM's latency rows; since 2026-12-07, when the fit on the
replay's throughput had raised the time per block and left the TPOTs +7.6% slow). A key is fitted
only where its rows cover at least two models (else its parameters would be one model's factor);
other keys use the mean of the fitted ones (``EngineProfile.parameters``). Then one per engine, set on each of its
architectures (``fit_request_path``):
  request_path_ms       time a request's first token spends outside the engine's iterations when
                        served (HTTP/gRPC, tokenizer, detokenizer, queue hand-off)
fitted the same way to log(predicted / published TTFT) of the rows measured through a server
(``runs.through_server``: TensorRT-LLM's Triton online table), the throughput parameters held.
Cross-validation leaves one group out at a time (the runs file's ``group``:
one GPU x engine x benchmark kind), refits without it and prices it. The fit prices a
maximum-throughput row by its waves and a concurrency row by the steady round (``runs.predict``,
vectorised, hundreds of times a fit); the errors reported, and the throughput band ``plan serve``
draws from them, price it by the replay (``runs.served``): of the row's run where it states a
request count (all its requests, the tail included, as its benchmark reports them), else as ``plan
serve`` reports its layout at that load, once per row at the fitted and once at the
cross-validated parameters (the fit at the replay's ratio to the waves: ``replay_ratios``). A TPOT
row is priced in the fit by its steady round at the batch its replay ran (``Replayed.running``) at
the replay's ratio to it, and scored by its replay.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from planner.error_bar import calibration_key, interval
from planner.runs import translate_rows
from planner.serving.engine import ENGINES, THROUGHPUT_METRICS, FittedParameters, error_metric, load_engine
from planner.serving.runs import RowPlan, UnpriceableError, plan_row, predict, replayed_load, served
from planner.serving.step import RoundCost, steady_round

FIT: dict[str, tuple[float, float, float, float]] = {
    # field: (lower bound, upper bound, start, scale of a step)
    "compute_fraction": (0.1, 1.0, 0.7, 0.1),
    "decode_hbm_fraction": (0.1, 1.0, 0.8, 0.1),
    "expert_gemm_fraction": (0.05, 1.0, 0.5, 0.1),
    "kv_read_fraction": (0.05, 1.0, 0.6, 0.1),
    "tp_comm_fraction": (0.2, 1.5, 1.0, 0.1),
    "block_overhead_us": (0.0, 250.0, 20.0, 5.0),
    "sequence_overhead_us": (0.0, 100.0, 2.0, 1.0),
    "routed_copy_ns": (0.0, 500.0, 10.0, 5.0),
}
"""The fitted ``FittedParameters`` fields, in the order of the fit's vector, with their bounds,
starting values and step scales: fractions at most 1 (the profile's figures are measured ceilings:
MAMF GEMMs, BabelStream copies), overheads up to 250 us per block and iteration (40 ms per
iteration of an 80-layer transformer), 100 us per running sequence and 500 ns per routed token
copy and MoE layer (a 60-layer top-8 MoE's 4,000 tokens: 0.96 s per iteration)."""
FIELDS = tuple(FIT)


BOUNDS = (tuple(v[0] for v in FIT.values()), tuple(v[1] for v in FIT.values()))
X0 = np.array([v[2] for v in FIT.values()])
X_SCALE = np.array([v[3] for v in FIT.values()])
MIN_ROWS = 10
"""A key needs at least this many throughput rows, of ``MIN_MODELS`` models, to be fitted; a
``MOVED_BY`` parameter as many rows that move it (``_informs``)."""
MIN_MODELS = 2


def at_bound(field: str, value: float) -> bool:
    """Whether a fitted ``value`` of ``field`` sits on its ``FIT`` bound (within a thousandth of a
    step): the rows push it past, and it says less about the hardware than an interior value."""
    low, high, _, step = FIT[field]
    return min(abs(value - low), abs(value - high)) < 1e-3 * step


def _params(x: np.ndarray) -> FittedParameters:
    return FittedParameters(**{f: float(v) for f, v in zip(FIELDS, x, strict=True)})


def _throughput_rows(plans: list[RowPlan]) -> list[RowPlan]:
    return [p for p in plans if p.cost is not None and any(k in p.published for k in THROUGHPUT_METRICS)]


def _by_key(rows: list[RowPlan]) -> dict[str, list[RowPlan]]:
    """``rows`` grouped by their engine/architecture key, in order."""
    out: dict[str, list[RowPlan]] = defaultdict(list)
    for p in rows:
        out[p.key].append(p)
    return out


def _tpot_rows(plans: list[RowPlan]) -> list[RowPlan]:
    """The rows whose TPOT a fit prices: a replayed TPOT row with its steady round (``replay_ratios``)."""
    return [p for p in plans if p.tpot_cost is not None and "tpot_s" in p.published]


@dataclass(frozen=True)
class _Priced:
    """Rows as a fit prices them: their costs side by side, one ``RoundCost`` per shape of pairs
    (``RoundCost.side_by_side``), and what turns a cost's seconds into the log error: a throughput
    row's tokens over them, a TPOT row's seconds themselves (``sign``)."""

    costs: list[tuple[np.ndarray, RoundCost]]  # (the rows' places, their costs side by side)
    log_scale: np.ndarray  # per row: log(ratio x tokens / GPUs / published), or log(ratio / published TPOT)
    sign: np.ndarray  # per row: -1 where the prediction is inverse in the seconds (throughput), +1 (TPOT)

    @classmethod
    def of(cls, plans: list[RowPlan], tpot: list[RowPlan] | None = None) -> _Priced:
        tpot = tpot or []
        every = [p.cost for p in plans] + [p.tpot_cost for p in tpot]
        shapes: dict[tuple[Any, ...], list[int]] = defaultdict(list)
        for i, c in enumerate(every):
            assert c is not None
            shapes[(c.gemm_pairs, c.expert_rows.tobytes(), c.kv_rows.tobytes())].append(i)
        costs = [(np.array(idx), RoundCost.side_by_side([every[i] for i in idx])) for idx in shapes.values()]  # type: ignore[misc]
        published = [next(p.published[k] for k in THROUGHPUT_METRICS if k in p.published) for p in plans]
        scale = [
            p.replay_ratio * p.tokens / float(p.layout.gpus_per_replica[0]) / pub
            for p, pub in zip(plans, published, strict=True)
        ] + [p.tpot_ratio / p.published["tpot_s"] for p in tpot]
        sign = np.concatenate([np.full(len(plans), -1.0), np.ones(len(tpot))])
        return cls(costs, np.log(np.asarray(scale, dtype=float)), sign)

    def log_errors(self, x: np.ndarray) -> np.ndarray:
        """log(predicted / published) of each row at the parameter vector ``x``."""
        params = _params(x)
        seconds = np.empty(len(self.log_scale))
        for idx, cost in self.costs:
            seconds[idx] = cost.total_s(params)
        return self.log_scale + self.sign * np.log(seconds)


def _fit_rows(rows: list[RowPlan], fixed: dict[str, float], tpot: list[RowPlan] | None = None) -> np.ndarray:
    """The parameter vector (``FIELDS`` order) fitted to the throughput ``rows`` and the ``tpot`` rows
    with the ``fixed`` fields held."""
    free = np.array([f not in fixed for f in FIELDS])
    held = X0.copy()
    for f, v in fixed.items():
        held[FIELDS.index(f)] = v

    def full(x_free: np.ndarray) -> np.ndarray:
        x = held.copy()
        x[free] = x_free
        return x

    lo, hi = np.array(BOUNDS[0]), np.array(BOUNDS[1])
    priced = _Priced.of(rows, tpot)
    res = least_squares(
        lambda xf: priced.log_errors(full(xf)),
        x0=np.clip(held[free], lo[free], hi[free]),
        bounds=(lo[free], hi[free]),
        loss="soft_l1",
        f_scale=0.1,
        x_scale=X_SCALE[free],
    )
    return full(res.x)


MOVED_BY: dict[str, Callable[[RowPlan], bool]] = {
    "tp_comm_fraction": lambda p: bool(np.any(p.cost.tp_comm_s > 0)),  # type: ignore[union-attr]
}
"""The parameters only some rows move, and which: the TP all-reduce's speed the rows whose replica
all-reduces over TP."""


def replay_ratios(plans: list[RowPlan], fitted: dict[str, FittedParameters]) -> None:
    """Set each throughput row's ``replay_ratio``: the throughput its replay gives (``runs.served``: of
    the row's run where it states a request count, else the closed loop plan serve reports) over its
    waves' or steady round's (``runs.predict``, what the fit prices hundreds of times), both at its
    key's ``fitted`` parameters. A fit with the ratios then prices each row as plan serve does, to
    within how the ratio moves with the parameters (over the published rows, a second pass at the
    parameters fitted with the first's ratios moved them by 0.2% at the median, under 1.1% for 90%
    of the rows, at most 5.5%), at the price of one replay per row: the fit on the waves alone had
    left the replayed throughput +3.9% above the published rows (the waves +1.0%). Likewise each
    replayed TPOT row's ``tpot_cost`` (its steady round at the time-mean batch its replay ran) and
    ``tpot_ratio`` (the replay's TPOT over that round's): fitted so, the TPOT rows went 17.3% / +7.6%
    -> 13.0% / 0.0% (CV 13.7%) and the throughput rows 9.0% / +1.0% -> 9.2% / +1.2% (CV 10.6% both).
    Until 2026-12-07 (session 55) the round was at the batch Little's law gives the load, at most
    the KV room, which at TensorRT-LLM's overloaded online rows (500 requests at an unbounded rate)
    is a batch the replay never runs: the ratios spread 0.22 .. 1.14 (10th .. 90th percentile, the
    fewest 0.10), so the fit moved those rows' TPOT as a 2,048-sequence round moves; at the
    replay's batch (and with the steady round's prompts in whole pieces, ``step.steady_round``)
    0.97 .. 1.05."""
    for p in _throughput_rows(plans):
        if p.mode not in ("max_throughput", "concurrency"):
            continue
        at = params_for(p.key, fitted)
        waves = predict(p, at)
        metric = next(k for k in THROUGHPUT_METRICS if k in waves)
        p.replay_ratio = float(served(p, at, waves)[metric] / waves[metric])
    for p in plans:  # a replayed TPOT row: its steady round at the replay's batch, and the replay's TPOT over it
        if "tpot_s" not in p.published or p.mode not in ("rate", "concurrency") or p.requests is None:
            continue
        at = params_for(p.key, fitted)
        s = replace(p.setting, params=at)
        r = replayed_load(p, s)
        p.tpot_cost = steady_round(s, p.layout, np.array([max(r.running, 1.0)]), p.input_len, p.output_len)
        p.tpot_ratio = float(r.itl_s / p.tpot_cost.total_s(at)[0])


def _informs(rows: list[RowPlan]) -> bool:
    """Whether ``rows`` fix a parameter: ``MIN_ROWS`` of them, of ``MIN_MODELS`` models."""
    return len(rows) >= MIN_ROWS and len({p.setting.model.name for p in rows}) >= MIN_MODELS


UNMOVED_MOE = {"expert_gemm_fraction": 1.0, "routed_copy_ns": 0.0}
"""The parameters only MoE rows move, and the values a key without one takes (not fitted)."""


def short_fields(rows: list[RowPlan]) -> set[str]:
    """The ``MOVED_BY`` parameters too few of ``rows`` move to fix (``_informs``)."""
    return {f for f, moves in MOVED_BY.items() if not _informs([p for p in rows if moves(p)])}


def _has_moe(rows: list[RowPlan]) -> bool:
    """Whether a MoE row is among ``rows``: else ``UNMOVED_MOE`` is not fitted."""
    return any(p.setting.model.is_moe for p in rows)


def held_fields(rows: list[RowPlan]) -> set[str]:
    """The parameters ``fit`` does not fit to ``rows``, one key's: ``short_fields`` (held at 1 or
    borrowed from the engine's other keys) and, without a MoE row, ``UNMOVED_MOE``."""
    return short_fields(rows) | (set() if _has_moe(rows) else set(UNMOVED_MOE))


def fit(plans: list[RowPlan]) -> dict[str, FittedParameters]:
    """Parameters per engine/architecture key from the throughput rows among ``plans``: every
    field at once where the key's rows inform it. A parameter no row moves is not fitted (the
    experts' GEMM rate without a MoE row: 1, the time per routed copy: 0; a collective's speed
    without a row that runs it, ``MOVED_BY``: 1). A key whose rows that move a ``MOVED_BY``
    parameter are too few to fix it (``_informs``) takes the mean of its engine's keys that have
    enough, weighted by those rows, and fits the rest: held out of a fold, the L40S group's own
    rows had left the Ada key eight TP rows of one benchmark, whose fit came out 22.8% off the
    group (3.5% with the mean). A key's replayed TPOT rows (``_tpot_rows``, where ``replay_ratios``
    gave them a steady round) join its throughput rows in the fit."""
    by_key, tpot = _by_key(_throughput_rows(plans)), _by_key(_tpot_rows(plans))
    keys = {key: rows for key, rows in sorted(by_key.items()) if _informs(rows)}
    moving = {key: {f: [p for p in rows if moves(p)] for f, moves in MOVED_BY.items()} for key, rows in keys.items()}
    short = {key: short_fields(rows) for key, rows in keys.items()}
    # a key that borrows a parameter is fitted once, after the keys it borrows from
    borrows = {key: {f for f in short[key] if moving[key][f]} for key in keys}
    first = {
        key: _fit_rows(rows, {f: 1.0 for f in short[key]}, tpot[key]) for key, rows in keys.items() if not borrows[key]
    }
    fitted: dict[str, FittedParameters] = {}
    for key, rows in keys.items():
        engine = key.split("/")[0]
        held = {f: 1.0 for f in short[key]}
        for f in borrows[key]:
            weights = {k: len(moving[k][f]) for k in first if k.split("/")[0] == engine and f not in short[k]}
            total = sum(weights.values())
            held[f] = sum(first[k][FIELDS.index(f)] * n for k, n in weights.items()) / total if total else 1.0
        x = first[key] if key in first else _fit_rows(rows, held, tpot[key])
        if not _has_moe(rows):
            for f, value in UNMOVED_MOE.items():
                x[FIELDS.index(f)] = value
        fitted[key] = _params(x)
    return fit_request_path(plans, fitted)


REQUEST_PATH_MS_MAX = 1000.0
"""The request path's upper bound: a second per request (the fits come out at a few ms)."""


def _server_ttft_rows(plans: list[RowPlan]) -> list[RowPlan]:
    return [p for p in plans if p.through_server and "ttft_s" in p.published]


def _request_path_ms(rows: list[RowPlan], fitted: dict[str, FittedParameters]) -> float:
    """The request path (ms) that fits ``rows``' TTFTs best at their keys' fitted parameters:
    bounded least squares on log(predicted / published) with the throughput fit's soft-L1 loss,
    one constant added to each row's engine TTFT (``RowPlan.engine_ttft_s``)."""
    engine_s = np.array([p.engine_ttft_s(params_for(p.key, fitted)) for p in rows])
    published_s = np.array([p.published["ttft_s"] for p in rows])
    res = least_squares(
        lambda x: np.log((engine_s + x[0] * 1e-3) / published_s),
        x0=[1.0],
        bounds=([0.0], [REQUEST_PATH_MS_MAX]),
        loss="soft_l1",
        f_scale=0.1,
    )
    return float(res.x[0])


def request_path_rows(plans: list[RowPlan], fitted: dict[str, FittedParameters]) -> dict[str, list[RowPlan]]:
    """Per engine with a fitted key, its TTFT rows measured through a server, where they inform a fit
    (``_informs``): an engine none of whose keys is fitted has no parameters to carry a path."""
    by_engine: dict[str, list[RowPlan]] = defaultdict(list)
    engines = {key.split("/")[0] for key in fitted}
    for p in _server_ttft_rows(plans):
        if p.setting.engine.name in engines:
            by_engine[p.setting.engine.name].append(p)
    return {e: rows for e, rows in sorted(by_engine.items()) if _informs(rows)}


def fit_request_path(plans: list[RowPlan], fitted: dict[str, FittedParameters]) -> dict[str, FittedParameters]:
    """``fitted`` with each engine's ``request_path_ms`` fitted to its TTFT rows measured through a
    server (``runs.through_server``) where they inform it (``_informs``: ``MIN_ROWS`` rows of
    ``MIN_MODELS`` models), and set on every architecture of the engine: the path is host work
    (HTTP/gRPC, tokenizer, detokenizer, queues), not the GPU's. An engine without such rows borrows
    the mean of the engines that have them, weighted by their rows: an estimate, one server's path
    standing for another's. No engine with such rows: 0, an engine called in-process."""
    own = {e: (_request_path_ms(rows, fitted), len(rows)) for e, rows in request_path_rows(plans, fitted).items()}
    total = sum(n for _, n in own.values())
    borrowed = sum(ms * n for ms, n in own.values()) / total if total else 0.0
    return {
        key: v.model_copy(update={"request_path_ms": own.get(key.split("/")[0], (borrowed, 0))[0]})
        for key, v in fitted.items()
    }


def params_for(key: str, fitted: dict[str, FittedParameters]) -> FittedParameters:
    """The key's fit, else as ``EngineProfile.parameters`` falls back, so that a row is priced with
    the parameters ``plan serve`` would use: an engine with no fitted key of its own takes its
    ``calibrated_like`` engine's for the architecture (vLLM and SGLang: TensorRT-LLM's PyTorch
    backend), else the mean of the same engine's fitted keys, else of all, else defaults. Until
    2026-12-07 an engine without a fit of its own took the mean of every fitted key, so the
    benchmark priced vLLM's rows on H100 with other parameters than `plan serve --engine vllm`."""
    if key in fitted:
        return fitted[key]
    engine, architecture = key.split("/", 1)
    same = [v for k, v in fitted.items() if k.startswith(engine + "/")]
    like = load_engine(engine).calibrated_like if engine in ENGINES else None
    if not same and like:
        return params_for(f"{like}/{architecture}", fitted)
    return FittedParameters.mean(same or list(fitted.values()))


@dataclass
class Evaluation:
    runs: list[dict[str, Any]] = field(default_factory=list)
    unpriced: list[dict[str, str]] = field(default_factory=list)
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    keys: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per fitted key (engine/architecture): the throughput rows' count, MAPE, CV MAPE and signed error."""
    overall: dict[str, Any] = field(default_factory=dict)
    fitted: dict[str, FittedParameters] = field(default_factory=dict)
    rows_used: dict[str, list[str]] = field(default_factory=dict)
    request_path_rows_used: dict[str, list[str]] = field(default_factory=dict)
    """Per engine, the TTFT rows its ``request_path_ms`` was fitted to (``request_path_rows``)."""
    held: dict[str, list[str]] = field(default_factory=dict)
    """Per fitted key, the parameters its rows do not fit (``held_fields``): held, borrowed or forced."""

    def as_json(self) -> dict[str, Any]:
        """The evaluation as JSON, an average over no rows (NaN: no throughput row, or --no-cv)
        as null: JSON has no NaN."""
        return nan_as_null(
            {
                "runs": self.runs,
                "unpriced": self.unpriced,
                "groups": self.groups,
                "keys": self.keys,
                "overall": self.overall,
                "fitted": {k: v.model_dump() for k, v in self.fitted.items()},
            }
        )


def nan_as_null(obj: Any) -> Any:
    """``obj`` with every NaN float (an average over no rows) as None, through dicts and lists:
    JSON has no NaN, and null says 'no figure' to every reader."""
    if isinstance(obj, float) and np.isnan(obj):
        return None
    if isinstance(obj, dict):
        return {k: nan_as_null(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [nan_as_null(v) for v in obj]
    return obj


def translate(rows: list[dict[str, Any]]) -> tuple[list[RowPlan], list[dict[str, str]]]:
    """Every serving row the translator can express, and the others (name, group, reason)."""
    return translate_rows(rows, plan_row, UnpriceableError)


def _summary(errs: list[float]) -> tuple[float, float]:
    a = np.asarray(errs)
    return (float(np.mean(np.abs(a))), float(np.mean(a))) if len(a) else (float("nan"), float("nan"))


def evaluate(rows: list[dict[str, Any]], cross_validate: bool = True, shipped: bool = False) -> Evaluation:
    """Fit on every priced throughput row and replayed TPOT row, then (optionally) leave each group
    out and refit;
    per row, group and overall errors (percent, predicted vs published; a maximum-throughput or
    concurrency row's throughput is ``runs.served``'s, the fit's own pricing in
    ``overall['fit_mape_pct']``). With ``shipped``, nothing
    is fitted: each row is priced with the parameters the engine profiles ship (a held-out file's
    check; every error is then out of sample, and no cross-validated figure is given)."""
    plans, unpriced = translate(rows)
    if shipped:
        cross_validate = False
    fitted: dict[str, FittedParameters] = {}
    if not shipped:  # a first fit on the waves, then one on the waves at the replay's ratio to them
        replay_ratios(plans, fit(plans))
        fitted = fit(plans)
    ev = Evaluation(unpriced=unpriced, fitted=fitted)
    for p in [*_throughput_rows(plans), *_tpot_rows(plans)]:  # a row that informs both is listed once
        if p.key in fitted and p.name not in ev.rows_used.get(p.key, []):
            ev.rows_used.setdefault(p.key, []).append(p.name)
    if not shipped:
        ev.request_path_rows_used = {e: [p.name for p in rows] for e, rows in request_path_rows(plans, fitted).items()}
        by_key = _by_key(_throughput_rows(plans))
        ev.held = {key: sorted(held_fields(by_key[key])) for key in fitted}
    groups = sorted({p.group for p in plans})
    cv_params: dict[str, dict[str, FittedParameters]] = {}
    if cross_validate:
        for g in groups:
            rest = [p for p in plans if p.group != g]
            cv_params[g] = fit(rest)
    per_group: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    inside: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    surrogate_errors: list[float] = []
    for p in plans:
        at = p.setting.params if shipped else params_for(p.key, fitted)
        # a maximum-throughput or concurrency row is scored by its replay (runs.served: of its run where it
        # states a request count); the fit prices it by its waves or steady round (runs.predict), kept too
        fit_pred = predict(p, at)
        pred = served(p, at, fit_pred)
        cv = served(p, params_for(p.key, cv_params[p.group])) if cross_validate else {}
        moe = p.setting.model.is_moe
        for metric, published in p.published.items():
            if metric not in pred:
                continue
            predicted = float(pred[metric])
            err = 100.0 * (predicted / published - 1.0)
            if metric in THROUGHPUT_METRICS:  # as the fit prices the row: its waves at the replay's ratio
                surrogate_errors.append(100.0 * (p.replay_ratio * float(fit_pred[metric]) / published - 1.0))
            cv_err = float(100.0 * (cv[metric] / published - 1.0)) if metric in cv else None
            bar = error_metric(metric)
            # the band plan serve gives this prediction: the shipped calibration's errors
            band = interval(predicted, p.setting.engine.published_errors(bar, p.architecture, moe)[0])
            hit = None if band is None else bool(band[0] <= published <= band[1])
            ev.runs.append(
                {
                    "name": p.name,
                    "group": p.group,
                    "key": p.key,
                    "moe": moe,
                    "metric": metric,
                    "published": published,
                    "predicted": predicted,
                    "error_pct": err,
                    "cv_error_pct": cv_err,
                    "interval": None if band is None else [float(band[0]), float(band[1])],
                    "inside_interval": hit,
                }
            )
            kind = "throughput" if bar == "throughput" else metric
            per_group[p.group][kind].append(err)
            if cv_err is not None:
                per_group[p.group][kind + "_cv"].append(cv_err)
            if hit is not None:
                inside[p.group][bar].append(hit)
    all_rows = len(rows)
    every_group = sorted({str(r.get("group")) for r in rows})
    for g in every_group:
        kinds = per_group.get(g, {})
        entry: dict[str, Any] = {
            "rows": sum(1 for p in plans if p.group == g) + sum(1 for u in unpriced if u["group"] == g)
        }
        entry["priced"] = sum(1 for p in plans if p.group == g)
        entry["coverage"] = entry["priced"] / entry["rows"] if entry["rows"] else 0.0
        for kind in ("throughput", "ttft_s", "tpot_s"):
            if kind in kinds:
                mape, signed = _summary(kinds[kind])
                cv_mape, _ = _summary(kinds.get(kind + "_cv", []))
                prefix = "" if kind == "throughput" else kind.removesuffix("_s") + "_"
                entry[prefix + "mape_pct"] = mape
                entry[prefix + "cv_mape_pct"] = cv_mape
                entry[prefix + "signed_pct"] = signed
        for bar, hits in inside.get(g, {}).items():
            entry[_coverage_key(bar)] = float(np.mean(hits))
        ev.groups[g] = entry
    tp = [r for r in ev.runs if r["metric"] in THROUGHPUT_METRICS]
    for key in sorted({r["key"] for r in tp}):
        of_key = [r for r in tp if r["key"] == key]
        key_mape, key_signed = _summary([r["error_pct"] for r in of_key])
        key_cv, _ = _summary([r["cv_error_pct"] for r in of_key if r["cv_error_pct"] is not None])
        ev.keys[key] = {"rows": len(of_key), "mape_pct": key_mape, "cv_mape_pct": key_cv, "signed_pct": key_signed}
    lat = {m: [r for r in ev.runs if r["metric"] == m] for m in ("ttft_s", "tpot_s")}
    mape, signed = _summary([r["error_pct"] for r in tp])
    cv_mape, cv_signed = _summary([r["cv_error_pct"] for r in tp if r["cv_error_pct"] is not None])
    ev.overall = {
        "rows": all_rows,
        "priced": len(plans),
        "coverage": len(plans) / all_rows if all_rows else 0.0,
        "throughput_rows": len(tp),
        "mape_pct": mape,
        "cv_mape_pct": cv_mape,
        "signed_pct": signed,
        "cv_signed_pct": cv_signed,
        "fit_mape_pct": _summary(surrogate_errors)[0],
        "fit_signed_pct": _summary(surrogate_errors)[1],
    }
    for bar in ("throughput", "ttft", "tpot"):
        hits = [hit for by_bar in inside.values() for hit in by_bar.get(bar, [])]
        if hits or bar == "throughput":
            ev.overall[_coverage_key(bar)] = float(np.mean(hits)) if hits else None
    for m, rs in lat.items():
        if rs:
            a, sgn = _summary([r["error_pct"] for r in rs])
            c, _ = _summary([r["cv_error_pct"] for r in rs if r["cv_error_pct"] is not None])
            name = m.removesuffix("_s")
            ev.overall |= {
                f"{name}_rows": len(rs),
                f"{name}_mape_pct": a,
                f"{name}_cv_mape_pct": c,
                f"{name}_signed_pct": sgn,
            }
    return ev


FIT_MARKER = "# ---- fitted by `plan serve-calibrate` (do not edit by hand; rerun it) ----"


def dropped_engine_fits(ev: Evaluation) -> list[str]:
    """What writing ``ev`` would drop of the shipped engine fits: an architecture an engine's file
    holds a fit for and the rows do not fit, and a fitted request path the rows have no
    server-measured TTFT for (written as the default). A fit over part of the rows (35 GH200 rows
    of TensorRT-LLM) had replaced the file's whole block, its Ada and Ampere fits and its 6.9 ms
    request path with them (a review, 2026-12-07)."""
    out = []
    for name in ENGINES:
        keys = [k.split("/")[1] for k in ev.fitted if k.split("/")[0] == name]
        if not keys:
            continue
        shipped = load_engine(name)
        out += [f"{name} {arch} fit" for arch in sorted(shipped.fitted) if arch not in keys]
        cal = shipped.calibration
        if cal is not None and cal.request_path_rows and not ev.request_path_rows_used.get(name):
            path_ms = max(p.request_path_ms for p in shipped.fitted.values())
            out.append(f"{name} request_path_ms {path_ms:.3g}")
    return out


def write_engine_fits(ev: Evaluation, runs_file: str, command: str) -> list[str]:
    """Write each engine's fitted parameters, the rows used per architecture and the
    leave-one-group-out CV MAPE of its groups into engines/<engine>.yaml, replacing what a
    previous run wrote below FIT_MARKER. Returns the files written."""
    import yaml

    from planner.serving.engine import engines_dir

    written = []
    for name in ENGINES:
        keys = {k: v for k, v in ev.fitted.items() if k.split("/")[0] == name}
        if not keys:
            continue
        path = engines_dir() / f"{name}.yaml"
        text = path.read_text(encoding="utf-8").split(FIT_MARKER)[0].rstrip() + "\n"
        cv: dict[str, float] = {}
        for g, entry in ev.groups.items():
            value = entry.get("cv_mape_pct")
            if value is None or not np.isfinite(value):
                continue
            if any(k.split("/")[0] == name for k in _keys_of_group(ev, g)):
                cv[g] = round(float(value), 2)
        block = {
            "fitted": {
                k.split("/")[1]: {f: round(float(x), 4) for f, x in v.model_dump().items()} for k, v in keys.items()
            },
            "calibration": {
                "command": command,
                "runs_file": runs_file,
                "rows": {k.split("/")[1]: ev.rows_used.get(k, []) for k in keys},
                "request_path_rows": ev.request_path_rows_used.get(name, []),
                "cv_mape_pct": cv,
                "cv_error_pct": _band_errors(ev, name, "throughput"),
                "latency_error_pct": {bar: _band_errors(ev, name, bar) for bar in ("ttft", "tpot")},
            },
        }
        path.write_text(
            text + "\n" + FIT_MARKER + "\n" + yaml.safe_dump(block, sort_keys=False, width=200), encoding="utf-8"
        )
        load_engine.cache_clear()
        load_engine(name)  # the written file must load
        written.append(str(path))
    return written


def _coverage_key(bar: str) -> str:
    """JSON key of the share of rows inside their band: ``interval_coverage`` for throughput,
    ``ttft_interval_coverage`` and ``tpot_interval_coverage`` for the latencies."""
    return "interval_coverage" if bar == "throughput" else f"{bar}_interval_coverage"


def _band_errors(ev: Evaluation, engine: str, bar: str) -> dict[str, list[float]]:
    """The engine's rows' cross-validated errors for one error bar (percent, 2 decimals), keyed by
    GPU architecture, ``+moe`` for MoE models (as the training bars keep them apart): each row
    priced by the fit without its group. A TTFT's fitted part is the request path
    (``fit_request_path``); no fit sees a TPOT, whose cross-validated error moves only with the
    refit throughput parameters."""
    out: dict[str, list[float]] = {}
    for r in ev.runs:
        engine_of, _, arch = str(r["key"]).partition("/")
        value = r["cv_error_pct"]
        if engine_of != engine or error_metric(r["metric"]) != bar or value is None or not np.isfinite(value):
            continue
        out.setdefault(calibration_key(arch, r["moe"]), []).append(round(float(value), 2))
    return out


def _keys_of_group(ev: Evaluation, group: str) -> set[str]:
    return {r.get("key", "") for r in ev.runs if r["group"] == group}
