"""What every export target needs: the plan's split of layers and batch, and one way to refuse.

The targets take a mesh the planner has already checked (``planner.pricing.estimate_mesh`` or
the search); the checks here are only those a target adds on top, each a ``PlannerError`` whose
one line names the knob and what the target allows (the CLI prints it as ``error: ...``).
"""

from __future__ import annotations

import shlex

from planner.errors import PlannerError
from planner.mesh import shards_nothing
from planner.schemas.job import JobSpec
from planner.schemas.parallel import DEFAULT_ORDER, ParallelConfig

FRAMEWORKS = {
    "megatron": "megatron",
    "torchtitan": "torchtitan",
    "torchtitan-0.2": "torchtitan",
    "deepspeed": "deepspeed",
}
"""Export targets, as ``plan export --format`` names them, and the framework each launches (the
``export_format`` of its stack): ``torchtitan`` writes the current release's (0.3) command-line
overrides, ``torchtitan-0.2`` the TOML job file of 0.2.x, the last release that reads one."""

FORMATS = tuple(FRAMEWORKS)


def routing_note(job: JobSpec, config: ParallelConfig, flags_written: bool) -> list[str]:
    """What MoE routing the plan priced (``cost.routing``), for an expert-parallel mesh: a target
    whose flags say it (``flags_written``: Megatron's capacity and force-balance flags) is told
    only of natural routing, which needs no flag."""
    if config.ep <= 1:
        return []
    if job.moe_capacity_factor is not None:
        said = f"token drop padded to capacity factor {job.moe_capacity_factor:g}"
    elif job.moe_dropless_imbalance == 1.0:
        said = "force-balanced routing (every expert-parallel rank at the mean, as benchmarks run)"
    else:
        said = (
            f"dropless natural routing: the busiest expert-parallel rank gets {job.moe_dropless_imbalance:g}x the "
            "mean routed tokens (--moe-routing to change it)"
        )
        return [f"priced with {said}"]
    return [] if flags_written else [f"priced with {said}: set it in the recipe's MoE settings"]


def check_dispatcher(target: str, stack: str, job: JobSpec, config: ParallelConfig) -> None:
    """Refuse an expert-parallel plan whose token dispatcher the target's stack does not run
    (``Stack.moe_dispatchers``)."""
    from planner.catalog import load_stack

    runs = load_stack(stack).moe_dispatchers
    if config.ep > 1 and job.moe_dispatcher not in runs:
        allowed = ", ".join(runs) or "none"
        raise refuse(target, f"--moe-dispatcher {job.moe_dispatcher}", f"{stack} runs {allowed}", mesh_bound=False)


def check_adam_state(target: str, job: JobSpec, bf16_moments: bool) -> None:
    """Refuse optimizer state the target cannot run: Adam with fp32 moments (12 bytes per
    parameter) everywhere, bf16 moments (8) where the target has them (``bf16_moments``)."""
    from planner.schemas.job import ADAM_STATE_BYTES_PER_PARAM

    allowed = {k: v for k, v in ADAM_STATE_BYTES_PER_PARAM.items() if bf16_moments or k == "fp32"}
    if job.optimizer_state_bytes_per_param not in allowed.values():
        said = " or ".join(f"{v:g} (--adam-moments {k})" for k, v in allowed.items())
        state = f"{job.optimizer_state_bytes_per_param:g} bytes of optimizer state per parameter"
        raise refuse(target, state, said, mesh_bound=False)


class ExportRefusalError(PlannerError):
    """A target cannot express the plan. ``mesh_bound`` False: the model or the job is what the
    target lacks (an architecture it does not build, a precision it does not train), so no other
    mesh of the same job would export either, and pinning mesh knobs cannot help."""

    def __init__(self, message: str, mesh_bound: bool = True) -> None:
        super().__init__(message)
        self.mesh_bound = mesh_bound


def refuse(target: str, knob: str, allowed: str, mesh_bound: bool = True) -> ExportRefusalError:
    """``<target> cannot express <knob>: <what the target allows>``, one line."""
    return ExportRefusalError(f"{target} cannot express {knob}: {allowed}", mesh_bound)


def num_microbatches(target: str, job: JobSpec, config: ParallelConfig) -> int:
    """m = B / (dp * b), the micro-batches each pipeline runs per optimizer step (ARCHITECTURE 8.1).

    ``job`` is the job the mesh runs (with ``--max-batch-growth`` the estimate's grown batch)."""
    unit = config.dp * config.micro_batch_size
    if job.batch_size % unit:
        raise refuse(
            target,
            f"global batch {job.batch_size}",
            f"it must be a multiple of dp*micro_batch_size = {config.dp}*{config.micro_batch_size}",
        )
    return job.batch_size // unit


def effective_zero_stage(config: ParallelConfig, moe: bool = False) -> int:
    """The ZeRO stage, or 0 when there is nothing to shard over (dp*cp = 1 and, for a MoE model
    (``moe``), expert-DP = 1: ``constraints.shards_nothing``): the search may pick any stage there,
    since they all price the same, and no target should refuse for it."""
    return 0 if shards_nothing(moe, config) else config.zero_stage


def zero_note(config: ParallelConfig, moe: bool = False) -> list[str]:
    """A note when ``effective_zero_stage`` dropped the asked stage."""
    if config.zero_stage and effective_zero_stage(config, moe) == 0:
        return [f"ZeRO stage {config.zero_stage} is moot with dp*cp = 1 (nothing to shard over); exported as 0"]
    return []


def axis_inside(config: ParallelConfig, inner: str, outer: str) -> bool:
    """Whether axis ``inner`` sits inside ``outer`` in the mesh's rank order (innermost first)."""
    axes = config.order.split("-")
    return axes.index(inner) < axes.index(outer)


def is_default_order(config: ParallelConfig) -> bool:
    return config.order == DEFAULT_ORDER


def render_flags(args: list[str], comments: list[str], subcommands: bool = False) -> str:
    """``# comment`` lines, then one flag per line with its values, joined by backslash
    continuations, values shell-quoted (a Megatron layout string holds '|'); with
    ``subcommands`` a ``name:choice`` token (tyro's subcommand, torchtitan 0.3) starts its own
    line too."""
    lines: list[list[str]] = []
    for token in args:
        if token.startswith("--") or (subcommands and ":" in token) or not lines:
            lines.append([token])
        else:
            lines[-1].append(token)
    body = [" ".join(shlex.quote(t) for t in line) for line in lines]
    text = [f"# {c}" for c in comments] + [line + " \\" for line in body[:-1]] + body[-1:]
    return "\n".join(text) + "\n"
