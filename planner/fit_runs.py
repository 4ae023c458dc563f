"""Calibration against published runs, in the open: a handful of physically named parameters per
GPU profile and per software stack, fitted over a runs file, cross-validated.

Parameters (``FIT_FIELDS``):
  per GPU profile  ``sustained_tensor_fraction``: the tensor-core throughput a training run
                   sustains relative to the short benchmarks the profile's efficiencies come from
                   (clocks under a power cap with every GPU of the node busy; no public H100
                   figure exists, fidelity-evidence.md)
  per GPU architecture ``fp8_rowwise_gemm_fraction``: row-scaled fp8 GEMMs (torchao rowwise:
                   torch._scaled_mm with per-row scales, CUTLASS kernels) against tensor-scaled
                   ones, fixed by the row-wise rows alone. A kernel is written per architecture,
                   not per board, so every profile of one architecture shares the value (the
                   rowwise rows of torchtitan's 96 GB H100s and of torchao's unstated H100
                   variant fix one Hopper figure together)
  per GPU architecture ``fp8_block_gemm_fraction``: block-scaled fp8 (MXFP8) GEMMs and their
                   quantisation against tensor-scaled ones, fixed by the MXFP8 rows alone; per
                   architecture for the same reason as the row-wise figure (Transformer
                   Engine's MXFP8 GEMMs are cuBLAS kernels of the Blackwell generation): B200,
                   GB200 and GB300 fix one value (per profile they had come out 0.89, 0.84
                   and 0.90 from 9, 14 and 6 rows, within one another's fold-to-fold spread)
  per stack        ``layer_overhead_us``: fixed time per layer and forward pass beyond its work
                   (launch gaps, the framework's per-layer hooks such as FSDP's), what makes
                   small models slower than their FLOPs say
  per stack        ``tp_layer_overhead_us``: extra fixed time per tensor-parallel layer and pass
                   (torchtitan's DTensor dispatch), fixed by the rows with tp > 1 alone
  per stack        ``moe_layer_overhead_us``: extra fixed time per MoE layer and pass (router,
                   token permutation), fixed by the MoE rows alone
  per stack        ``expert_gemm_overhead_us``: extra fixed time per local expert, MoE layer and
                   pass (a grouped linear that runs one GEMM per local expert: its launches,
                   quantisation and tails), fixed by the MoE rows alone; the rows that tell it
                   from the per-layer figure are the same models at EP 8 (16-32 local experts)
                   and EP 64 (2-4)
  per stack        ``dropless_host_expert_us``: host time per local expert of a MoE layer's
                   forward, exposed past dropless routing's per-layer synchronisation where it
                   exceeds the layer's GPU time (``cost.compute.dropless_sync_exposed_s``),
                   fixed by the dropless MoE rows alone; the rows that tell it from the
                   GPU-side per-expert figure are the same mesh dropless and with token drop
                   (a per-layer host figure beside it fitted to 0 and was left out)
  per stack        ``attention_efficiency_scale``: the stack's attention kernel inside a training
                   step relative to its published microbenchmark (FlashAttention-2/3 papers at
                   one shape); long-sequence rows, where attention dominates, fix it
A GPU profile whose rows come from fewer than two models (MI300X: torchao's Llama-3-8B alone)
cannot have its sustained fraction fitted; it takes the median of the fractions fitted on the
other profiles (``transfer_unfitted``) instead of the benchmark rate, 1, which no measured GPU
sustains in training. Nothing is fitted per run, per model or per group of rows. The residual is log(predicted /
published tokens/s per GPU), so over- and under-prediction weigh alike; scipy's bounded
least_squares fits it with a Jacobian sparsity pattern (a profile's parameter moves only its
rows, a stack's only its rows), each row priced by the planner itself (``step.evaluate``), under
Huber weights (``HUBER_DELTA``, by iteratively reweighted least squares): beyond ~10% a row's
pull on the fit stops growing with its error, so one wrong published row does not drag the
parameters its neighbours share.

Cross-validation holds out one *fold* at a time, a fold being every row of one model from one
source group (the rows of a sweep share their errors, so holding out one row of a sweep would
flatter the fit), refits on the rest, and prices the held-out rows: their errors are the
cross-validated errors the benchmark reports. The refit is one Gauss-Newton step from the full
fit on the remaining rows' Jacobian (exact for a linear model; ``exact=True`` refits with
least_squares instead; a parameter the full fit left at a bound stays there); a parameter none
of the remaining rows moves falls back to its uncalibrated value, never to the value the
held-out rows helped fit. The held-out rows keep the Huber weights of the full fit's residuals
(the weights of the rest come from a fit that saw the fold: a second-order leak, stated).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares
from scipy.sparse import lil_matrix

from planner.catalog import load_profile, load_stack, profile_names
from planner.mesh import MeshArrays
from planner.runs import RunCase, resolve_config
from planner.schemas.hardware import HardwareProfile
from planner.schemas.parallel import ParallelConfig
from planner.schemas.stack import Stack

FIT_FIELDS: dict[tuple[str, str], tuple[float, float, float]] = {
    ("profile", "sustained_tensor_fraction"): (1.0, 0.3, 1.0),
    ("architecture", "fp8_rowwise_gemm_fraction"): (1.0, 0.3, 1.0),
    ("architecture", "fp8_block_gemm_fraction"): (1.0, 0.3, 1.0),
    ("stack", "layer_overhead_us"): (0.0, 0.0, 20_000.0),
    ("stack", "moe_layer_overhead_us"): (0.0, 0.0, 50_000.0),
    ("stack", "tp_layer_overhead_us"): (0.0, 0.0, 20_000.0),
    ("stack", "expert_gemm_overhead_us"): (0.0, 0.0, 5_000.0),
    ("stack", "dropless_host_expert_us"): (0.0, 0.0, 5_000.0),
    ("stack", "attention_efficiency_scale"): (1.0, 0.3, 1.0),
}
"""(kind, field) -> (uncalibrated value, lower bound, upper bound). Bounds are physical: a GPU
cannot sustain more than its benchmarked rate; 20 ms per layer is an order of magnitude above
any published per-layer framework overhead; an
attention kernel inside a training step runs at most at its published (best-shape) figure."""

FIT_START: dict[str, float] = {"dropless_host_expert_us": 200.0}
"""Where a fit starts a parameter no shipped file holds yet, when that is not its uncalibrated
value: the dropless host exposure is a softened max(host - device, 0), flat at 0 for every row
whose GPU time exceeds its host time, so a start at 0 has no gradient to leave by. 200 us per
local expert is a few launches' worth (TE's grouped linear launches a quantisation and a GEMM per
expert, forward): a start, not a result."""

MIN_FOLDS = 2
"""A parameter is fitted only where rows of at least this many folds (models of a source) move
it; otherwise it keeps its uncalibrated value. One model's rows alone would make it a per-model
factor, which predicts nothing."""


@dataclass(frozen=True)
class Param:
    """One fitted parameter: a field of a profile's GPU or of a stack, by name."""

    kind: str  # "profile", "architecture" (every profile of one GPU architecture) or "stack"
    target: str
    field: str

    @property
    def prior(self) -> float:
        return FIT_FIELDS[(self.kind, self.field)][0]

    @property
    def bounds(self) -> tuple[float, float]:
        return FIT_FIELDS[(self.kind, self.field)][1:]

    def label(self) -> str:
        return f"{self.target}.{self.field}"


