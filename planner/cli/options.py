"""Every option of the ``plan`` command line, declared once; the commands take them from here.

The options that commands take together are declared as groups, lists of ``Opt``: ``TARGET``
(what is planned, on what), ``JOB`` (what is trained), ``MESH`` (the parallel knobs a user pins)
and ``REPLAY`` (how ``plan validate`` runs its microbenchmarks). Each group has a frozen dataclass
of its values (``Target``, ``Job``, ``Mesh``, ``Replay``). A command asks for a group by
annotating a parameter of its body with the class; ``command`` gives typer one parameter per
option of the groups (in the groups' order) and calls the body with one instance per group, built
from the options the command itself declares. A name a group does not declare is an
AttributeError, never a silent None. The options of one or two commands are ``Annotated`` aliases
(``JsonOpt``, ``TopOpt``, ...).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import types
import typing
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, TypeVar

import annotated_types
import typer
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from planner import __version__
from planner.schemas.hardware import MAX_PRICE_PER_GPU_HOUR_USD, MIN_PRICE_PER_GPU_HOUR_USD
from planner.schemas.job import MAX_MOE_ROUTING_RATIO, JobSpec
from planner.schemas.parallel import ParallelConfig, PipelineSplit
from planner.validate.settings import ReplaySettings, ValidationSettings


def finite(value: float | None) -> float | None:
    """Option callback: a float option takes finite numbers only (click's float accepts 'inf' and
    'nan'; no price, deadline or fraction of a plan is infinite, and JSON cannot print them)."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number")
    return value


def range_text(lo: float | None, hi: float | None) -> str:
    """'>= 0 and <= 0.5' for the bounds given."""
    return " and ".join(f"{op} {b:g}" for op, b in ((">=", lo), ("<=", hi)) if b is not None)


def finite_in(lo: float | None = None, hi: float | None = None) -> Any:
    """Option callback: a finite number within [lo, hi], checked in that order, so that 'nan' is
    called not finite rather than out of a range (click's FloatRange compares it first)."""

    def check(value: float | None) -> float | None:
        finite(value)
        if value is not None and ((lo is not None and value < lo) or (hi is not None and value > hi)):
            raise typer.BadParameter(f"{value:g} is not a number {range_text(lo, hi)}")
        return value

    return check


def positive_finite(value: float | None) -> float | None:
    """Option callback: a finite number > 0 (a price of 0 ranks every mesh at no cost)."""
    if value is not None and not (math.isfinite(value) and value > 0):
        raise typer.BadParameter(f"{value} is not a finite number > 0")
    return value


# ---- how options and groups are declared --------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Opt:
    """One option: the name the body reads, the type and default of its value, and its flags,
    help and checks (``typer.Option``)."""

    name: str
    annotation: Any
    default: Any
    info: Any

    @property
    def annotated(self) -> Any:
        """``Annotated[type, typer.Option(...)]``: the option as the annotation of a parameter."""
        return Annotated[self.annotation, self.info]

    def parameter(self) -> inspect.Parameter:
        """The option as the parameter of a function typer reads."""
        kind = inspect.Parameter.KEYWORD_ONLY
        return inspect.Parameter(self.name, kind, default=self.default, annotation=self.annotated)


def option(name: str, annotation: Any, default: Any, *flags: str, **settings: Any) -> Opt:
    """``Opt(name, annotation, default, typer.Option(*flags, **settings))``."""
    return Opt(name, annotation, default, typer.Option(*flags, **settings))


_UNSET: Any = object()


