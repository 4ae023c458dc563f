"""What the options name, as library objects: the model, cluster and job, the mesh pins, and the
values given as text (token counts, MoE routing, Adam's moment format, the stack)."""

from __future__ import annotations

import math
import typing
from typing import TYPE_CHECKING, Any

from planner.errors import PlannerError, shown
from planner.schemas.job import MIN_MOE_CAPACITY_FACTOR, RecomputeModule

if TYPE_CHECKING:
    from planner.cli.options import Job, Mesh, Split, Target
    from planner.schemas.hardware import ClusterSpec
    from planner.schemas.job import JobSpec
    from planner.schemas.model import ModelSpec


def require(value: str | None, flag: str, command: str = "plan") -> str:
    """``value``, or the error that ``flag`` is required, pointing at ``command``'s help (`plan
    serve --help` for plan serve: its options are not the training plan's)."""
    if value is None:
        raise PlannerError(f"{flag} is required (see `{command} --help`)")
    return value


def model_and_cluster(target: Target, command: str = "plan") -> tuple[ModelSpec, ClusterSpec]:
    """The model and cluster (at --price, where given) that --model, --cluster, --nodes and --gpus name
    (``command``: the one whose help a missing one points at)."""
    from planner.catalog import load_cluster, load_model

    model = load_model(require(target.model, "--model", command))
    cluster = load_cluster(require(target.cluster, "--cluster", command), nodes=target.nodes, gpus=target.gpus)
    return model, cluster.with_price(target.price)


def job_spec(job: Job, model: ModelSpec) -> JobSpec:
    """The job the JOB options describe for ``model`` (unset sizes from its model card), one the
    model can run (``schemas.job.check_positions``). Options named as a JobSpec field pass as they
    are; the others are read here."""
    from planner.schemas.job import MAX_TRAINING_TOKENS, check_positions
    from planner.search import default_job

    fields = job.values()
    tokens = fields.pop("training_tokens")
    modules = fields.pop("recompute_modules")
    if modules is not None:  # Megatron's --recompute-modules, comma-separated: mla_up_proj,layernorm
        names = tuple(m.strip() for m in modules.split(","))
        allowed = typing.get_args(RecomputeModule)
        wrong = next((m for m in names if m not in allowed), None)
        if wrong is not None:
            what = "an empty name" if not wrong else f"'{shown(wrong)}'"
            raise PlannerError(
                f"--recompute-modules '{shown(modules)}': {what} is no module; allowed, comma-separated: "
                + ", ".join(allowed)
            )
        fields["recompute_modules"] = names
    scaling = fields.pop("fp8_scaling")
    if scaling is not None:
        if fields["dtype"] != "fp8":
            dtype = fields["dtype"]
            raise PlannerError(f"--fp8-scaling {scaling}: scales fp8 matmuls only; add --dtype fp8 (the job: {dtype})")
        fields["fp8_scaling"] = scaling
    spec = default_job(
        model,
        stack=stack_choice(fields.pop("stack")),
        **moe_routing_fields(fields.pop("moe_routing")),
        **adam_fields(fields.pop("adam_moments")),
        training_tokens=None if tokens is None else parse_count(tokens, "--training-tokens", MAX_TRAINING_TOKENS, 1.0),
        **fields,
    )
    check_positions(model, spec)
    return spec


def model_cluster_job(target: Target, job: Job) -> tuple[ModelSpec, ClusterSpec, JobSpec]:
    """``model_and_cluster`` and ``job_spec``: what `plan`, `plan estimate` and the others plan."""
    model, cluster = model_and_cluster(target)
    return model, cluster, job_spec(job, model)


def adam_fields(text: str | None) -> dict[str, float]:
    """``--adam-moments`` as the JobSpec field it sets (``ADAM_STATE_BYTES_PER_PARAM``)."""
    from planner.schemas.job import ADAM_STATE_BYTES_PER_PARAM

    if text is None:
        return {}
    if text not in ADAM_STATE_BYTES_PER_PARAM:
        raise PlannerError(f"--adam-moments '{text}': allowed {', '.join(ADAM_STATE_BYTES_PER_PARAM)}")
    return {"optimizer_state_bytes_per_param": ADAM_STATE_BYTES_PER_PARAM[text]}


def moe_routing_fields(text: str | None) -> dict[str, float]:
    """``--moe-routing`` as JobSpec fields: natural (none), balanced (imbalance 1), drop:C
    (capacity factor C), imbalance:R."""
    if text is None or text.strip().lower() == "natural":
        return {}
    kind, _, value = text.strip().lower().partition(":")
    if kind == "balanced" and not value:
        return {"moe_load_imbalance": 1.0}
    fields = {"drop": "moe_capacity_factor", "imbalance": "moe_load_imbalance"}
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    low = {"drop": MIN_MOE_CAPACITY_FACTOR, "imbalance": 1.0}.get(kind, 1.0)
    if kind not in fields or not math.isfinite(number) or number < low:
        raise PlannerError(
            f"--moe-routing '{text}': allowed natural, balanced, drop:C (capacity factor C >= "
            f"{MIN_MOE_CAPACITY_FACTOR:g}) or imbalance:R (R >= 1)"
        )
    return {fields[kind]: number}


def stack_choice(text: str | None) -> Any:
    """``--stack``: a catalog name stays a name (short JSON); a YAML path becomes the loaded Stack.
    Unknown names fail here, with the list."""
    from planner.catalog import DEFAULT_STACK, load_stack, stack_names

    name = DEFAULT_STACK if text is None else text
    loaded = load_stack(name)
    return name.lower() if name.lower() in stack_names() else loaded


SUFFIXES = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}


def parse_count(text: str, flag: str, maximum: float = math.inf, minimum: float = 0.0) -> float:
    """'15T' -> 1.5e13, '300B' -> 3e11, '2.5e12' -> 2.5e12 (decimal suffixes K, M, B/G, T), above 0 and
    at least ``minimum``, at most ``maximum``."""
    raw = text.strip().upper()
    scale = SUFFIXES.get(raw[-1:], 1.0)
    number = raw[:-1] if raw[-1:] in SUFFIXES else raw
    try:
        value = float(number) * scale
    except ValueError:
        raise PlannerError(
            f"{flag} '{shown(text)}' is not a count: give a number with an optional K, M, B or T"
        ) from None
    if not math.isfinite(value) or not value > 0:
        raise PlannerError(f"{flag} must be a finite number > 0, got '{shown(text)}'")
    if value < minimum:
        raise PlannerError(f"{flag} '{shown(text)}': at least {minimum:g}")
    if value > maximum:
        raise PlannerError(f"{flag} '{shown(text)}': at most {maximum:g} ({maximum / 1e12:,.0f}T)")
    return value


def mesh_pins(mesh: Mesh) -> dict[str, Any]:
    """The ParallelConfig knobs the user pinned (--tp, --zero-stage, ...), checked."""
    from planner.search import pins_from_config_fields

    return pins_from_config_fields(**mesh.values())


def one_mesh_pins(mesh: Mesh, split: Split, model: ModelSpec, job: JobSpec) -> dict[str, Any]:
    """``mesh_pins`` with Megatron-LM's split options (--decoder-first-pipeline-num-layers, ...)
    read as the pipeline layout they build for ``model`` (``search.split_pins``)."""
    from planner.errors import validate_as
    from planner.schemas.parallel import PipelineSplit
    from planner.search import split_pins

    return split_pins(mesh_pins(mesh), validate_as(PipelineSplit, split.values(), "pipeline split"), model, job)
