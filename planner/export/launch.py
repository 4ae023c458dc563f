"""The command line that starts an exported job on the plan's nodes (``plan export --launcher``).

``torchrun``: one ``torchrun`` per node, all meeting at a c10d rendezvous on the first node
(torch/distributed/run.py: ``--nnodes``, ``--nproc-per-node``, ``--rdzv-backend``,
``--rdzv-endpoint``; then the training script or ``-m module`` and its arguments).
``slurm``: an sbatch script asking for the nodes, one task per node and the GPUs of each
(``#SBATCH --nodes``, ``--ntasks-per-node``, ``--gpus-per-node``), which srun-s that same
torchrun on every node with the first node of the allocation as the rendezvous host.

Entry points, each the framework's own: Megatron-LM ``pretrain_gpt.py`` with the exported
arguments; torchtitan ``-m torchtitan.train`` with 0.3's overrides or 0.2's
``--job.config_file``; DeepSpeed the user's training script (``$TRAIN_SCRIPT``: DeepSpeed ships
no trainer) with ``--deepspeed --deepspeed_config <file>``, the flags
``deepspeed.add_config_arguments`` declares (deepspeed/__init__.py _add_core_arguments).
The environment is only what a framework asks for: Megatron's ``CUDA_DEVICE_MAX_CONNECTIONS=1``
(``planner.export.megatron.megatron_environment``).
"""

from __future__ import annotations

import shlex
from pathlib import Path

from planner.errors import PlannerError
from planner.export.megatron import megatron_args, megatron_environment
from planner.export.torchtitan03 import torchtitan_args
from planner.schemas.job import JobSpec
from planner.schemas.model import ModelSpec
from planner.schemas.parallel import ParallelConfig

LAUNCHERS = ("torchrun", "slurm")
"""``plan export --launcher`` choices."""

RENDEZVOUS_PORT = 29500
"""torchrun's default master port (torch/distributed/run.py ``--master-port`` default 29500)."""

FILE_FORMATS = {"torchtitan-0.2": "--job.config_file", "deepspeed": "--deepspeed_config"}
"""Targets whose settings are a file the launch command names, with the flag that names it."""


def node_split(num_gpus: int, gpus_per_node: int) -> tuple[int, int]:
    """(nodes, processes per node) for a mesh of ``num_gpus``: torchrun starts the same number
    of processes on every node, so the mesh fills whole nodes or part of one."""
    if num_gpus <= gpus_per_node:
        return 1, num_gpus
    if num_gpus % gpus_per_node:
        raise PlannerError(
            f"--launcher: {num_gpus} GPUs do not fill nodes of {gpus_per_node}; torchrun runs as many processes "
            "on every node"
        )
    return num_gpus // gpus_per_node, gpus_per_node


def check_launch(fmt: str, launcher: str | None, out: Path | None) -> None:
    """Refuse, before any search, a launcher without the file it would name."""
    if launcher is not None and fmt in FILE_FORMATS and out is None:
        raise PlannerError(f"--launcher with --format {fmt} needs --out FILE: the launch command names the file")


def entry_point(
    fmt: str, model: ModelSpec, job: JobSpec, config: ParallelConfig, out: Path | None
) -> tuple[list[str], list[str]]:
    """What torchrun runs (a script, or ``-m`` and a module) and its arguments."""
    check_launch(fmt, "torchrun", out)
    if fmt == "megatron":
        return ["pretrain_gpt.py"], megatron_args(model, job, config)
    if fmt == "torchtitan":
        return ["-m", "torchtitan.train"], torchtitan_args(model, job, config)
    if fmt == "torchtitan-0.2":
        return ["-m", "torchtitan.train"], [FILE_FORMATS[fmt], str(out)]
    if fmt == "deepspeed":
        return ["$TRAIN_SCRIPT"], ["--deepspeed", FILE_FORMATS[fmt], str(out)]
    raise PlannerError(f"--format '{fmt}' has no launch command")


def environment(fmt: str, config: ParallelConfig) -> dict[str, str]:
    """The variables the framework asks for on every rank."""
    return megatron_environment(config) if fmt == "megatron" else {}


def _quote(token: str) -> str:
    """Shell-quoted, except the shell variables the command means to expand."""
    if token.startswith("$"):
        return f'"{token}"'
    return shlex.quote(token)


def _lines(tokens: list[str]) -> list[list[str]]:
    """Flags with their values, one group per flag (a tyro subcommand, ``section:name``, alone)."""
    lines: list[list[str]] = []
    for token in tokens:
        if token.startswith("--") or (":" in token and not token.startswith("$")) or not lines:
            lines.append([token])
        else:
            lines[-1].append(token)
    return lines


def command_lines(nodes: int, per_node: int, entry: list[str], args: list[str]) -> list[str]:
    """``torchrun`` with the rendezvous on ``$MASTER_ADDR``, then the entry point and its
    arguments, one flag per line, backslash-continued."""
    torchrun = [
        "--nnodes", str(nodes), "--nproc-per-node", str(per_node),
        "--rdzv-backend", "c10d", "--rdzv-endpoint", f"$MASTER_ADDR:{RENDEZVOUS_PORT}",
    ]  # fmt: skip
    groups = [["torchrun"], *_lines(torchrun), entry, *_lines(args)]
    body = [" ".join(_quote(t) for t in group) for group in groups]
    return [line + " \\" for line in body[:-1]] + body[-1:]


def launch_text(
    fmt: str,
    launcher: str,
    model: ModelSpec,
    job: JobSpec,
    config: ParallelConfig,
    gpus_per_node: int,
    out: Path | None,
) -> str:
    """The launch command (torchrun) or sbatch script (slurm) for the exported settings."""
    if launcher not in LAUNCHERS:
        raise PlannerError(f"--launcher '{launcher}' is not one of {', '.join(LAUNCHERS)}")
    nodes, per_node = node_split(config.num_gpus, gpus_per_node)
    command = command_lines(nodes, per_node, *entry_point(fmt, model, job, config, out))
    exports = [f"export {k}={v}" for k, v in environment(fmt, config).items()]
    if launcher == "torchrun":
        head = [f"# run on each of the {nodes} node(s), MASTER_ADDR set to the first node's address"]
        if fmt == "deepspeed":
            head.append("# TRAIN_SCRIPT: your training script, which passes its args to deepspeed.initialize")
        return "\n".join([*head, *exports, *command]) + "\n"
    script = [
        "#!/bin/bash",
        f"#SBATCH --nodes={nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --gpus-per-node={per_node}",
        'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        *exports,
    ]
    if fmt == "deepspeed":
        script.append('export TRAIN_SCRIPT="${TRAIN_SCRIPT:?set TRAIN_SCRIPT to your DeepSpeed training script}"')
    command[0] = "srun " + command[0]
    return "\n".join([*script, *command]) + "\n"