def field_option(schema: type[BaseModel], name: str, *short: str, default: Any = _UNSET, **settings: Any) -> Opt:
    """The option that sets field ``name`` of the pydantic ``schema``, made from the field: the flag
    ``--name-with-dashes`` (``--name/--no-name`` for a bool) and the ``short`` ones, the choices of
    its Literal type, the range of its ge/gt/le/lt constraints (PositiveInt: >= 1), finite numbers
    only for a float, and its description as the help. The default is the field's, or ``default``
    (None: unset, the library decides). ``settings`` (a metavar, another annotation) go to
    ``option``; a field whose type is not one option value must give ``annotation``."""
    field = schema.model_fields[name]
    kind, constraints = _value_type(field.annotation, field.metadata)
    value_default = field.default if default is _UNSET else default
    if value_default is PydanticUndefined:
        value_default = None
    given = settings.pop("annotation", None)  # the option takes other text than the field (a size, a path)
    annotation = given or (kind if value_default is not None else kind | None)
    flag = "--" + name.replace("_", "-")
    description = field.description or ""
    if kind is bool:
        flag = f"{flag}/--no-{flag[2:]}"
    elif kind is int and given is None:
        settings.setdefault("metavar", "N")
        settings |= _range(kind, constraints)
    elif kind is float and given is None:
        settings.setdefault("metavar", "X")
        bounds = _range(kind, constraints)
        settings.setdefault("callback", finite_in(bounds.get("min"), bounds.get("max")))
        if bounds:
            description = f"{description.rstrip('.')}. A number {range_text(bounds.get('min'), bounds.get('max'))}"
    help_text = description if description.endswith(".") or not description else description + "."
    return option(name, annotation, value_default, flag, *short, help=help_text, **settings)


def _value_type(annotation: Any, metadata: Sequence[Any]) -> tuple[Any, list[Any]]:
    """A field's type without None and the Annotated wrapper of a constrained type, and its
    constraints (pydantic puts Field's in ``metadata``, PositiveInt's in ``Annotated``)."""
    constraints = list(metadata)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        rest = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        annotation = rest[0] if len(rest) == 1 else typing.Union[tuple(rest)]  # noqa: UP007
    if typing.get_origin(annotation) is Annotated:
        annotation, *more = typing.get_args(annotation)
        constraints += more
    return annotation, constraints


def _range(kind: type, constraints: Sequence[Any]) -> dict[str, Any]:
    """click's min and max for an int or float field's constraints (ints: gt 0 is min 1)."""
    bounds: dict[str, Any] = {}
    step = 1 if kind is int else 0
    if kind is float and any(isinstance(c, annotated_types.Gt | annotated_types.Lt) for c in constraints):
        raise TypeError("an open bound of a float (gt, lt) has no click range: declare the option with a callback")
    for c in constraints:
        if isinstance(c, annotated_types.Ge | annotated_types.Gt):
            bounds["min"] = kind(c.ge if isinstance(c, annotated_types.Ge) else c.gt + step)
        elif isinstance(c, annotated_types.Le | annotated_types.Lt):
            bounds["max"] = kind(c.le if isinstance(c, annotated_types.Le) else c.lt - step)
    return bounds


class Group:
    """The values of a group of options, as a frozen dataclass: a subclass names its options
    (``class Mesh(Group, options=MESH)``) and gets one field per option, with the option's default."""

    OPTIONS: ClassVar[tuple[Opt, ...]] = ()

    def __init_subclass__(cls, options: Sequence[Opt] = (), **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.OPTIONS = tuple(options)
        cls.__annotations__ = {opt.name: opt.annotation for opt in cls.OPTIONS}
        for opt in cls.OPTIONS:
            setattr(cls, opt.name, opt.default)
        dataclasses.dataclass(frozen=True)(cls)

    def values(self) -> dict[str, Any]:
        """The options by name."""
        return {opt.name: getattr(self, opt.name) for opt in self.OPTIONS}


Body = TypeVar("Body", bound=Callable[..., Any])


def command(body: Body | None = None, *, without: Iterable[str] = ()) -> Any:
    """Decorator: ``body``, whose parameters annotated with a ``Group`` class stand for that
    group's options, as a function typer reads. Its signature lists every option of those groups
    (but the ones named in ``without``, which the command does not offer: the body sees their
    defaults) and the body's other parameters as they are; a call builds one group instance from
    its options and passes it to the body. Names that clash, or a ``without`` that names no option
    of the groups, fail when the command is declared."""
    left_out = frozenset(without)

    def build(body: Body) -> Body:
        hints = typing.get_type_hints(body, include_extras=True)
        groups: dict[str, type[Group]] = {}
        params: list[inspect.Parameter] = []
        for param in inspect.signature(body).parameters.values():
            kind = hints.get(param.name, param.annotation)
            if isinstance(kind, type) and issubclass(kind, Group):
                groups[param.name] = kind
                params += [opt.parameter() for opt in kind.OPTIONS if opt.name not in left_out]
            else:
                params.append(param.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=kind))
        offered = {opt.name for group in groups.values() for opt in group.OPTIONS}
        if left_out - offered:
            raise TypeError(f"{body.__name__}: without={sorted(left_out - offered)} names no option of its groups")
        names = [param.name for param in params] + list(groups)
        clashes = sorted({name for name in names if names.count(name) > 1})
        if clashes:
            raise TypeError(f"{body.__name__}: parameter names {clashes} are declared twice")

        @functools.wraps(body)
        def run(**values: Any) -> Any:
            for name, group in groups.items():
                values[name] = group(**{opt.name: values.pop(opt.name) for opt in group.OPTIONS if opt.name in values})
            return body(**values)

        run.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        run.__annotations__ = {param.name: param.annotation for param in params}
        return run  # type: ignore[return-value]

    return build if body is None else build(body)


