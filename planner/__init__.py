"""Planner for distributed LLM training: rank TP/PP/DP/CP/EP meshes by predicted step time.

Library use::

    import planner
    ranking = planner.plan("llama70b", "dgx-h100x16")
    est = planner.estimate("llama70b", "dgx-h100x16", tp=8, pp=2, dp=8, sequence_parallel=True)
    best = planner.serve("llama70b", "dgx-h100x1", input_len=2048, output_len=512, tpot_s=0.03)
    report = planner.plan_capacity("llama70b", "dgx-h100", training_tokens=15e12, days=30)

torch is never imported here; only the validator (an optional extra) needs it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from planner.catalog import load_cluster, load_model
from planner.errors import PlannerError
from planner.schemas import ClusterSpec, Estimate, JobSpec, ModelSpec, ParallelConfig
from planner.schemas.base import out_of_range_integer
from planner.schemas.parallel import PipelineSplit
from planner.schemas.ranking import Ranking

if TYPE_CHECKING:
    from planner.capacity import CapacityReport
    from planner.serving.schemas import ServeRanking

__version__ = "0.1.0"

_JOB_KEYS = set(JobSpec.model_fields)

F = TypeVar("F", bound=Callable[..., Any])


def _whole_numbers_in_range(fn: F) -> F:
    """Refuse a call the function's signature does not take (an unknown keyword, a missing
    argument, too many positional ones) with a PlannerError, as any bad input, not Python's
    TypeError; take numpy scalars as the Python numbers they hold; refuse, by the argument's name, an
    integer argument past a 64-bit integer (``price=10**400``,
    ``tp=10**5000``): float() overflows past about 10**308 and Python will not print one of more
    than 4,300 digits, so the checks further in raised OverflowError and ValueError instead of a
    PlannerError."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def checked(*args: Any, **kwargs: Any) -> Any:
        import numpy as np

        # numpy scalars as the Python numbers they hold: top=np.int64(2) had been refused as not a
        # whole number while tp=np.int64(8) passed
        args = tuple(a.item() if isinstance(a, np.generic) else a for a in args)
        kwargs = {k: v.item() if isinstance(v, np.generic) else v for k, v in kwargs.items()}
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as err:  # a call its signature refuses: one line, as every bad input
            raise PlannerError(f"{fn.__name__}(): {err}; see help(planner.{fn.__name__})") from None
        for name, value in bound.arguments.items():
            spread = signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD
            given = value.items() if spread else [(name, value)]
            for key, item in given:
                problem = out_of_range_integer(item)
                if problem is not None:
                    raise PlannerError(f"{key}: {problem}")
        return fn(*args, **kwargs)

    return checked  # type: ignore[return-value]


CLI_ONLY_KEYWORDS = {
    "nodes": "the cluster's: planner.load_cluster(name, nodes=N)",
    "gpus": "the cluster's: planner.load_cluster(name, gpus=N)",
    "adam_moments": "optimizer_state_bytes_per_param here: 12 (fp32 moments) or 8 (bf16)",
    "moe_routing": "moe_load_imbalance (natural, imbalance:R; balanced is 1.0) or moe_capacity_factor (drop:C) here",
    "v": "virtual_stages here (the tables' column v)",
}
"""CLI options whose library spelling differs, by the keyword a caller may try: where the unknown
keyword's message points (a review, 2026-12-07, tried nodes=, gpus=, adam_moments= and moe_routing=, and
another v=, which the docstring of ``estimate`` had named)."""


