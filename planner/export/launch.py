"""The command line that starts an exported job on the plan's nodes (``plan export --launcher``).

``torchrun``: one ``torchrun`` per node, all meeting at a c10d rendezvous on the first node
(torch/distributed/run.py: ``--nnodes``, ``--nproc-per-node``, ``--rdzv-backend``,
``--rdzv-endpoint``; then the training script or ``-m module`` and its arguments).
``slurm``: an sbatch script asking for the nodes, one task per node and the GPUs of each
(``#SBATCH --nodes``, ``--ntasks-per-node``, ``--gpus-per-node``), which srun-s that same
torchrun on every node with the first node of the allocation as the rendezvous host.

Entry points, each the framework's own: Megatron-LM ``pretrain_gpt.py`` (``pretrain_mamba.py``
for a hybrid Mamba-2 model) with the exported arguments; torchtitan ``-m torchtitan.train`` with
0.3's overrides or 0.2's ``--job.config_file``; DeepSpeed the user's training script (``$TRAIN_SCRIPT``: DeepSpeed ships
no trainer) with ``--deepspeed --deepspeed_config <file>``, the flags
``deepspeed.add_config_arguments`` declares (deepspeed/__init__.py _add_core_arguments).
The environment is only what a framework asks for: Megatron's ``CUDA_DEVICE_MAX_CONNECTIONS=1``
(``planner.export.megatron.megatron_environment``).

Where one NVLink domain spans several hosts (an NVL72 rack of 18 four-GPU compute trays), torchrun
runs on every host (``ClusterSpec.gpus_per_host``), and the order of the hosts matters: the plan
puts consecutive ranks in one domain or 64-GPU segment (``ClusterSpec.fast_domain_gpus``), so a TP
or EP group of 64 ranks must not straddle racks. c10d's rendezvous numbers hosts in the order they
join, so there torchrun runs the static rendezvous with ``--node-rank`` (the host's place: Slurm's
``$SLURM_NODEID``, expanded on each host by ``bash -c``), ``--master-addr`` and ``--master-port``,
and the sbatch script asks the block topology for segments of that many hosts (``#SBATCH
--segment``; Slurm's topology/block plugin, one block per NVL72 rack: CoreWeave's Slurm docs,
https://docs.coreweave.com/docs/products/sunk/block-scheduling-in-slurm, and NVIDIA's 'Achieving
Peak System and Workload Efficiency on NVIDIA GB200 NVL72 with Slurm Block Scheduling', segment 16
for large jobs). Within the allocation Slurm numbers nodes in its node order, which keeps a
segment's hosts together where node names number the trays rack by rack (the script says so).
"""

from __future__ import annotations

import shlex
from pathlib import Path

from planner.errors import PlannerError
from planner.export.megatron import megatron_args, megatron_environment
from planner.export.torchtitan03 import torchtitan_args
from planner.schemas.hardware import ClusterSpec
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


def segment_hosts(cluster: ClusterSpec, num_gpus: int) -> int | None:
    """Hosts of one NVLink domain (or the job's segment of one) whose ranks the plan keeps
    together, where that domain spans several hosts; None where a host is the whole domain (a DGX:
    any host order prices the same)."""
    host, domain = cluster.gpus_per_host, cluster.fast_domain_gpus
    if domain <= host:
        return None
    return min(domain, num_gpus) // host


def check_launch(fmt: str, launcher: str | None, out: Path | None) -> None:
    """Refuse, before any search, a launcher without the file it would name."""
    if launcher is not None and fmt in FILE_FORMATS and out is None:
        raise PlannerError(f"--launcher with --format {fmt} needs --out FILE: the launch command names the file")


def entry_point(
    fmt: str,
    model: ModelSpec,
    job: JobSpec,
    config: ParallelConfig,
    out: Path | None,
    cluster: ClusterSpec | None = None,
) -> tuple[list[str], list[str]]:
    """What torchrun runs (a script, or ``-m`` and a module) and its arguments on ``cluster``."""
    check_launch(fmt, "torchrun", out)
    if fmt == "megatron":  # a hybrid Mamba-2 model trains under pretrain_mamba.py (its mamba_builder)
        script = "pretrain_mamba.py" if model.is_hybrid else "pretrain_gpt.py"
        return [script], megatron_args(model, job, config, cluster)
    if fmt == "torchtitan":
        return ["-m", "torchtitan.train"], torchtitan_args(model, job, config)
    if fmt == "torchtitan-0.2":
        return ["-m", "torchtitan.train"], [FILE_FORMATS[fmt], str(out)]
    if fmt == "deepspeed":
        return ["$TRAIN_SCRIPT"], ["--deepspeed", FILE_FORMATS[fmt], str(out)]
    raise PlannerError(f"--format '{fmt}' has no launch command")


