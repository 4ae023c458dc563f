"""The error bar of a prediction: the cross-validated errors of the published runs that match it
(recorded in the shipped profiles and stacks by ``plan calibrate --from-runs --write``)."""

from __future__ import annotations

from planner.schemas.hardware import RunCalibration

INTERVAL_QUANTILES = (0.1, 0.9)
"""The error bar is the central 80% of the cross-validated errors that match an estimate."""

MIN_INTERVAL_ROWS = 9
"""Fewest cross-validated rows an error bar is read from before widening to a coarser match: the
widest interval n rows give, their smallest to their largest error, covers a new run with
probability (n - 1) / (n + 1) (``quantile``), which reaches the 80% the bar states from n = 9."""


LARGEST_CALIBRATED_GPUS = {False: 512, True: 256}
"""The most GPUs of any run the shipped calibrations list (their ``calibration.rows``), dense and
MoE (``ModelSpec.is_moe``): llm-foundry's MPT runs on 512 H100; Megatron-Bridge's DeepSeek-V3 and
Qwen3-235B on 256 GB200/GB300 (a test checks both against modern_runs.yaml where it is present).
A job on more GPUs meets what none of them had, which no band covers: stragglers, failures and
restarts, contention over a larger fabric, the batch split thinner. Meta's Llama 3 405B on 16,384
H100 (TP8 PP16 DP128, 16M-token batch) reports 38-43% MFU (Dubey et al. 2024, 'The Llama 3 Herd of
Models', table 4), where the planner prices that mesh at about 51% (``pricing.advice`` says so)."""


def beyond_calibration(gpus: int, moe: bool) -> str | None:
    """What a prediction on ``gpus`` GPUs says of its band where the job is larger than any run the
    band rests on (``LARGEST_CALIBRATED_GPUS``), else None."""
    largest = LARGEST_CALIBRATED_GPUS[moe]
    if gpus <= largest:
        return None
    ratio = gpus / largest  # 288 of 256 is 1.1x (whole numbers had printed '1x the 256', a review, 2026-12-07)
    times = f"{ratio:.1f}".removesuffix(".0") if ratio < 10 else f"{ratio:.0f}"
    return (
        f"{gpus:,} GPUs, {times}x the {largest} of the largest {'MoE' if moe else 'dense'} run the "
        "bands rest on: they do not cover what larger jobs meet (stragglers, failures and restarts, contention over "
        "a larger fabric); Meta's Llama 3 405B on 16,384 H100 reports 38-43% MFU where the planner prices its mesh "
        "at about 51%"
    )


MOE_SUFFIX = "+moe"
"""Calibration keys of MoE rows: ``<stack>+moe`` in a profile's ``cv_error_pct``, ``<profile>+moe``
in a stack's. Dense and MoE predictions err differently (dispatch, expert GEMMs, routing), so a
MoE estimate reads MoE rows first and a dense one dense rows."""


def calibration_key(name: str, moe: bool) -> str:
    """The key a row's cross-validated error is kept under: the stack (in a profile's calibration),
    the profile (in a stack's) or the GPU architecture (in a serving engine's), ``MOE_SUFFIX`` added
    for a MoE model."""
    return name + (MOE_SUFFIX if moe else "")


def split_key(key: str) -> tuple[str, bool]:
    """``calibration_key`` undone: (name, whether the key's rows are MoE)."""
    return key.removesuffix(MOE_SUFFIX), key.endswith(MOE_SUFFIX)