# ---- TARGET: what is planned, on what -------------------------------------------------------------
CLUSTER = option(
    "cluster",
    str | None,
    None,
    "--cluster",
    "-c",
    metavar="NAME|PATH",
    help="<profile> (one node), <profile>x<N> (N nodes, e.g. dgx-h100x16), or a YAML path.",
)
NODES = option(
    "nodes",
    int | None,
    None,
    "--nodes",
    min=1,
    metavar="N",
    help="Override the node count of --cluster.",
)
GPUS = option(
    "gpus",
    int | None,
    None,
    "--gpus",
    min=1,
    metavar="N",
    help="Override the GPU count (the last node may be partly used).",
)
TARGET = [
    option(
        "model",
        str | None,
        None,
        "--model",
        "-m",
        metavar="NAME|PATH",
        help="Catalog name or alias (llama70b), a model YAML, or a Hugging Face config.json.",
    ),
    CLUSTER,
    NODES,
    GPUS,
    option(
        "price",
        float | None,
        None,
        "--price",
        callback=finite_in(MIN_PRICE_PER_GPU_HOUR_USD, MAX_PRICE_PER_GPU_HOUR_USD),
        metavar="USD",
        help=f"Price per GPU-hour in USD (default: the profile's list price); a number >= "
        f"{MIN_PRICE_PER_GPU_HOUR_USD:g} and <= {MAX_PRICE_PER_GPU_HOUR_USD:g}.",
    ),
]


class Target(Group, options=TARGET):
    """--model, --cluster, --nodes, --gpus, --price."""


# ---- JOB: what is trained ------------------------------------------------------------------------
SEQ_LEN = field_option(JobSpec, "seq_len", "-s")
JOB = [
    field_option(JobSpec, "global_batch_size", "-B"),
    field_option(JobSpec, "global_batch_tokens"),
    SEQ_LEN,
    option(
        "training_tokens",
        str | None,
        None,
        "--training-tokens",
        metavar="N",
        help="Token budget for time-to-train and cost: 15T, 300B, 2.5e12.",
    ),
    field_option(JobSpec, "max_batch_growth", metavar="FRACTION"),
    field_option(JobSpec, "memory_headroom", metavar="FRACTION"),
    field_option(JobSpec, "dtype"),
    field_option(JobSpec, "fp8_scaling", default=None),
    field_option(JobSpec, "bf16_last_layers", metavar="N"),
    field_option(JobSpec, "flash_attention"),
    field_option(JobSpec, "dropout"),
    field_option(JobSpec, "stack", annotation=str | None, default=None, metavar="NAME"),
    field_option(JobSpec, "tp_comm_overlap"),
    field_option(JobSpec, "compile"),
    field_option(JobSpec, "compile_loss"),
    field_option(JobSpec, "ep_comm_overlap"),
    field_option(JobSpec, "moe_dispatcher"),
    option(
        "moe_routing",
        str | None,
        None,
        "--moe-routing",
        metavar="natural|balanced|drop:C|imbalance:R",
        help="MoE token routing: natural (dropless, the busiest expert-parallel rank gets the measured natural "
        "imbalance; default), balanced (force-balanced, as benchmarks run), drop:C (token drop padded to "
        f"capacity factor C, at most {MAX_MOE_ROUTING_RATIO:g}), imbalance:R (dropless, busiest rank R x the "
        f"mean, 1 to {MAX_MOE_ROUTING_RATIO:g}).",
    ),
    option(
        "adam_moments",
        str | None,
        None,
        "--adam-moments",
        metavar="fp32|bf16",
        help="Format of Adam's two moments: fp32 (12 bytes of state per parameter with the fp32 master weight; "
        "default) or bf16 (8; Megatron --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16).",
    ),
    field_option(JobSpec, "mtp_layers"),
    field_option(JobSpec, "gradient_dtype"),
    field_option(JobSpec, "recompute_modules", annotation=str | None, default=None, metavar="MODULE,..."),
]
"""The JobSpec fields one option sets are made from the field; --training-tokens (a count with a
suffix), --moe-routing (two fields), --adam-moments (the state's bytes), --recompute-modules (a
comma-separated list) and --fp8-scaling (only with --dtype fp8) are read by ``planner.cli.inputs``."""


