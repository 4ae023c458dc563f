"""Fit a hardware profile to measurements: alpha and bus bandwidth per link tier, and GEMM
efficiency, by least squares on the relative error of the planner's own predictions.

Every sample is a replayed term (from ``plan validate`` or ``plan validate sweep`` JSON) with
its measured time. Its prediction is recomputed with ``planner.cost.comm`` (collectives, on a
GroupLink of the sample's group size, tier and members per domain) and
``planner.cost.compute.gemm_s`` (GEMMs), from candidate values of the parameters. The residual
is log(predicted / measured), so a 1 ms and a 1 s term weigh alike (relative error; Tofallis
2015, 'A better measure of relative prediction accuracy', argues for the log ratio). The fit is
``scipy.optimize.least_squares`` in log parameters (positive by construction) with a soft-L1
loss (f_scale 0.3, about 35%), which keeps one noisy CPU outlier from dragging the rest; and a
weak pull (weight ``PRIOR_WEIGHT``) toward the starting profile, so a parameter the data cannot
determine (alpha when every message is large) stays where it was instead of drifting.

Parameters, per tier with samples: alpha (``latency_us``) and the bus bandwidth, stored as
``bandwidth_gb_per_s`` x ``bus_efficiency`` with the datasheet bandwidth kept and the efficiency
fitted, unless the fit exceeds the datasheet (then bandwidth = fit, efficiency 1). GEMMs: one
factor on the achievable rate, applied to ``gemm_efficiency`` (and its curve); what would push
an efficiency past 1 goes into ``peak_tflops`` of the measured format instead. Layer shards
(``planner.validate.shard``) are priced by the step's own layer model on the candidate GPU: they
share the GEMM factor of their format and, when they use flash attention, add one factor on
``attention_efficiency`` (the attention core, the part of a layer no GEMM term measures). The
written profile prices every sample as the fit did: attention runs at the 16-bit peak times the
attention efficiency, so the written efficiency carries the GEMM factor of the layers' format over
what went into the peak (capped at 1, and said so).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from planner.atomic import make_parent, write_text_atomic
from planner.cost import comm
from planner.cost.compute import gemm_s
from planner.cost.flops import flash_attention_runs
from planner.cost.traffic import PRICE
from planner.errors import PlannerError
from planner.schemas.hardware import BYTES_PER_ELEMENT, MIN_EFFICIENCY, HardwareProfile, Interconnect
from planner.validate.schemas import ReplayContext, SweepReport, TermResult, TermSpec, ValidationReport

PRIOR_WEIGHT = 0.01
"""Residual weight of log(parameter / starting value): 1% of one sample's log error."""

TIERS = ("intra_node", "inter_node")

COMPUTE_OPS = ("gemm", "layer")
"""Ops timed on one rank, priced by the GPU's rates rather than a link."""

MAX_TERM_S = 86_400.0
"""The longest time one replayed term (one collective, GEMM or layer shard, the median of its
repeats) may be measured at: a day. Not a measurement but a sanity bound: the largest term the
replay times is bounded by --max-message-bytes and --max-gemm-flops, seconds at most on any
machine, so a figure above a day (1e308 s, say) is a broken or hand-edited report, which would
otherwise fit a link of ~0 bytes/s into the profile."""

MIN_TERM_S = 1e-9
"""The shortest time a replayed term can be measured at: one tick of the finest clock a replay
reads (time.perf_counter_ns, 1 ns; CUDA events resolve about 0.5 us). A term timed below it
(0 s, or a hand-edited 1e-300 s that fitted a link of 8e297 GB/s) is below the timer's resolution:
it carries nothing to fit and is left out by name."""


@dataclass(frozen=True)
class Samples:
    """A report's measured terms, where and how they were measured, and whether the run finished
    (``error``: why a partial report stopped; None when complete)."""

    results: list[TermResult]
    context: ReplayContext
    error: str | None
    unmeasurable: list[str]  # terms timed at 0 s, left out of the fit