@dataclass
class Problem:
    """Cases with their meshes resolved once (with the shipped values), the parameters and which
    rows each parameter moves."""

    cases: list[RunCase]
    configs: list[ParallelConfig]
    params: list[Param]
    uses: np.ndarray  # rows x params, bool
    fold: np.ndarray  # rows: index of the row's fold (``folds``)

    @property
    def published(self) -> np.ndarray:
        return np.array([c.published_tokens_per_s_per_gpu for c in self.cases])


def applies(field: str, case: RunCase, config: ParallelConfig) -> bool:
    """Whether ``field`` moves a case's price at all: the MoE overhead only MoE models, the
    row-wise and block fp8 fractions only fp8 jobs of that scaling."""
    if field in ("moe_layer_overhead_us", "expert_gemm_overhead_us"):
        return case.model.is_moe
    if field == "dropless_host_expert_us":
        return case.model.is_moe and case.job.moe_capacity_factor is None
    if field == "tp_layer_overhead_us":
        return config.tp > 1 and case.job.software.tp_dtensor
    if field == "fp8_rowwise_gemm_fraction":
        return case.job.dtype == "fp8" and case.job.fp8_scaling == "row"
    if field == "fp8_block_gemm_fraction":
        return case.job.dtype == "fp8" and case.job.fp8_scaling == "block"
    return True


def target_of(kind: str, case: RunCase) -> str:
    """The profile, GPU architecture or stack of a case that a parameter of ``kind`` belongs to."""
    if kind == "architecture":
        return architecture_of(case.profile)
    return case.profile if kind == "profile" else case.stack


