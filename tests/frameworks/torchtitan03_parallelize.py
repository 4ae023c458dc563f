"""Run torchtitan 0.3.0's own parallelize and pipeline functions on exported overrides.

Usage: ``python torchtitan03_parallelize.py <folder>``, the folder of torchtitan 0.3.0 that
tests/frameworks/torchtitan03_config.py reads (importing it first puts the folder first on
sys.path and stubs the GPU kernel modules, as described there).

Reads JSON on stdin: a list of {"argv": the export's flags, "world": GPUs, "ranks": [ranks to
check], "spmd_backend": null or a backend to add as ``--parallelism.spmd_backend``}. For each rank,
as 0.3.0's ``Trainer.__init__`` does (torchtitan/trainer.py): torch's fake process-group backend
stands in for ``world`` ranks; ``ConfigManager().parse_args`` reads the flags;
``ParallelDims.from_config(...).build_mesh()`` builds the meshes; ``set_spmd_backend`` selects the
backend; the config function's model is built on the meta device after ``update_from_config``;
and its ``pipelining_fn`` (pp > 1: ``pipeline_llm``) or ``parallelize_fn`` runs on it. Reports
what tests/frameworks/torchtitan_parallelize.py reports for 0.2.2 (0.3.0's module names:
``lm_head``, the fused ``qkv_linear.wqkv`` and ``inner_experts.w1_EFD``), or the error torchtitan
or torch raises for that rank.

As for 0.2.2, torchtitan's device type (``parallel_dims.device_type``, "cuda" where no accelerator
is found) is "cpu" here.
"""

from __future__ import annotations

from typing import Any

import torchtitan03_config  # first: puts 0.3.0 first on the path and stubs its GPU kernels
from answer import answer

parse = torchtitan03_config.parse

import torch  # noqa: E402
from parallelized import fake_rank, part_report, per_rank, stage_indices  # noqa: E402
from torchtitan.distributed import parallel_dims  # noqa: E402
from torchtitan.distributed import utils as dist_utils  # noqa: E402
from torchtitan.distributed.parallel_dims import ParallelDims  # noqa: E402

parallel_dims.device_type = "cpu"  # type: ignore[attr-defined]

MESHES = ("pp", "dp_replicate", "dp_shard", "fsdp", "cp", "tp", "ep", "efsdp")
DATA_PARALLEL = ("dp_replicate", "dp_shard", "fsdp", "efsdp", "dp")


def _meshes(dims: ParallelDims) -> dict[str, list[int]]:
    """The ranks of this rank's group in each mesh dimension of more than one rank (and efsdp,
    which torchtitan keeps whenever ep > 1)."""
    out: dict[str, list[int]] = {}
    for name in MESHES:
        try:
            mesh = dims.get_optional_mesh(name)
        except ValueError:  # not a mesh of this backend (fsdp: partial_dtensor; dp_shard: the others)
            continue
        if mesh is not None and (mesh.size() > 1 or name == "efsdp"):
            out[name] = [int(r) for r in mesh.mesh.flatten()]
    return out


def _part(stage: int, part: torch.nn.Module) -> dict[str, Any]:
    wq = ("attention.wq.weight", "attention.qkv_linear.wqkv.weight")
    return part_report(stage, part, "lm_head", wq, ("experts.w1", "inner_experts.w1_EFD"), DATA_PARALLEL)


def run_rank(argv: list[str], world: int, rank: int) -> dict[str, Any]:
    fake_rank(rank, world)
    job = parse(argv)
    dims = ParallelDims.from_config(job.parallelism, world)
    dims.build_mesh()
    dist_utils.set_spmd_backend(job.parallelism.spmd_backend)
    spec = job.model_spec
    config = spec.model
    config.update_from_config(config=job)
    with torch.device("meta"):
        model = config.build()
    common = dict(
        parallel_dims=dims, training=job.training, parallelism=job.parallelism, compile_config=job.compile,
        ac_config=job.activation_checkpoint, dump_folder=job.dump_folder,
    )  # fmt: skip
    if dims.pp_enabled:
        assert spec.pipelining_fn is not None, f"{spec.name} has no pipelining function"
        schedule, parts, _, _ = spec.pipelining_fn(
            model, **common, device=torch.device("meta"), model_config=config, parallelize_fn=spec.parallelize_fn,
            loss_fn=lambda out, target: out.sum(),
        )  # fmt: skip
        stages = stage_indices(schedule)
    else:
        parts, stages = [spec.parallelize_fn(model, **common)], [0]
    return {"meshes": _meshes(dims), "parts": [_part(s, m) for s, m in zip(stages, parts, strict=True)]}


def with_backend(argv: list[str], backend: str | None) -> list[str]:
    """``argv`` with its ``--parallelism.spmd_backend`` value replaced by ``backend``."""
    if backend is None:
        return argv
    at = argv.index("--parallelism.spmd_backend") + 1
    return [*argv[:at], backend, *argv[at + 1 :]]


def read(case: dict[str, Any]) -> dict[str, Any]:
    argv = with_backend(case["argv"], case.get("spmd_backend"))
    return per_rank(case["ranks"], lambda rank: run_rank(argv, case["world"], rank))


def main() -> None:
    answer(read, ())


if __name__ == "__main__":
    main()