def samples_from_json(data: dict[str, Any], where: str) -> Samples:
    """Every measured term of a validation or sweep report, and where and when it was measured.
    Non-finite times are refused by the report schema, a time above ``MAX_TERM_S`` and a GEMM
    with a zero dimension by name here; a term timed below ``MIN_TERM_S`` (0 s: below the timer's
    resolution) carries nothing to fit and is left out, named in ``Samples.unmeasurable`` for the
    caller to report."""
    from planner.errors import validate_as

    kind = data.get("kind")
    report: ValidationReport | SweepReport
    if kind == "validation":
        report = validate_as(ValidationReport, data, where)
        results = [t for c in report.candidates for t in c.terms]
    elif kind == "sweep":
        report = validate_as(SweepReport, data, where)
        results = [p.result for p in report.points]
    else:
        raise PlannerError(
            f"{where}: field 'kind': expected 'validation' or 'sweep' (a plan validate JSON), got {kind!r}"
        )
    world = report.context.world_size
    for r in results:
        if r.spec.group_size > world:
            raise PlannerError(
                f"{where}: term '{r.spec.name}': field 'group_size': {r.spec.group_size} ranks, more than the "
                f"{world} the report ran (context.world_size)"
            )
        if r.spec.per_domain > r.spec.group_size:
            raise PlannerError(
                f"{where}: term '{r.spec.name}': field 'per_domain': {r.spec.per_domain} ranks in one domain, more "
                f"than the group's {r.spec.group_size}"
            )
        if r.spec.gemm_mnk is not None and min(r.spec.gemm_mnk) < 1:
            raise PlannerError(f"{where}: term '{r.spec.name}': GEMM shape {r.spec.gemm_mnk} has a zero dimension")
        if r.measured_s > MAX_TERM_S:
            raise PlannerError(
                f"{where}: term '{r.spec.name}': field 'measured_s': {r.measured_s:g} s; one replayed term is "
                f"timed at most {MAX_TERM_S:g} s (a day)"
            )
    unmeasurable = [r.spec.name for r in results if r.measured_s < MIN_TERM_S]
    results = _distinct_terms([r for r in results if r.measured_s >= MIN_TERM_S])
    if not results:
        raise PlannerError(f"{where}: no measured terms to fit")
    for tier in fitted_link_tiers(results):
        sizes = [r.spec.message_bytes for r in results if r.spec.op not in COMPUTE_OPS and r.spec.tier == tier]
        if max(sizes) <= 0:
            raise PlannerError(
                f"{where}: the {tier} collectives all moved 0 bytes ({len(sizes)} terms): they time the latency "
                "alone and fix no bandwidth; measure messages of some size (plan validate --sweep)"
            )
    status = None if report.status == "complete" else report.error or "failed"
    return Samples(results, report.context, status, unmeasurable)


def _distinct_terms(results: list[TermResult]) -> list[TermResult]:
    """Each distinct term once (the same spec replayed by several candidates: 5 GEMM shapes of two
    candidates of one model had counted 10 times, each twin in another cross-validation fold, so the
    held-out error was priced on terms the fit had seen; a review, 2026-12-08), at the mean of its
    measurements, as ``report.distinct_replays`` counts a replay once."""
    groups: dict[str, list[TermResult]] = {}
    for r in results:
        groups.setdefault(r.spec.model_dump_json(), []).append(r)
    out = []
    for same in groups.values():
        first = same[0]
        if len(same) > 1:
            measured = sum(r.measured_s for r in same) / len(same)
            ratio = None if first.ratio is None else measured / (first.measured_s / first.ratio)
            first = first.model_copy(update={"measured_s": measured, "ratio": ratio})
        out.append(first)
    return out