def architecture_of(profile: str) -> str:
    """A profile's GPU architecture (its own name where the profile states none)."""
    return load_profile(profile).gpu.architecture or profile


def profiles_of(kind: str, target: str) -> list[str]:
    """The shipped profiles a GPU parameter of ``kind`` and ``target`` is written to: the profile
    itself, or every profile of the architecture that holds its own calibration (a profile
    ``calibrated_like`` another takes the donor's values)."""
    if kind == "profile":
        return [target]
    return [n for n in profile_names() if architecture_of(n) == target and load_profile(n).calibrated_like is None]


def build_problem(cases: Sequence[RunCase]) -> Problem:
    configs = [resolve_config(c) for c in cases]
    kinds = {kind for kind, _ in FIT_FIELDS}
    targets = {kind: sorted({target_of(kind, c) for c in cases}) for kind in kinds}
    params = [Param(kind, t, f) for (kind, f) in FIT_FIELDS for t in targets[kind]]
    uses = np.zeros((len(cases), len(params)), dtype=bool)
    for i, case in enumerate(cases):
        for j, p in enumerate(params):
            uses[i, j] = target_of(p.kind, case) == p.target and applies(p.field, case, configs[i])
    keys = [(c.group, c.model.name) for c in cases]
    index = {key: k for k, key in enumerate(dict.fromkeys(keys))}
    return Problem(list(cases), configs, params, uses, np.array([index[k] for k in keys]))


def shipped_values(params: Sequence[Param]) -> np.ndarray:
    """The values the shipped profiles and stacks hold now (uncalibrated where absent)."""
    out = []
    for p in params:
        obj = load_stack(p.target) if p.kind == "stack" else load_profile(profiles_of(p.kind, p.target)[0]).gpu
        value = getattr(obj, p.field)
        out.append(FIT_START.get(p.field, p.prior) if value is None else float(value))
    return np.array(out)


def with_values(params: Sequence[Param], theta: np.ndarray) -> tuple[dict[str, HardwareProfile], dict[str, Stack]]:
    """Copies of the shipped profiles and stacks carrying ``theta``."""
    gpu_updates: dict[str, dict[str, float]] = {}
    stack_updates: dict[str, dict[str, float]] = {}
    for p, value in zip(params, theta, strict=True):
        if p.kind == "stack":
            stack_updates.setdefault(p.target, {})[p.field] = float(value)
            continue
        for name in profiles_of(p.kind, p.target):
            gpu_updates.setdefault(name, {})[p.field] = float(value)
    profiles = {}
    for name, update in gpu_updates.items():
        prof = load_profile(name)
        profiles[name] = prof.model_copy(update={"gpu": prof.gpu.model_copy(update=update)})
    stacks = {name: load_stack(name).model_copy(update=update) for name, update in stack_updates.items()}
    return profiles, stacks


