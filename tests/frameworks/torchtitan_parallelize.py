"""Run torchtitan 0.2.2's own parallelize and pipeline functions on an exported job file.

Reads JSON on stdin: a list of {"toml": text, "world": GPUs, "ranks": [ranks to check]}. For each
rank, as torchtitan's trainer does on that rank (torchtitan/train.py ``Trainer.__init__``):
torch's fake process-group backend (``torch.testing._internal.distributed.fake_pg``: collectives
return at once, no data moves) stands in for ``world`` ranks, the job file is parsed with
torchtitan's ``ConfigManager``, ``ParallelDims(...).build_mesh()`` builds its device meshes, the
model the job file names is built from torchtitan's registry on the meta device, and the train
spec's ``pipelining_fn`` (pp > 1: ``pipeline_llm``, which splits the model into the rank's stages
and calls ``parallelize_fn`` on each) or ``parallelize_fn`` (TP, CP, activation checkpointing,
FSDP/DDP, EP) runs on it. Reports, for each rank: the ranks of each of its one-dimensional
meshes, and for each model part it holds: its pipeline stage index, its decoder layers, which of
them are wrapped for activation checkpointing (``CheckpointWrapper``) and for FSDP
(``FSDPModule``) and which of those free their gathered weights after forward, whether it holds the
embedding and the output head, its parameters' elements before data-parallel sharding and the
DTensor placements of one attention and one expert weight (tests/frameworks/parallelized.py, which
the 0.3.0 script shares). Run as a subprocess by tests/test_frameworks.py.

Where torchtitan itself stops, the error it raises is the answer for that rank.

The deviations from a GPU run: torchtitan picks its device type at import
(``torchtitan.tools.utils.device_type``: "cuda" where no accelerator is found), and
``ParallelDims.build_mesh`` passes it to ``init_device_mesh``; here it is "cpu" (the fake
backend serves any device type). Importing tests/frameworks/torchtitan_config.py enters the
package as a bare namespace and replaces the one Triton kernel module its MoE imports by one that
refuses to run (parallelizing on meta calls it not); its ``parse`` and ``parallel_dims`` read the
job file and build ParallelDims as the config check does. torchtitan's layer-selective
activation checkpointing counts blocks in a module-global counter (``_layer_sac_count``) that a
fresh trainer process starts at 0: it is reset for each rank.
"""

from __future__ import annotations

from typing import Any

import torch
import torchtitan_config  # before any torchtitan module: enters it as a bare namespace, stubs its Triton kernel
from answer import answer
from parallelized import fake_rank, part_report, per_rank, stage_indices
from torchtitan.distributed import activation_checkpoint, parallel_dims
from torchtitan.protocols.train_spec import get_train_spec

parallel_dims.device_type = "cpu"  # type: ignore[attr-defined]

MESHES = ("pp", "dp_replicate", "fsdp", "cp", "tp", "ep", "efsdp", "etp")
DATA_PARALLEL = ("dp_replicate", "fsdp", "efsdp")


def _part(stage: int, part: torch.nn.Module) -> dict[str, Any]:
    return part_report(stage, part, "output", ("attention.wq.weight",), ("moe.experts.w1",), DATA_PARALLEL)


def run_rank(text: str, world: int, rank: int) -> dict[str, Any]:
    fake_rank(rank, world)
    activation_checkpoint._layer_sac_count = 0  # type: ignore[attr-defined]
    job = torchtitan_config.parse(text)
    dims = torchtitan_config.parallel_dims(job, world)
    dims.build_mesh()
    meshes = {name: [int(r) for r in dims.get_mesh(name).mesh.flatten()] for name in MESHES
              if dims.get_optional_mesh(name) is not None}  # fmt: skip
    spec = get_train_spec(job.model.name)
    args = spec.model_args[job.model.flavor]
    args.update_from_config(job)
    with torch.device("meta"):
        model = spec.model_cls(args)
    if dims.pp_enabled:
        assert spec.pipelining_fn is not None, f"{job.model.name} has no pipelining function"
        schedule, parts, _, _ = spec.pipelining_fn(
            model, dims, job, torch.device("meta"), args, spec.parallelize_fn, lambda out, target: out.sum()
        )
        stages = stage_indices(schedule)
    else:
        parts, stages = [spec.parallelize_fn(model, dims, job)], [0]
    return {"meshes": meshes, "parts": [_part(s, m) for s, m in zip(stages, parts, strict=True)]}


def read(case: dict[str, Any]) -> dict[str, Any]:
    return per_rank(case["ranks"], lambda rank: run_rank(case["toml"], case["world"], rank))


def main() -> None:
    answer(read, ())


if __name__ == "__main__":
    main()