def is_cpu_profile(profile: HardwareProfile) -> bool:
    """Whether a profile describes CPU workers (gloo's hardware) rather than GPUs (NCCL's)."""
    return "cpu" in (profile.gpu.architecture or "").lower()


def check_measured_on(context: ReplayContext, profile: HardwareProfile, where: str) -> None:
    """Measurements calibrate only hardware of their own kind: a gloo report (CPU worker processes)
    cannot set a GPU profile's links and rates (a CPU sweep made an H100's NVLink 0.19 GB/s), nor
    an NCCL report a CPU profile's."""
    cpu_profile = is_cpu_profile(profile)
    if (context.backend == "gloo") != cpu_profile:
        measured = f"with {context.backend} on {context.device_name or context.device}"
        target = f"{profile.name} ({profile.gpu.name})"
        raise PlannerError(
            f"{where} was measured {measured}, but --cluster {target} is "
            f"{'a CPU' if cpu_profile else 'a GPU'} profile: calibrate the profile the measurements ran on "
            f"({context.replay_profile})"
        )


@dataclass(frozen=True)
class Params:
    """Fitted quantities in SI units: per tier (latency_s, bus_bytes_per_s); GEMM rate factor per
    format; the factor on attention efficiency (1 without layer samples)."""

    links: dict[str, tuple[float, float]]
    gemm_scale: dict[str, float]
    attention_scale: float = 1.0


def initial_params(profile: HardwareProfile) -> Params:
    links = {t: (getattr(profile, t).latency_s, getattr(profile, t).bus_bandwidth_bytes_per_s) for t in TIERS}
    return Params(links=links, gemm_scale={})


def fits_attention(results: list[TermResult]) -> bool:
    """Whether the samples determine the attention efficiency: layer shards with flash attention."""
    return any(
        r.spec.op == "layer" and r.spec.layer is not None and flash_attention_runs(r.spec.layer.model, r.spec.layer.job)
        for r in results
    )


def base_attention_efficiency(profile: HardwareProfile) -> float:
    """The attention efficiency the compute model uses on ``profile`` (gemm_efficiency when unset)."""
    return profile.gpu.attention_efficiency or profile.gpu.gemm_efficiency


def _layer_s(profile: HardwareProfile, params: Params, spec: TermSpec) -> float:
    """``predict_layer_s`` of a layer sample on one node of ``profile`` with ``params``' GEMM rate
    of the sample's format and attention efficiency."""
    from planner.schemas.hardware import ClusterSpec
    from planner.validate.shard import predict_layer_s, with_gpu

    assert spec.layer is not None
    gpu = profile.gpu
    node = ClusterSpec(name=profile.name, profile=profile, num_nodes=1, num_gpus=profile.gpus_per_node)
    peaks = dict(gpu.peak_tflops)
    peaks[spec.dtype] = peaks[spec.dtype] * params.gemm_scale.get(spec.dtype, 1.0)  # type: ignore[index]
    attention = base_attention_efficiency(profile) * params.attention_scale
    return predict_layer_s(spec.layer, with_gpu(node, peak_tflops=peaks, attention_efficiency=attention), spec.dtype)


def _link(profile: HardwareProfile, params: Params, result: TermResult) -> comm.GroupLink:
    """The GroupLink of the sample's group on a profile with ``params``' latencies and bandwidths."""
    spec = result.spec
    tier = getattr(profile, spec.tier if spec.tier in TIERS else "intra_node")
    latency_s, _ = params.links[spec.tier if spec.tier in TIERS else "intra_node"]
    code = comm.TIER_NAMES.index(spec.tier)
    members = np.array([spec.per_domain if code == comm.TIER_INTER else spec.group_size])
    ring, send = comm.fast_tier_bytes_per_s(profile.intra_node, params.links["intra_node"][1], members)
    return comm.GroupLink(
        size=np.array([spec.group_size]),
        tier=np.array([code]),
        per_domain=np.array([spec.per_domain]),
        intra_bytes_per_s=ring,
        intra_send_bytes_per_s=send,
        inter_bytes_per_s=params.links["inter_node"][1],
        latency_s=np.array([latency_s]),
        in_network_bytes_per_s=np.array([tier.in_network_bytes_per_s]),
        in_network_latency_s=np.array([(tier.in_network_latency_us or 0.0) * 1e-6]),
    )


