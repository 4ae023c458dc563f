"""Launch settings for a planned mesh in the training frameworks' own terms (ARCHITECTURE section 1).

One module per target, each a pure function of (model, job, mesh) that returns the target's
settings, and refuses, with a one-line PlannerError naming the knob, what the target cannot
express instead of exporting something that would train differently from the plan:

- ``megatron``: Megatron-LM command-line arguments (``megatron_args`` -> argv list);
- ``torchtitan``: torchtitan 0.3's ``--module``/``--config`` and ``--section.key`` overrides
  (``torchtitan_args`` -> argv list);
- ``torchtitan-0.2``: a TOML job file's [training], [parallelism], [activation_checkpoint]
  sections for torchtitan 0.2.x (``torchtitan_config`` -> dict, ``torchtitan_toml`` -> text);
- ``deepspeed``: a DeepSpeed JSON config (``deepspeed_config`` -> dict).

``render`` returns the text with the target's caveats; ``export`` just the text. The job passed
is the job the mesh runs: with ``--max-batch-growth`` that is the estimate's ``config.job``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from planner.errors import PlannerError
from planner.export.common import FORMATS, refuse
from planner.export.deepspeed import deepspeed_config, deepspeed_notes
from planner.export.megatron import megatron_args, megatron_notes, megatron_text
from planner.export.torchtitan import check_mx, torchtitan_config, torchtitan_notes, torchtitan_toml
from planner.export.torchtitan03 import torchtitan_args, torchtitan_args_notes, torchtitan_args_text
from planner.schemas.hardware import ClusterSpec
from planner.schemas.job import JobSpec
from planner.schemas.model import ModelSpec
from planner.schemas.parallel import ParallelConfig


@dataclass(frozen=True)
class Exported:
    """A target's settings as text, and the caveats the text carries as comments (Megatron,
    TOML) or cannot carry (JSON has no comments; the CLI prints them on stderr)."""

    fmt: str
    text: str
    notes: tuple[str, ...]


def render(
    fmt: str,
    model: ModelSpec,
    job: JobSpec,
    config: ParallelConfig,
    header: str | None = None,
    cluster: ClusterSpec | None = None,
) -> Exported:
    """The settings of ``config`` for target ``fmt``, with an optional one-line header comment
    (ignored for JSON, which has no comments); ``cluster``, where given, is where the mesh runs
    (Megatron's TP overlap only for a TP group inside one NVLink domain). A hybrid Mamba-2 model goes
    to Megatron-LM alone (``megatron._hybrid_args``), as does LatentMoE: torchtitan and DeepSpeed ship no
    Mamba-2 layer and no latent experts."""
    if model.moe_latent_size and fmt != "megatron":
        raise refuse(
            fmt,
            f"{model.name}'s LatentMoE (moe_latent_size {model.moe_latent_size})",
            "torchtitan and DeepSpeed have no latent experts; Megatron-LM has (--format megatron)",
            mesh_bound=False,
        )
    if model.is_hybrid and fmt != "megatron":
        raise refuse(
            fmt,
            f"{model.name}'s hybrid Mamba-2 layers",
            "torchtitan and DeepSpeed have no Mamba-2 layer",
            mesh_bound=False,
        )
    if fmt in ("torchtitan", "torchtitan-0.2"):
        check_mx(fmt, job, cluster)
    if fmt == "megatron":
        notes = megatron_notes(model, job, config, cluster)
        return Exported(fmt, megatron_text(model, job, config, header, cluster), tuple(notes))
    if fmt == "torchtitan":
        notes = torchtitan_args_notes(model, job, config)
        return Exported(fmt, torchtitan_args_text(model, job, config, header), tuple(notes))
    if fmt == "torchtitan-0.2":
        notes = torchtitan_notes(model, job, config)
        return Exported(fmt, torchtitan_toml(model, job, config, header), tuple(notes))
    if fmt == "deepspeed":
        notes = deepspeed_notes(model, job, config)
        return Exported(fmt, json.dumps(deepspeed_config(model, job, config), indent=2) + "\n", tuple(notes))
    raise PlannerError(f"--format '{fmt}' is not one of {', '.join(FORMATS)}")


def export(
    fmt: str,
    model: ModelSpec,
    job: JobSpec,
    config: ParallelConfig,
    header: str | None = None,
    cluster: ClusterSpec | None = None,
) -> str:
    """The settings of ``config`` for target ``fmt`` as text (argument lines, TOML or JSON)."""
    return render(fmt, model, job, config, header, cluster).text


__all__ = [
    "FORMATS",
    "Exported",
    "deepspeed_config",
    "export",
    "megatron_args",
    "render",
    "torchtitan_args",
    "torchtitan_config",
    "torchtitan_toml",
]