class Job(Group, options=JOB):
    """--global-batch-size ... --mtp-layers: the job, less the mesh."""


# ---- MESH: the ParallelConfig knobs a user pins, one per field -----------------------------------
MESH_FLAGS: dict[str, dict[str, Any]] = {
    "micro_batch_size": {"short": ("-b",)},
    "virtual_stages": {"short": ("-v",)},
    "zero_stage": {"short": ("-z",)},
    "order": {"metavar": "AXES"},
    "pipeline_layout": {"metavar": "LAYOUT"},
}
"""What the fields do not say themselves: short flags and metavars."""


def _mesh_option(name: str, short: Sequence[str] = (), **settings: Any) -> Opt:
    return field_option(ParallelConfig, name, *short, default=None, **settings)


MESH = [_mesh_option(name, **MESH_FLAGS.get(name, {})) for name in ParallelConfig.model_fields]
"""Every ParallelConfig field, unset by default (the search chooses it; `plan estimate` takes the
field's default, dp the GPUs left over)."""


class Mesh(Group, options=MESH):
    """--tp ... --pipeline-layout: the mesh knobs the user pins (None: not pinned)."""


SPLIT = [field_option(PipelineSplit, name) for name in PipelineSplit.model_fields]
"""Megatron-LM's split options, read as the pipeline layout they build (``search.split_pins``)."""


class Split(Group, options=SPLIT):
    """--decoder-first-pipeline-num-layers ... --account-for-loss-in-pipeline-split."""


# ---- REPLAY and CAPS: how `plan validate` and `plan validate sweep` run -----------------------
REPLAY_FLAGS: dict[str, dict[str, Any]] = {"profile": {"metavar": "NAME|PATH"}, "timeout": {"metavar": "S"}}

REPLAY = [field_option(ReplaySettings, name, **REPLAY_FLAGS.get(name, {})) for name in ReplaySettings.model_fields]
"""Every ReplaySettings field."""


class Replay(Group, options=REPLAY):
    """--backend ... --timeout: where and how the microbenchmarks run."""


CAPS_FLAGS: dict[str, dict[str, Any]] = {
    "max_message_bytes": {"annotation": str | None, "metavar": "SIZE"},
    "max_gemm_flops": {"metavar": "FLOP"},
}
CAPS = [
    field_option(ValidationSettings, name, **CAPS_FLAGS.get(name, {}))
    for name in ValidationSettings.model_fields
    if name not in ReplaySettings.model_fields
]
"""The ValidationSettings fields a sweep has not: the caps that keep a CPU replay short, and the
layer shards (--max-message-bytes is a size such as 8MiB)."""


class Caps(Group, options=CAPS):
    """--max-message-bytes, --max-gemm-flops, --layer-shard."""


# ---- options of one or two commands -------------------------------------------------------------
def _version(value: bool) -> None:
    if value:
        typer.echo(f"plan {__version__}")
        raise typer.Exit()


VersionOpt = Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (SI units) instead of tables.")]
CompareBestOpt = Annotated[
    bool,
    typer.Option(
        "--compare-best",
        help="Also run the search for the same job and say where this mesh loses to its best (e.g. a published "
        "layout against the planner's pick).",
    ),
]


def plot_file(value: Any) -> Any:
    """Option callback: a --plot file name whose suffix is a format the plot writes, checked before
    any work (``plots.check_plot_path``); unset stays None."""
    if value is not None:
        from planner.plots import check_plot_path

        check_plot_path(value)
    return value


