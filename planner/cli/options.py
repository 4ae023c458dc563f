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
import typing
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, TypeVar

import typer

from planner import __version__
from planner.schemas.parallel import Schedule


def finite(value: float | None) -> float | None:
    """Option callback: a float option takes finite numbers only (click's float accepts 'inf' and
    'nan'; no price, deadline or fraction of a plan is infinite, and JSON cannot print them)."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number")
    return value


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
NODES = option("nodes", int | None, None, "--nodes", min=1, metavar="N", help="Override the node count of --cluster.")
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
        callback=positive_finite,
        metavar="USD",
        help="Price per GPU-hour (default: the profile's list price).",
    ),
]


class Target(Group, options=TARGET):
    """--model, --cluster, --nodes, --gpus, --price."""


# ---- JOB: what is trained ------------------------------------------------------------------------
SEQ_LEN = option(
    "seq_len",
    int | None,
    None,
    "--seq-len",
    "-s",
    min=1,
    metavar="N",
    help="Sequence length (default: model card, else 4096).",
)
JOB = [
    option(
        "global_batch_size",
        int | None,
        None,
        "--global-batch-size",
        "-B",
        min=1,
        metavar="N",
        help="Global batch in sequences (default: model card, else 4 Mi tokens).",
    ),
    option(
        "global_batch_tokens",
        int | None,
        None,
        "--global-batch-tokens",
        min=1,
        metavar="N",
        help="Global batch in tokens (instead of sequences).",
    ),
    SEQ_LEN,
    option(
        "training_tokens",
        str | None,
        None,
        "--training-tokens",
        metavar="N",
        help="Token budget for time-to-train and cost: 15T, 300B, 2.5e12.",
    ),
    option(
        "max_batch_growth",
        float,
        0.0,
        "--max-batch-growth",
        min=0.0,
        callback=finite,
        metavar="FRACTION",
        help="Let the global batch grow by up to this fraction (0.05 = 5%) to divide into dp*micro-batch.",
    ),
    option("dtype", Literal["bf16", "fp16", "fp8"], "bf16", "--dtype", help="Matmul precision."),
    option(
        "flash_attention",
        bool,
        True,
        "--flash-attention/--no-flash-attention",
        help="Fused attention (no s x s scores in HBM).",
    ),
    option("dropout", bool, False, "--dropout/--no-dropout", help="Dropout layers (GPT-3-era training)."),
    option(
        "stack",
        str | None,
        None,
        "--stack",
        metavar="NAME",
        help="Software stack (default megatron-core; see `plan list stacks`): kernels, overlap, gradient format.",
    ),
    option(
        "tp_comm_overlap",
        bool | None,
        None,
        "--tp-comm-overlap/--no-tp-comm-overlap",
        help="Overlap TP collectives with GEMMs (Megatron --tp-comm-overlap, torchtitan async TP); "
        "default: the stack's.",
    ),
    option("compile", bool | None, None, "--compile/--no-compile", help="torch.compile; default: the stack's."),
    option(
        "ep_comm_overlap",
        bool | None,
        None,
        "--ep-comm-overlap/--no-ep-comm-overlap",
        help="Overlap expert-parallel dispatch/combine with another micro-batch's compute (Megatron "
        "--overlap-moe-expert-parallel-comm; interleaved pipeline or pp 1, no full recompute). Default off.",
    ),
    option(
        "moe_dispatcher",
        str | None,
        None,
        "--moe-dispatcher",
        metavar="alltoall|allgather|flex",
        help="MoE token dispatcher (Megatron --moe-token-dispatcher-type; flex is DeepEP/HybridEP): alltoall "
        "(default), allgather, or flex, among those the stack runs.",
    ),
    option(
        "moe_routing",
        str | None,
        None,
        "--moe-routing",
        metavar="natural|balanced|drop:C|imbalance:R",
        help="MoE token routing: natural (dropless, the busiest expert-parallel rank gets the measured natural "
        "imbalance; default), balanced (force-balanced, as benchmarks run), drop:C (token drop padded to "
        "capacity factor C), imbalance:R (dropless, busiest rank R x the mean).",
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
    option(
        "mtp_layers",
        int | None,
        None,
        "--mtp-layers",
        min=0,
        metavar="N",
        help="Multi-token-prediction layers trained (Megatron --mtp-num-layers): priced on the last pipeline "
        "stage with their LM head passes. Default: the model's num_nextn_predict_layers (DeepSeek-V3: 1); 0: none.",
    ),
]


class Job(Group, options=JOB):
    """--global-batch-size ... --mtp-layers: the job, less the mesh."""


# ---- MESH: the ParallelConfig knobs a user pins --------------------------------------------------
MESH = [
    option("tp", int | None, None, "--tp", min=1, metavar="N", help="Tensor-parallel degree."),
    option("pp", int | None, None, "--pp", min=1, metavar="N", help="Pipeline-parallel degree (stages)."),
    option("dp", int | None, None, "--dp", min=1, metavar="N", help="Data-parallel degree."),
    option("cp", int | None, None, "--cp", min=1, metavar="N", help="Context-parallel degree."),
    option("ep", int | None, None, "--ep", min=1, metavar="N", help="Expert-parallel degree (folds into tp*cp*dp)."),
    option(
        "expert_tp",
        int | None,
        None,
        "--expert-tp",
        min=1,
        metavar="N",
        help="Tensor-parallel degree of expert layers.",
    ),
    option(
        "micro_batch_size",
        int | None,
        None,
        "--micro-batch-size",
        "-b",
        min=1,
        metavar="N",
        help="Micro-batch size (sequences).",
    ),
    option(
        "virtual_stages",
        int | None,
        None,
        "--virtual-stages",
        "-v",
        min=1,
        metavar="N",
        help="Model chunks per pipeline rank (interleaved 1F1B).",
    ),
    option(
        "zero_stage",
        int | None,
        None,
        "--zero-stage",
        "-z",
        min=0,
        max=3,
        metavar="N",
        help="ZeRO stage 0-3 (3 = FSDP).",
    ),
    option(
        "recompute",
        Literal["none", "selective", "full"] | None,
        None,
        "--recompute",
        help="Activation recomputation.",
    ),
    option(
        "recompute_layers",
        int | None,
        None,
        "--recompute-layers",
        min=1,
        metavar="N",
        help="Full recompute of only the first N layers of each model chunk (Megatron --recompute-method block).",
    ),
    option(
        "sequence_parallel",
        bool | None,
        None,
        "--sequence-parallel/--no-sequence-parallel",
        help="Megatron sequence parallelism (needs tp > 1).",
    ),
    option("schedule", Schedule | None, None, "--schedule", help="Pipeline schedule."),
    option(
        "order",
        str | None,
        None,
        "--order",
        metavar="AXES",
        help="Rank placement, innermost axis first (default tp-cp-dp-pp).",
    ),
    option(
        "overlap_grad_reduce",
        bool | None,
        None,
        "--overlap-grad-reduce/--no-overlap-grad-reduce",
        help="Overlap DP gradient reduction with backward (default on).",
    ),
    option(
        "pipeline_layout",
        str | None,
        None,
        "--pipeline-layout",
        metavar="LAYOUT",
        help="Megatron-LM's --pipeline-model-parallel-layout for the mesh, e.g. 'Et*3|(t*4|)*14t*2L' (E embedding, "
        "t decoder layer, L loss, '|' between model chunks); sets the virtual stages. Estimate and export only.",
    ),
]


class Mesh(Group, options=MESH):
    """--tp ... --pipeline-layout: the mesh knobs the user pins (None: not pinned)."""


# ---- REPLAY: how `plan validate` and `plan validate sweep` run -----------------------------------
REPLAY = [
    option(
        "backend",
        Literal["gloo", "nccl"],
        "gloo",
        "--backend",
        help="gloo (CPU, laptops, CI) or nccl (GPUs, under torchrun).",
    ),
    option(
        "local_ranks",
        int | None,
        None,
        "--local-ranks",
        min=1,
        metavar="N",
        help="Spawn N local ranks (gloo) instead of running under torchrun.",
    ),
    option(
        "profile",
        str | None,
        None,
        "--profile",
        metavar="NAME|PATH",
        help="Hardware profile of the machine the replay runs on, which prices every prediction "
        "(default: localhost-cpu with gloo, the --cluster's own with nccl).",
    ),
    option(
        "repeats",
        int | None,
        None,
        "--repeats",
        min=1,
        metavar="N",
        help="Timed repeats per term (default 5 gloo, 20 nccl).",
    ),
    option(
        "warmup",
        int | None,
        None,
        "--warmup",
        min=0,
        metavar="N",
        help="Untimed calls per term (default 1 gloo, 5 nccl).",
    ),
    option(
        "timeout",
        float,
        60.0,
        "--timeout",
        min=1.0,
        callback=finite,
        metavar="S",
        help="Process-group and per-collective timeout, seconds.",
    ),
]


class Replay(Group, options=REPLAY):
    """--backend ... --timeout: where and how the microbenchmarks run."""


# ---- options of one or two commands -------------------------------------------------------------
def _version(value: bool) -> None:
    if value:
        typer.echo(f"plan {__version__}")
        raise typer.Exit()


VersionOpt = Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object (SI units) instead of tables.")]
PlotOpt = Annotated[
    str | None,
    typer.Option("--plot", metavar="FILE.png", help="Also draw the plan (needs the plot extra: matplotlib)."),
]
TopOpt = Annotated[int, typer.Option("--top", "-k", min=1, metavar="N", help="How many candidates to show.")]
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
    Literal["megatron", "torchtitan", "deepspeed"],
    typer.Option(
        "--format",
        "-f",
        help="Target: Megatron-LM arguments, a torchtitan TOML job file, or a DeepSpeed JSON config.",
    ),
]
OutOpt = Annotated[
    Path | None,
    typer.Option("--out", "-o", metavar="FILE", help="Write to FILE (atomically) instead of stdout."),
]

# plan validate
ReportOpt = Annotated[Path, typer.Option("--out", metavar="PATH", help="Report JSON (written atomically).")]
MaxMessageOpt = Annotated[
    str | None,
    typer.Option(
        "--max-message-bytes",
        metavar="SIZE",
        help="Replay larger messages at this size, counted as buckets (default 8MiB with gloo, none with nccl).",
    ),
]
MaxGemmOpt = Annotated[
    float | None,
    typer.Option(
        "--max-gemm-flops",
        min=1.0,
        metavar="FLOP",
        help="Replay larger GEMMs with fewer rows (default 2e9 with gloo, none with nccl).",
    ),
]
LayerShardOpt = Annotated[
    bool | None,
    typer.Option(
        "--layer-shard/--no-layer-shard",
        help="Also replay one transformer layer shard forward+backward per layer kind "
        "(default: on with nccl, off with gloo, where it runs in fp32 at CPU speed).",
    ),
]

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
    Path | None, typer.Option("--plot", metavar="PNG", help="Also draw the sweep (needs matplotlib).")
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
NameOpt = Annotated[str | None, typer.Option("--name", help="Profile name (default: the --out file's stem).")]