def _split(kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(job fields, mesh knobs) of the keyword arguments; a keyword that is neither is refused with
    the near names of both (a review, 2026-12-07: 'moe_load_imbalanc' was refused as an unknown mesh
    knob, the list naming mesh knobs alone, though job fields are accepted too)."""
    import difflib

    from planner.errors import PlannerError

    mesh_keys = set(ParallelConfig.model_fields) | set(PipelineSplit.model_fields)
    unknown = sorted(k for k in kwargs if k not in _JOB_KEYS and k not in mesh_keys)
    if unknown:
        names = sorted(_JOB_KEYS | mesh_keys)
        guessed = [k for k in unknown if k not in CLI_ONLY_KEYWORDS]
        near = sorted({m for k in guessed for m in difflib.get_close_matches(k, names, n=3, cutoff=0.6)})
        hint = f" (did you mean {', '.join(near)}?)" if near else ""
        hint += "".join(f"; {k} is {CLI_ONLY_KEYWORDS[k]}" for k in unknown if k in CLI_ONLY_KEYWORDS)
        raise PlannerError(
            f"unknown keyword(s) {', '.join(unknown)}: neither a job field (JobSpec) nor a mesh knob "
            f"(ParallelConfig, PipelineSplit){hint}; allowed: {', '.join(names)}"
        )
    job = {k: v for k, v in kwargs.items() if k in _JOB_KEYS}
    mesh = {k: v for k, v in kwargs.items() if k not in _JOB_KEYS}
    return job, mesh


def _pipeline_split(mesh: dict[str, Any]) -> tuple[dict[str, Any], PipelineSplit]:
    """The mesh fields less Megatron-LM's split options, and those options (``PipelineSplit``)."""
    from planner.errors import validate_as

    split = {k: v for k, v in mesh.items() if k in PipelineSplit.model_fields}
    rest = {k: v for k, v in mesh.items() if k not in PipelineSplit.model_fields}
    return rest, validate_as(PipelineSplit, split, "pipeline split")


def _job(model: ModelSpec, job: JobSpec | None, job_fields: dict[str, Any]) -> JobSpec:
    """The job: ``job`` with ``job_fields`` applied (re-validated), or the model's default job; one
    the model can run (``schemas.job.check_positions``)."""
    from planner.schemas.job import check_positions

    work = _job_fields_applied(model, job, job_fields)
    check_positions(model, work)
    return work


def _job_fields_applied(model: ModelSpec, job: JobSpec | None, job_fields: dict[str, Any]) -> JobSpec:
    from planner.errors import validate_as
    from planner.search import default_job

    if job is not None and not isinstance(job, JobSpec):
        raise PlannerError(f"job: expected a JobSpec (or None for the model's default job), got {job!r}")
    if job is None:
        return default_job(model, **job_fields)
    data = job.model_dump(warnings=False)  # validated again: model_copy(update=...) skips the checks
    # The batch is stored both ways; keep the form the caller did not override so that the
    # other is derived again (a new seq_len keeps the batch in sequences).
    if "global_batch_tokens" in job_fields and "global_batch_size" not in job_fields:
        data.pop("global_batch_size")
    else:
        data.pop("global_batch_tokens")
    return validate_as(JobSpec, {**data, **job_fields}, "job")


@_whole_numbers_in_range
def plan(
    model: str | ModelSpec,
    cluster: str | ClusterSpec,
    job: JobSpec | None = None,
    top: int = 10,
    objective: str = "time",
    price: float | None = None,
    **pins: Any,
) -> Ranking:
    """Rank feasible meshes; ``pins`` fix ParallelConfig knobs (tp=8, zero_stage=1, ...) and may
    also set job fields (seq_len=8192, global_batch_size=512); ``price`` is USD per GPU-hour
    (`--price`; None: the profile's list price). Where fewer of the cluster's GPUs train faster,
    the ranking's ``fewer_gpus`` says so (``planner.fewer_gpus``)."""
    from planner.search import pins_from_config_fields, search

    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise PlannerError(f"top: expected a whole number >= 1, got {top!r}")
    spec, clus = load_model(model), _priced(cluster, price)
    job_fields, mesh = _split(pins)
    mesh, split = _pipeline_split(mesh)
    if split.given:
        raise PlannerError(
            "decoder_first/last_pipeline_num_layers and account_for_embedding/loss_in_pipeline_split price one "
            "mesh: give them to planner.estimate with tp, pp and dp (the search prices its own split, "
            "cost.pipeline.rank_layer_split)"
        )
    return search(
        spec,
        clus,
        _job(spec, job, job_fields),
        pins_from_config_fields(**mesh),
        top=top,
        objective=objective,
        try_fewer_gpus=True,
        with_margin=True,
    )


def _priced(cluster: str | ClusterSpec, price: object) -> ClusterSpec:
    """``load_cluster`` at ``price`` USD per GPU-hour where given (``ClusterSpec.with_price``)."""
    if price is not None and (isinstance(price, bool) or not isinstance(price, int | float)):
        raise PlannerError(f"price: expected USD per GPU-hour, a number > 0, got {price!r}")
    return load_cluster(cluster).with_price(None if price is None else float(price), "price")


@_whole_numbers_in_range
def estimate(
    model: str | ModelSpec,
    cluster: str | ClusterSpec,
    job: JobSpec | None = None,
    price: float | None = None,
    **fields: Any,
) -> Estimate:
    """Price one mesh; ``fields`` are ParallelConfig fields (tp, pp, dp, ...), Megatron-LM's split
    options (``PipelineSplit``: decoder_first_pipeline_num_layers, ...) and job fields; ``price``
    is USD per GPU-hour (None: the profile's). As
    `plan estimate` reads them: dp takes the GPUs tp*pp*cp leave, virtual_stages > 1 implies interleaved 1F1B,
    sequence parallelism is on with tp > 1, an unset zero_stage is the stack's (``search.pinned_mesh``)."""
    from planner.pricing import estimate_mesh
    from planner.search import pinned_mesh, pins_from_config_fields, split_pins

    spec, clus = load_model(model), _priced(cluster, price)
    job_fields, mesh = _split(fields)
    work = _job(spec, job, job_fields)
    mesh, split = _pipeline_split(mesh)
    pins = split_pins(pins_from_config_fields(**mesh), split, spec, work)
    return estimate_mesh(spec, clus, work, pinned_mesh(pins, clus.num_gpus, work))


@_whole_numbers_in_range
def plan_capacity(
    model: str | ModelSpec,
    cluster: str | ClusterSpec,
    training_tokens: float,
    days: float,
    max_nodes: int = 1024,
    job: JobSpec | None = None,
    price: float | None = None,
    **pins: Any,
) -> CapacityReport:
    """How many nodes of ``cluster``'s profile train ``model`` on ``training_tokens`` within ``days``
    and what it costs (`plan capacity`): ``planner.plan_capacity("llama70b", "dgx-h100", 15e12, 30)``.
    ``pins`` and ``price`` as in ``plan``; each node count up to ``max_nodes`` is searched in full (on NVL72
    racks also on their 64-GPU segments, ``planner.capacity.capacity``). Not named ``capacity``:
    that is the module, which its first import would bind over a function of the same name."""
    from planner.capacity import capacity as capacity_report
    from planner.capacity import check_one_node, deadline_seconds
    from planner.search import pins_from_config_fields

    if isinstance(max_nodes, bool) or not isinstance(max_nodes, int) or max_nodes < 1:
        raise PlannerError(f"max_nodes: expected a whole number >= 1, got {max_nodes!r}")
    if isinstance(days, bool) or not isinstance(days, int | float):
        raise PlannerError(f"days: expected a finite number > 0, got {days!r}")
    spec, node = load_model(model), _priced(cluster, price)
    check_one_node(node, f"cluster '{node.name}'")
    job_fields, mesh = _split(pins)
    work = _job(spec, job, {**job_fields, "training_tokens": training_tokens})
    return capacity_report(spec, node, work, deadline_seconds(days, "days"), max_nodes, pins_from_config_fields(**mesh))


@_whole_numbers_in_range
def serve(
    model: str | ModelSpec, cluster: str | ClusterSpec, price: float | None = None, **request: Any
) -> ServeRanking:
    """Rank serving layouts (``plan serve``): ``planner.serve("llama70b", "dgx-h100x1",
    input_len=2048, output_len=512, tpot_s=0.03)``; ``request`` holds ``ServeRequest`` fields
    (planner.serving.schemas), ``price`` USD per GPU-hour as in ``plan`` (`plan serve --price`).
    Returns a ``ServeRanking``; where no layout meets the targets its ``candidates`` are empty and
    its ``reason`` says why, as `plan serve --json` prints it (the table ends in that error), where
    ``plan`` raises: no mesh fitting is a question without an answer, no layout meeting a target an
    answer about the target."""
    from planner.serving import serve as serve_ranking

    return serve_ranking(model, _priced(cluster, price), **request)


load_cluster = _whole_numbers_in_range(load_cluster)
load_model = _whole_numbers_in_range(load_model)

_RESULT_TYPES = {
    "CapacityReport": "planner.capacity",
    "CapacityRow": "planner.capacity",
    "RankedEstimate": "planner.schemas.ranking",
    "ServeCandidate": "planner.serving.schemas",
    "ServeRanking": "planner.serving.schemas",
}
"""Result types a script may name for hints or isinstance checks, imported on first use (the serving
schemas are not loaded by `plan` itself): a review (2026-12-07) had to reach into the modules."""


def __getattr__(name: str) -> Any:
    if name in _RESULT_TYPES:
        import importlib

        return getattr(importlib.import_module(_RESULT_TYPES[name]), name)
    raise AttributeError(f"module 'planner' has no attribute {name!r}")


__all__ = [
    "CapacityReport",
    "CapacityRow",
    "ClusterSpec",
    "Estimate",
    "JobSpec",
    "ModelSpec",
    "ParallelConfig",
    "PlannerError",
    "RankedEstimate",
    "Ranking",
    "ServeCandidate",
    "ServeRanking",
    "__version__",
    "estimate",
    "load_cluster",
    "load_model",
    "plan",
    "plan_capacity",
    "serve",
]