def predict(profile: HardwareProfile, params: Params, results: list[TermResult]) -> np.ndarray:
    """Predicted seconds of every sample on ``profile`` with ``params`` (see module docstring)."""
    out = np.empty(len(results))
    gpu = profile.gpu
    for i, r in enumerate(results):
        spec = r.spec
        if spec.op == "layer":
            out[i] = _layer_s(profile, params, spec)
        elif spec.op == "gemm":
            assert spec.gemm_mnk is not None
            m, n, k = (np.asarray(float(x)) for x in spec.gemm_mnk)
            peak = gpu.peak_flops_per_s(spec.dtype) * params.gemm_scale.get(spec.dtype, 1.0)
            out[i] = float(gemm_s(m, n, k, gpu, peak, BYTES_PER_ELEMENT[spec.dtype]))
        else:
            out[i] = float(PRICE[spec.op](np.asarray([spec.message_bytes]), _link(profile, params, r))[0])
    return out


@dataclass(frozen=True)
class ErrorStats:
    """|predicted / measured - 1| over samples: median and max; and the geometric mean of
    measured / predicted (1 = no bias)."""

    median: float
    max: float
    geomean_ratio: float

    @classmethod
    def of(cls, predicted: np.ndarray, measured: np.ndarray) -> ErrorStats:
        rel = np.abs(predicted / measured - 1.0)
        return cls(float(np.median(rel)), float(np.max(rel)), float(np.exp(np.mean(np.log(measured / predicted)))))

    def __str__(self) -> str:
        return (
            f"median |error| {self.median:.0%}, max {self.max:.0%}, measured/predicted geomean {self.geomean_ratio:.2f}"
        )


def fitted_link_tiers(results: list[TermResult]) -> list[str]:
    """The link tiers that measured collectives fit (the others keep the profile's figures)."""
    return sorted({r.spec.tier for r in results if r.spec.op not in COMPUTE_OPS and r.spec.tier in TIERS})


ALPHA_MIN_TERMS = 3
"""Collectives a tier needs, of ``ALPHA_MIN_SIZES`` message sizes at least, for its alpha to be
fitted beside its bandwidth: two parameters and one term more than they need, so that a term the
fit did not see can check it (the cross-validation's own minimum, ``cross_validated``). A
judgement, not a measurement."""

ALPHA_MIN_SIZES = 2
"""Distinct message sizes a tier's collectives need for alpha to be fitted: at one size, alpha and
bandwidth trade one for the other (t = steps x alpha + factor x M / bandwidth), so any pair on a
line reproduces the terms. A review (2026-12-07) fitted one 1 MiB term: alpha 905 -> 230 us and
bandwidth 1 -> 2.9 GB/s, 'after: 0% error'; `plan validate` reports cap every message at one size."""


def alpha_fitted_tiers(results: list[TermResult]) -> list[str]:
    """The fitted link tiers (``fitted_link_tiers``) whose collectives determine alpha apart from
    bandwidth: ``ALPHA_MIN_TERMS`` terms of ``ALPHA_MIN_SIZES`` message sizes. The others fit
    one factor on both, time = factor x the profile's alpha-beta time (alpha x f, bandwidth / f),
    which keeps the profile's ratio of the two: holding alpha instead had sent a 2-core CPU's
    loopback bandwidth to 342 GB/s, its profile's alpha being larger than the terms."""
    out = []
    for tier in fitted_link_tiers(results):
        terms = [r for r in results if r.spec.op not in COMPUTE_OPS and r.spec.tier == tier]
        if len(terms) >= ALPHA_MIN_TERMS and len({r.spec.message_bytes for r in terms}) >= ALPHA_MIN_SIZES:
            out.append(tier)
    return out