def predict(problem: Problem, theta: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """Predicted tokens/s per GPU of ``rows`` (all by default) with parameter values ``theta``."""
    from planner.cost.step import evaluate

    profiles, stacks = with_values(problem.params, theta)
    idx = np.arange(len(problem.cases)) if rows is None else np.flatnonzero(rows) if rows.dtype == bool else rows
    out = np.empty(len(idx))
    for k, i in enumerate(idx):
        case = problem.cases[i]
        cluster, job = case.under(profiles.get(case.profile), stacks.get(case.stack))
        cols = evaluate(case.model, cluster, job, MeshArrays.from_configs([problem.configs[i]]))
        out[k] = job.tokens_per_step / float(cols.step_time_s[0]) / cluster.num_gpus
    return out


PER_ARCHITECTURE_KERNEL_FIELDS = ("attention_efficiency_scale",)
"""Stack parameters that describe a kernel, which is written per GPU architecture (cuDNN's and
FlashAttention's Hopper and Blackwell attention are different kernels): fitted only where the
stack's rows span at least ``MIN_ARCHITECTURES`` architectures. From one architecture's rows the
scale cannot be told from that architecture's own sustained fraction (both scale its rows), and
it would carry one generation's kernel maturity to every other GPU the stack runs on (Megatron-
Core's runs are all Blackwell: fitted there, its attention scale made every H100 Megatron plan
slower)."""

MIN_ARCHITECTURES = 2


def _free(problem: Problem, rows: np.ndarray) -> np.ndarray:
    """Parameters that rows of at least MIN_FOLDS folds among ``rows`` move (and, for a kernel
    parameter, rows on MIN_ARCHITECTURES GPU architectures)."""
    idx = np.flatnonzero(rows)
    arch = np.array([c.cluster.gpu.architecture or c.profile for c in problem.cases])
    out = []
    for j, p in enumerate(problem.params):
        used = idx[problem.uses[idx, j]]
        ok = len(set(problem.fold[used].tolist())) >= MIN_FOLDS
        if p.field in PER_ARCHITECTURE_KERNEL_FIELDS:
            ok = ok and len(set(arch[used].tolist())) >= MIN_ARCHITECTURES
        out.append(ok)
    return np.array(out)


TRANSFERRED_FIELDS = ("sustained_tensor_fraction",)
"""Per-profile parameters that a profile whose rows cannot fix takes from the profiles whose rows
do (their median) rather than from its uncalibrated value. The sustained fraction is the clock a
GPU holds at its power cap for hours against the short benchmark its efficiencies come from: every
profile fitted so far sustains 74-94% (dgx-b200 0.74 to dgx-a100-80g 0.94), so 1 is the one value
known to be wrong. Kernel fractions (fp8 row- and block-scaled GEMMs) are not transferred: a kernel
is written per architecture, and one architecture's says nothing of another's."""


def _profile_params(problem: Problem, field: str) -> np.ndarray:
    """Indices of the per-profile parameters of ``field``."""
    return np.array([j for j, p in enumerate(problem.params) if p.kind == "profile" and p.field == field], dtype=int)


def transferred(problem: Problem, free: np.ndarray) -> np.ndarray:
    """Parameters that take the median of the fitted ones (``TRANSFERRED_FIELDS``): per profile,
    not fitted, with at least one profile's value of the same field fitted."""
    out = np.zeros(len(problem.params), dtype=bool)
    for field in TRANSFERRED_FIELDS:
        idx = _profile_params(problem, field)
        if free[idx].any():
            out[idx] = ~free[idx]
    return out


def transfer_unfitted(problem: Problem, theta: np.ndarray, free: np.ndarray) -> np.ndarray:
    """``theta`` with every ``transferred`` parameter set to the median of the fitted values of its
    field."""
    out = theta.copy()
    moved = transferred(problem, free)
    for field in TRANSFERRED_FIELDS:
        idx = _profile_params(problem, field)
        if moved[idx].any():
            out[idx[moved[idx]]] = float(np.median(theta[idx[free[idx]]]))
    return out


HUBER_DELTA = 0.10
"""Log residual beyond which a row's pull on the fit stops growing (Huber 1964): about a 10%
error. A published row can sit 2x from its neighbours for a cause the model has not learned yet
(Megatron-Bridge 25.11's Qwen3-30B on B200 ran at half its 25.09 throughput on the same mesh, until
the dropless host synchronisation, ``dropless_host_expert_us``, explained it); with plain least
squares such a row drags every parameter it shares with its neighbours. A judgement call: the
scale of the model's typical in-sample error."""

IRLS_ROUNDS = 8
"""Iteratively reweighted least squares rounds for the Huber weights at most (each warm-starts
the last); they stop once no weight moves by ``IRLS_TOLERANCE``."""
IRLS_TOLERANCE = 0.02


def huber_weights(residual: np.ndarray) -> np.ndarray:
    """Huber's weights: 1 within ``HUBER_DELTA``, delta/|r| beyond."""
    a = np.abs(residual)
    return np.where(a <= HUBER_DELTA, 1.0, HUBER_DELTA / np.maximum(a, 1e-12))


def fit(
    problem: Problem, rows: np.ndarray, start: np.ndarray, weights: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Least squares on sqrt(weight) x log(predicted / published) over ``rows`` (bool mask);
    parameters the rows do not determine keep their uncalibrated value, or take the fitted ones'
    median (``transfer_unfitted``). Returns (theta,
    Jacobian of all rows' weighted residuals at theta, over the free parameters; zero columns
    elsewhere)."""
    free = _free(problem, rows)
    root_w = np.sqrt(np.ones(len(problem.cases)) if weights is None else weights)
    theta = np.array([p.prior for p in problem.params])
    theta[free] = np.clip(start[free], *np.array([problem.params[j].bounds for j in np.flatnonzero(free)]).T)
    theta = transfer_unfitted(problem, theta, free)
    log_published = np.log(problem.published)
    idx = np.flatnonzero(rows)

    def residuals(x: np.ndarray) -> np.ndarray:
        full = theta.copy()
        full[free] = x
        return root_w[idx] * (np.log(predict(problem, full, idx)) - log_published[idx])

    jac = np.zeros((len(problem.cases), len(problem.params)))
    if not free.any():
        return theta, jac
    sparsity = lil_matrix(problem.uses[np.ix_(idx, free)].astype(float))
    lower, upper = np.array([problem.params[j].bounds for j in np.flatnonzero(free)]).T
    scale = np.maximum(upper - lower, 1e-9) / 10.0
    result = least_squares(
        residuals, theta[free], bounds=(lower, upper), jac_sparsity=sparsity, x_scale=scale, xtol=1e-4, ftol=1e-6
    )
    theta[free] = result.x
    theta = transfer_unfitted(problem, theta, free)
    dense = result.jac.toarray() if hasattr(result.jac, "toarray") else np.asarray(result.jac)
    jac[np.ix_(idx, np.flatnonzero(free))] = dense
    return theta, jac


def folds(problem: Problem) -> list[np.ndarray]:
    """One fold per (source group, model): every row of one model from one source."""
    return [problem.fold == k for k in range(int(problem.fold.max()) + 1)]


@dataclass
class FitResult:
    problem: Problem
    theta: np.ndarray
    predicted: np.ndarray  # in-sample, at theta
    cv_predicted: np.ndarray  # each row from the fit without its fold
    cv_theta: list[np.ndarray]
    free: np.ndarray  # params the rows determine (the others keep their uncalibrated value or are transferred)

    @property
    def transferred(self) -> np.ndarray:
        """Parameters set to the median of the fitted values of their field (``transfer_unfitted``)."""
        return transferred(self.problem, self.free)

    @property
    def error(self) -> np.ndarray:
        return self.predicted / self.problem.published - 1.0

    @property
    def cv_error(self) -> np.ndarray:
        return self.cv_predicted / self.problem.published - 1.0


def fit_and_cross_validate(cases: Sequence[RunCase], exact: bool = False) -> FitResult:
    """Fit every parameter on all rows, then the cross-validated prediction of each fold."""
    problem = build_problem(cases)
    everything = np.ones(len(cases), dtype=bool)
    log_published = np.log(problem.published)
    # IRLS from the shipped values: their residuals give the first weights (a shipped fit is
    # already the answer, so a re-run converges at once)
    theta = shipped_values(problem.params)
    weights = huber_weights(np.log(predict(problem, theta)) - log_published)
    for _ in range(IRLS_ROUNDS):
        theta, jac = fit(problem, everything, theta, weights)
        predicted = predict(problem, theta)
        residual = np.log(predicted) - log_published
        fitted_with, weights = weights, huber_weights(residual)
        if np.max(np.abs(weights - fitted_with)) < IRLS_TOLERANCE:
            break
    # the last fit's Jacobian belongs to the weights it used
    weights = fitted_with
    cv_predicted = np.empty(len(cases))
    cv_theta: list[np.ndarray] = []
    for fold in folds(problem):
        rest = ~fold
        if exact:
            theta_f, _ = fit(problem, rest, theta, weights)
        else:
            theta_f = _one_step(problem, theta, jac, np.sqrt(weights) * residual, rest)
        cv_theta.append(theta_f)
        cv_predicted[fold] = predict(problem, theta_f, fold)
    return FitResult(problem, theta, predicted, cv_predicted, cv_theta, _free(problem, everything))


def _one_step(
    problem: Problem, theta: np.ndarray, jac: np.ndarray, residual: np.ndarray, rest: np.ndarray
) -> np.ndarray:
    """One Gauss-Newton step from the full fit on the ``rest`` rows: minimise
    ||r_rest + J_rest d||^2 over the parameters the rest determines (bounded by clipping); the
    others fall back to their uncalibrated value, or to the median of the refitted values of their
    field (``transfer_unfitted``)."""
    free = _free(problem, rest) & (np.abs(jac[rest]).sum(axis=0) > 0)
    out = np.array([p.prior for p in problem.params])
    # a parameter the full fit left at a bound stays there: the linear step knows no bounds
    bounds = np.array([p.bounds for p in problem.params])
    pinned = free & ((theta <= bounds[:, 0] + 1e-9) | (theta >= bounds[:, 1] - 1e-9))
    out[pinned] = theta[pinned]
    free &= ~pinned
    if free.any():
        j = jac[np.ix_(rest, free)]
        step, *_ = np.linalg.lstsq(j, -residual[rest], rcond=None)
        lower, upper = np.array([problem.params[k].bounds for k in np.flatnonzero(free)]).T
        out[free] = np.clip(theta[free] + step, lower, upper)
    return transfer_unfitted(problem, out, free | pinned)