def environment(fmt: str, config: ParallelConfig, architecture: str | None = None) -> dict[str, str]:
    """The variables the framework asks for on every rank of GPUs of ``architecture``."""
    return megatron_environment(config, architecture) if fmt == "megatron" else {}


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


def torchrun_flags(nodes: int, per_node: int, node_rank: str | None) -> list[str]:
    """torchrun's own flags: c10d's rendezvous on ``$MASTER_ADDR`` where host order does not
    matter, else the static rendezvous with the host's place ``node_rank`` (a shell variable)."""
    size = ["--nnodes", str(nodes), "--nproc-per-node", str(per_node)]
    if node_rank is None:
        return [*size, "--rdzv-backend", "c10d", "--rdzv-endpoint", f"$MASTER_ADDR:{RENDEZVOUS_PORT}"]
    return [*size, "--node-rank", node_rank, "--master-addr", "$MASTER_ADDR", "--master-port", str(RENDEZVOUS_PORT)]


def command_lines(torchrun: list[str], entry: list[str], args: list[str], per_host_shell: bool = False) -> list[str]:
    """``torchrun`` and its flags, then the entry point and its arguments, one flag per line,
    backslash-continued. ``per_host_shell``: torchrun inside ``bash -c '...' torchrun``, so that
    the shell variables of its flags expand on each host (srun starts it there), the entry point
    and its arguments passed through as ``"$@"``."""
    if per_host_shell:
        inner = " ".join(["exec torchrun", *(_quote(t) for t in torchrun), '"$@"'])
        head = [f"bash -c {shlex.quote(inner)} torchrun"]
    else:
        head = [" ".join(_quote(t) for t in group) for group in [["torchrun"], *_lines(torchrun)]]
    body = head + [" ".join(_quote(t) for t in group) for group in [entry, *_lines(args)]]
    return [line + " \\" for line in body[:-1]] + body[-1:]


def launch_text(
    fmt: str,
    launcher: str,
    model: ModelSpec,
    job: JobSpec,
    config: ParallelConfig,
    cluster: ClusterSpec,
    out: Path | None,
) -> str:
    """The launch command (torchrun) or sbatch script (slurm) for the exported settings on the
    cluster's hosts (``ClusterSpec.gpus_per_host``), in the plan's host order where it matters
    (``segment_hosts``)."""
    if launcher not in LAUNCHERS:
        raise PlannerError(f"--launcher '{launcher}' is not one of {', '.join(LAUNCHERS)}")
    nodes, per_node = node_split(config.num_gpus, cluster.gpus_per_host)
    segment = segment_hosts(cluster, config.num_gpus) if nodes > 1 else None
    entry, args = entry_point(fmt, model, job, config, out, cluster)
    exports = [f"export {k}={v}" for k, v in environment(fmt, config, cluster.gpu.architecture).items()]
    order = (
        None
        if segment is None
        else f"# host order matters: the plan keeps ranks {segment * per_node} at a time in one NVLink domain "
        f"({segment} hosts of {per_node} GPUs)"
    )
    if launcher == "torchrun":
        if order is not None:
            head = [
                order,
                f"# run on each of the {nodes} hosts with NODE_RANK its place, 0-{nodes - 1}, hosts {segment} at a "
                "time from one rack; MASTER_ADDR the address of NODE_RANK 0",
            ]
        else:
            head = [f"# run on each of the {nodes} node(s), MASTER_ADDR set to the first node's address"]
        if fmt == "deepspeed":
            head.append("# TRAIN_SCRIPT: your training script, which passes its args to deepspeed.initialize")
        flags = torchrun_flags(nodes, per_node, None if order is None else "$NODE_RANK")
        return "\n".join([*head, *exports, *command_lines(flags, entry, args)]) + "\n"
    script = [
        "#!/bin/bash",
        f"#SBATCH --nodes={nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --gpus-per-node={per_node}",
    ]
    if segment is not None and order is not None:
        whole = nodes % segment == 0
        if whole:
            script.append(f"#SBATCH --segment={segment}")
        script += [
            order
            + (
                f"; --segment asks Slurm's block topology plugin for {segment} of them per rack (drop it where the "
                "cluster has no block topology)"
                if whole
                else f"; {nodes} hosts are no whole number of such segments, so Slurm is not asked for them"
            ),
            "# torchrun numbers the hosts by $SLURM_NODEID, Slurm's node order: a segment's hosts are consecutive "
            "in it where node names number the trays rack by rack",
        ]
    script += ['export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)', *exports]
    if fmt == "deepspeed":
        script.append('export TRAIN_SCRIPT="${TRAIN_SCRIPT:?set TRAIN_SCRIPT to your DeepSpeed training script}"')
    flags = torchrun_flags(nodes, per_node, None if order is None else "$SLURM_NODEID")
    command = command_lines(flags, entry, args, per_host_shell=order is not None)
    command[0] = "srun " + command[0]
    return "\n".join([*script, *command]) + "\n"