def fit(profile: HardwareProfile, results: list[TermResult]) -> tuple[Params, ErrorStats, ErrorStats]:
    """Least-squares fit (module docstring); returns the parameters and the error before and after."""
    from scipy.optimize import least_squares

    start = initial_params(profile)
    tiers = fitted_link_tiers(results)
    alphas = alpha_fitted_tiers(results)
    dtypes = sorted({r.spec.dtype for r in results if r.spec.op in COMPUTE_OPS})
    layers = fits_attention(results)
    x0 = [math.log(v) for t in tiers for v in start.links[t]] + [0.0] * (len(dtypes) + layers)
    measured = np.array([r.measured_s for r in results])

    def unpack(x: np.ndarray) -> Params:
        links = dict(start.links)
        for i, t in enumerate(tiers):  # where the terms do not tell alpha apart, one factor on both
            bandwidth = math.exp(x[2 * i + 1])
            scaled = start.links[t][0] * start.links[t][1] / bandwidth
            links[t] = (math.exp(x[2 * i]) if t in alphas else scaled, bandwidth)
        scale = {d: math.exp(x[2 * len(tiers) + j]) for j, d in enumerate(dtypes)}
        return Params(links=links, gemm_scale=scale, attention_scale=math.exp(x[-1]) if layers else 1.0)

    def residuals(x: np.ndarray) -> np.ndarray:
        pred = predict(profile, unpack(x), results)
        return np.concatenate([np.log(pred / measured), PRIOR_WEIGHT * (x - np.asarray(x0))])

    before = ErrorStats.of(predict(profile, start, results), measured)
    solution = least_squares(residuals, np.asarray(x0, dtype=float), loss="soft_l1", f_scale=0.3)
    params = unpack(solution.x)
    return params, before, ErrorStats.of(predict(profile, params, results), measured)


CV_FOLDS = 10
"""Folds of ``cross_validated`` (every k-th term held out together; leave-one-out below 10 terms)."""


def cross_validated(profile: HardwareProfile, results: list[TermResult]) -> ErrorStats | None:
    """The fit's error on terms it did not see: ``CV_FOLDS`` folds (term i in fold i mod k), each
    refitted without its terms and priced on them. None below 3 terms (a fold would leave too few
    to fit)."""
    n = len(results)
    if n < 3:
        return None
    folds = min(CV_FOLDS, n)
    predicted = np.empty(n)
    for k in range(folds):
        held = [i for i in range(n) if i % folds == k]
        kept = [r for i, r in enumerate(results) if i % folds != k]
        params, _, _ = fit(profile, kept)
        predicted[held] = predict(profile, params, [results[i] for i in held])
    return ErrorStats.of(predicted, np.array([r.measured_s for r in results]))


def _tier_update(
    link: Interconnect, latency_s: float, bus_bytes_per_s: float, source: str, alpha_fitted: bool
) -> dict[str, Any]:
    data = link.model_dump(mode="json", exclude_none=True)
    efficiency = bus_bytes_per_s / (link.bandwidth_gb_per_s * 1e9)
    if efficiency > 1.0 or efficiency < MIN_EFFICIENCY:  # the link is not the datasheet's: the measurement is
        beyond = "exceeds" if efficiency > 1.0 else "is under a hundredth of"
        data["bandwidth_gb_per_s"], efficiency = round(bus_bytes_per_s / 1e9, 6), 1.0
        data["sources"]["bandwidth_gb_per_s"] = f"{source}: fitted bus bandwidth {beyond} the old datasheet value"
    data["bus_efficiency"] = round(efficiency, 6)
    data["sources"]["bus_efficiency"] = f"{source}: fitted bus bandwidth / bandwidth_gb_per_s"
    data["latency_us"] = round(latency_s * 1e6, 3)
    data["sources"]["latency_us"] = (
        f"{source}: fitted alpha (per ring step)"
        if alpha_fitted
        else f"{source}: the old alpha scaled as the fitted bandwidth (too few collectives or message sizes to tell "
        "them apart)"
    )
    return data