def error_bar(
    profile_calibration: RunCalibration | None,
    stack_calibration: RunCalibration | None,
    profile: str,
    stack: str,
    moe: bool = False,
    other_stacks: dict[str, list[float]] | None = None,
) -> tuple[list[float], str]:
    """Cross-validated errors (percent) that match an estimate on ``profile`` with ``stack`` for a
    dense or MoE model (``moe``): the profile's rows of that kind with that stack where there are
    enough; else the profile's rows of that kind with any stack and the stack's rows of that kind on
    other profiles, combined by ``transferred_errors`` (such a prediction transfers the GPU's
    calibration to this stack and the stack's to this GPU, and carries both uncertainties), a side
    without rows of the kind taking its rows of the other (a MoE plan on a GPU whose runs are all
    dense: its dense runs still say how its calibration transfers; the stack's MoE runs alone had
    left that out, and 39% of the 23 held-out DGX-H100 Megatron MoE rows fell inside, 43% since);
    else the same two steps over rows of either kind; else none. Returns (errors, what they are).

    A stack with no runs of its own (DeepSpeed, Megatron-LM 2021) takes ``other_stacks``, the rows
    of every calibrated stack keyed as a stack's are, for its own: its transfer is at least as
    uncertain as a calibrated stack's (a floor: its own overheads are not fitted at all). Without
    this the GPU's rows stood alone, and the stack with no runs got a narrower band (about ±8% on
    H100) than the calibrated one (-17..+12%)."""
    prof = profile_calibration.cv_error_pct if profile_calibration else {}
    stk = stack_calibration.cv_error_pct if stack_calibration else {}
    stand_in = not stk and bool(other_stacks)
    if stand_in:
        stk = other_stacks or {}
    with_stack = f"with {stack} (other GPUs)"
    if stand_in:
        with_stack = f"of the calibrated stacks on other GPUs ({stack} has none)"
    kind = "MoE" if moe else "dense"

    def of_kind(key: str) -> bool:
        return split_key(key)[1] == moe

    def base(key: str) -> str:
        return split_key(key)[0]

    other = "dense" if moe else "MoE"
    for select, what in ((of_kind, f"{kind} "), (lambda key: True, "")):
        same = [e for key, errs in prof.items() if select(key) and base(key) == stack for e in errs]
        if len(same) >= MIN_INTERVAL_ROWS:
            return same, f"{len(same)} cross-validated {what}runs on {profile} with {stack}"
        mine = [e for key, errs in prof.items() if select(key) for e in errs]
        theirs = [e for key, errs in stk.items() if select(key) and base(key) != profile for e in errs]
        gpu_side, stack_side = f"{len(mine)} on {profile} (any stack)", f"{len(theirs)} {with_stack}"
        # one side without rows of the kind: its rows of the other kind still say how its
        # calibration transfers (a MoE plan on a GPU whose runs are all dense)
        if theirs and not mine and prof:
            mine = [e for errs in prof.values() for e in errs]
            gpu_side, stack_side = f"{len(mine)} {other} on {profile} (any stack)", f"{len(theirs)} {kind} {with_stack}"
            what = ""
        if mine and not theirs and any(base(key) != profile for key in stk):
            theirs = [e for key, errs in stk.items() if base(key) != profile for e in errs]
            gpu_side, stack_side = f"{len(mine)} {kind} on {profile} (any stack)", f"{len(theirs)} {other} {with_stack}"
            what = ""
        if len(mine) + len(theirs) >= MIN_INTERVAL_ROWS:
            rows = f"{len(mine) + len(theirs)} cross-validated {what}runs: {gpu_side}, {stack_side}"
            if mine and theirs:
                return transferred_errors(mine, theirs), rows + ", the first's errors each spread by the second's"
            return mine + theirs, rows
    return [], f"no cross-validated runs for {profile} or {stack}"


def pooled_stack_errors(calibrations: list[RunCalibration | None]) -> dict[str, list[float]]:
    """Every stack's cross-validated errors merged by key (profile, or profile+moe): the stand-in
    ``error_bar`` gives a stack with no runs of its own."""
    pooled: dict[str, list[float]] = {}
    for calibration in calibrations:
        for key, errors in (calibration.cv_error_pct if calibration else {}).items():
            pooled.setdefault(key, []).extend(errors)
    return pooled


def transferred_errors(gpu_errors: list[float], stack_errors: list[float]) -> list[float]:
    """The errors (percent) of a prediction that transfers both calibrations: every error of the
    GPU's rows (other stacks) compounded with every deviation of the stack's rows (other GPUs) from
    their median, (1 + a)(1 + b - median b) - 1, as if the two were independent. Pooling the two
    lists instead gave an interval too narrow: 68% of the 78 held-out DGX-H100 Megatron rows
    (benchmarks/data/heldout_h100_megatron.yaml, never fitted; H100 has no Megatron-Core rows in
    the fit) fell inside the nominal 80%, against 77% compounded (``benchmarks/modern.py``
    ``interval_coverage``)."""
    centre = quantile(stack_errors, 0.5)
    return [((1.0 + a / 100.0) * (1.0 + (b - centre) / 100.0) - 1.0) * 100.0 for a in gpu_errors for b in stack_errors]


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` for a prediction interval: Hyndman and Fan's definition 6
    (numpy's ``method="weibull"``), the order statistic at position q(n + 1), interpolated between
    neighbours and held at the smallest and largest value beyond them. A new draw exchangeable with
    n others falls below the k-th smallest of them with probability k / (n + 1) (R. J. Hyndman and
    Y. Fan, 'Sample quantiles in statistical packages', The American Statistician 50(4), 1996), so
    the 10th to 90th of this definition cover 80% of new runs once n >= 9. numpy's default
    (definition 7, position 1 + q(n - 1)) covers about (n - 1) 0.8 / (n + 1) in expectation: 65% from
    10 runs, 72% from 20, which is what the bar had claimed as 80%. The median is the same in both."""
    ordered = sorted(values)
    position = min(max(q * (len(ordered) + 1), 1.0), float(len(ordered))) - 1.0
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def relative_band(predicted: float, band: tuple[float, float]) -> tuple[float, float]:
    """An interval's ends as percentages of the prediction it belongs to (-38.0, -12.0 for a
    band of 5,756 .. 8,146 tokens/s around 9,291; +6, +64 for a TTFT band of 353 .. 549 ms around
    334): negative where published runs came in below it, for a rate or a time alike."""
    low, high = band
    return (low / predicted - 1.0) * 100.0, (high / predicted - 1.0) * 100.0


def interval(predicted: float, errors_pct: list[float]) -> tuple[float, float] | None:
    """The central 80% of what the published runs would have measured for this prediction (a rate
    or a time): published = predicted / (1 + error), at the 10th and 90th percentile errors."""
    if not errors_pct:
        return None
    lo_err, hi_err = (quantile(errors_pct, q) / 100.0 for q in INTERVAL_QUANTILES)
    return predicted / (1.0 + hi_err), predicted / (1.0 + lo_err)