PlotOpt = Annotated[
    str | None,
    typer.Option(
        "--plot", metavar="FILE.png", callback=plot_file, help="Also draw the plan (needs the plot extra: matplotlib)."
    ),
]
MAX_TOP = 1_000_000
"""The most candidates a table may ask for (a bound against typos: the searches rank at most a few
hundred thousand meshes or layouts; 10**23 had reached the schema as a 64-bit overflow)."""

TopOpt = Annotated[
    int, typer.Option("--top", "-k", min=1, max=MAX_TOP, metavar="N", help="How many candidates to show.")
]
ObjectiveOpt = Annotated[
    Literal["time", "cost", "memory"],
    typer.Option("--objective", help="Rank by step time, by cost (needs a price) or by memory per GPU."),
]
ClusterOpt = CLUSTER.annotated
NodesOpt = NODES.annotated
GpusOpt = GPUS.annotated
SeqOpt = SEQ_LEN.annotated

# plan capacity
DaysOpt = Annotated[
    float | None,
    typer.Option("--days", callback=finite, metavar="D", help="Deadline in days of wall time (required)."),
]
MaxNodesOpt = Annotated[int, typer.Option("--max-nodes", min=1, metavar="N", help="Largest node count to try.")]

# plan export
FormatOpt = Annotated[
    Literal["megatron", "torchtitan", "torchtitan-0.2", "deepspeed"],
    typer.Option(
        "--format",
        "-f",
        help="Target: Megatron-LM arguments, torchtitan 0.3 --module/--config overrides, a torchtitan 0.2 TOML "
        "job file, or a DeepSpeed JSON config.",
    ),
]
OutOpt = Annotated[
    Path | None,
    typer.Option("--out", "-o", metavar="FILE", help="Write to FILE (atomically) instead of stdout."),
]
LauncherOpt = Annotated[
    Literal["torchrun", "slurm"] | None,
    typer.Option(
        "--launcher",
        help="After the settings, print the command that starts the job on the plan's nodes: a torchrun line "
        "(run on every node) or a Slurm sbatch script.",
    ),
]
IgnoreMemoryOpt = Annotated[
    bool,
    typer.Option(
        "--ignore-memory",
        help="Export a mesh the plan predicts does not fit in GPU memory (refused otherwise: it would run out "
        "of memory after the queue).",
    ),
]

# plan validate
ReportOpt = Annotated[Path, typer.Option("--out", metavar="PATH", help="Report JSON (written atomically).")]

# plan validate sweep
OpsOpt = Annotated[
    str,
    typer.Option(
        "--ops",
        metavar="LIST",
        help="Collectives, comma-separated: all, all-reduce, reduce-scatter, all-gather, all-to-all, send-recv.",
    ),
]
SizesOpt = Annotated[
    str, typer.Option("--sizes", metavar="LIST", help="Message sizes at the full world, e.g. 64KiB,1MiB,8MiB.")
]
SizeOpt = Annotated[
    str, typer.Option("--size", metavar="SIZE", help="Message size of the world-size series (groups of 2..N).")
]
SweepOutOpt = Annotated[Path, typer.Option("--out", metavar="PATH", help="Sweep JSON (written atomically).")]
SweepPlotOpt = Annotated[
    Path | None,
    typer.Option("--plot", metavar="FILE.png", callback=plot_file, help="Also draw the sweep (needs matplotlib)."),
]

# plan calibrate
FromOpt = Annotated[
    Path | None, typer.Option("--from", metavar="JSON", help="A plan validate or plan validate sweep JSON.")
]
FromRunsOpt = Annotated[
    Path | None,
    typer.Option(
        "--from-runs",
        metavar="YAML",
        help="A published-runs file (modern_runs.yaml's schema): fit sustained tensor throughput per GPU "
        "profile and kernel overhead per stack, cross-validated.",
    ),
]
GroupOpt = Annotated[
    list[str] | None, typer.Option("--group", metavar="G", help="With --from-runs: only these groups.")
]
WriteOpt = Annotated[
    bool, typer.Option("--write", help="With --from-runs: write the fit into the shipped profiles and stacks.")
]
ProfileOutOpt = Annotated[Path | None, typer.Option("--out", metavar="YAML", help="The calibrated hardware profile.")]
NameOpt = Annotated[
    str | None, typer.Option("--name", metavar="NAME", help="Profile name (default: the --out file's stem).")
]