def calibrated_profile(
    profile: HardwareProfile, params: Params, results: list[TermResult], name: str, source: str
) -> HardwareProfile:
    """``profile`` with the fitted numbers and ``source`` ('measured on <host> (<device>, torch
    <version>) at <date>: ...', from the report's own context) on every number that changed."""
    data = profile.model_dump(mode="json", exclude_none=True)
    data["name"] = name
    data["description"] = f"{profile.description} (calibrated: {source})"
    alphas = alpha_fitted_tiers(results)
    for tier in fitted_link_tiers(results):
        latency_s, bus = params.links[tier]
        data[tier] = _tier_update(getattr(profile, tier), latency_s, bus, source, tier in alphas)
    gpu = data["gpu"]
    raised: dict[str, float] = {}
    for dtype, scale in params.gemm_scale.items():
        effs = [gpu["gemm_efficiency"] * scale] + [e * scale for _, e in gpu.get("gemm_efficiency_curve", [])]
        top = max(effs)
        if top > 1.0 or min(effs) < MIN_EFFICIENCY:  # the GEMMs run off the stated peak: rescale it
            peak = profile.gpu.peak_flops_per_s(dtype) / 1e12
            gpu["peak_tflops"][dtype] = round(peak * top, 9)
            raised[dtype] = top
            gpu["sources"]["peak_tflops"] = f"{source}: fitted {dtype} GEMM rate off the old peak x efficiency"
            effs = [e / top for e in effs]
        gpu["gemm_efficiency"] = round(effs[0], 6)
        gpu["sources"]["gemm_efficiency"] = f"{source}: fitted from {dtype} GEMMs"
        if "gemm_efficiency_curve" in gpu:
            gpu["gemm_efficiency_curve"] = [
                [g, round(e, 6)] for (g, _), e in zip(gpu["gemm_efficiency_curve"], effs[1:], strict=True)
            ]
            gpu["sources"]["gemm_efficiency_curve"] = f"{source}: the old curve scaled by the fitted factor"
    if fits_attention(results):
        # The fit priced attention at peak x g x A0 x a (g: the GEMM factor of the layers' format,
        # whose peak prices attention in the replay); the written profile prices it at its peak,
        # raised by ``raised`` where that happened, times the efficiency written here.
        dtype = next(r.spec.dtype for r in results if r.spec.op == "layer")
        carried = params.gemm_scale.get(dtype, 1.0) / raised.get(dtype, 1.0)
        fitted = base_attention_efficiency(profile) * params.attention_scale * carried
        gpu["attention_efficiency"] = round(min(max(fitted, MIN_EFFICIENCY), 1.0), 6)
        capped = f" (fit {fitted:.3g} capped at 1)" if fitted > 1.0 else ""
        capped = f" (fit {fitted:.3g} raised to the floor {MIN_EFFICIENCY:g})" if fitted < MIN_EFFICIENCY else capped
        gpu["sources"]["attention_efficiency"] = f"{source}: fitted from layer shards{capped}"
    from planner.errors import validate_as

    # a figure the schema refuses comes from the report's own numbers (a hand-edited time or size)
    where = "calibrated profile (fitted to the report's measured_s and message_bytes)"
    return validate_as(HardwareProfile, data, where)


def write_profile_yaml(path: Path, profile: HardwareProfile) -> None:
    """Write ``profile`` as YAML (atomically: ``write_text_atomic``), creating the folder."""
    import yaml

    text = yaml.safe_dump(profile.model_dump(mode="json", exclude_none=True), sort_keys=False, width=120)
    write_text_atomic(make_parent(path), text)
