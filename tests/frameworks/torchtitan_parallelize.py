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
embedding and the output head, its parameters' elements on this rank (local shards of TP's and
FSDP's DTensors) and the DTensor placements of one attention weight. Run as a subprocess by
tests/test_frameworks.py.

Where torchtitan itself stops, the error it raises is the answer for that rank.

The deviations from a GPU run: torchtitan picks its device type at import
(``torchtitan.tools.utils.device_type``: "cuda" where no accelerator is found), and
``ParallelDims.build_mesh`` passes it to ``init_device_mesh``; here it is "cpu" (the fake
backend serves any device type). As in tests/frameworks/torchtitan_config.py, the package is
entered as a bare namespace and the one Triton kernel module its MoE imports is replaced by one
that refuses to run (parallelizing on meta calls it not). torchtitan's layer-selective
activation checkpointing counts blocks in a module-global counter (``_layer_sac_count``) that a
fresh trainer process starts at 0: it is reset for each rank.
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
import types
import warnings
from typing import Any

from answer import answer

warnings.filterwarnings("ignore")

_spec = importlib.util.find_spec("torchtitan")
assert _spec is not None and _spec.submodule_search_locations is not None, "torchtitan is not installed"
_package = types.ModuleType("torchtitan")
_package.__path__ = list(_spec.submodule_search_locations)
sys.modules["torchtitan"] = _package


def _no_triton(*args: object, **kwargs: object) -> None:
    raise RuntimeError("torchtitan's Triton permutation kernel does not run here (no GPU compiler)")


_kernels = types.ModuleType("torchtitan.models.moe.kernels")
_kernels.generate_permute_indices = _no_triton  # type: ignore[attr-defined]
sys.modules["torchtitan.models.moe.kernels"] = _kernels

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper  # noqa: E402
from torch.distributed.fsdp import FSDPModule  # noqa: E402
from torch.distributed.tensor import DTensor  # noqa: E402
from torch.testing._internal.distributed.fake_pg import FakeStore  # noqa: E402
from torchtitan.config import ConfigManager  # noqa: E402
from torchtitan.distributed import activation_checkpoint, parallel_dims  # noqa: E402
from torchtitan.distributed.parallel_dims import ParallelDims  # noqa: E402
from torchtitan.protocols.train_spec import get_train_spec  # noqa: E402

parallel_dims.device_type = "cpu"  # type: ignore[attr-defined]

MESHES = ("pp", "dp_replicate", "fsdp", "cp", "tp", "ep", "efsdp", "etp")


def _local_elements(module: torch.nn.Module) -> int:
    return sum((p.to_local() if isinstance(p, DTensor) else p).numel() for p in module.parameters())


DATA_PARALLEL = ("dp_replicate", "fsdp", "efsdp")


def _model_parallel_elements(module: torch.nn.Module) -> int:
    """The parameters' elements on this rank before data-parallel sharding: each DTensor's global
    size divided by the mesh dims it is sharded over other than FSDP's and DDP's."""
    total = 0
    for param in module.parameters():
        if not isinstance(param, DTensor):
            total += param.numel()
            continue
        ways = 1
        for dim, placement in zip(param.device_mesh.mesh_dim_names or (), param.placements, strict=True):
            if placement.is_shard() and dim not in DATA_PARALLEL:
                ways *= param.device_mesh.size(param.device_mesh.mesh_dim_names.index(dim))
        total += param.numel() // ways
    return total


def _placements(module: torch.nn.Module, suffix: str) -> list[str] | None:
    """The DTensor mesh dims and placements of the first parameter named ``...suffix``."""
    for name, param in module.named_parameters():
        if name.endswith(suffix):
            if isinstance(param, DTensor):
                names = param.device_mesh.mesh_dim_names or ()
                return [f"{d}:{p}" for d, p in zip(names, param.placements, strict=True)]
            return []
    return None


def _reshards(block: torch.nn.Module) -> bool:
    """Whether FSDP frees the block's gathered weights after its forward (ZeRO-3) rather than
    keeping them for backward (ZeRO-2): each of its parameter groups (a MoE block's experts are
    a group of their own, on the expert mesh) has a post-forward mesh."""
    if not isinstance(block, FSDPModule):
        return False
    groups = block._get_fsdp_state()._fsdp_param_groups
    return bool(groups) and all(group.post_forward_mesh_info is not None for group in groups)


def _part(stage: int, part: torch.nn.Module) -> dict[str, Any]:
    layers = part.get_submodule("layers")
    return {
        "stage": stage,
        "layers": [int(i) for i, _ in layers.named_children()],
        "checkpointed": [int(i) for i, block in layers.named_children() if isinstance(block, CheckpointWrapper)],
        "sharded": [int(i) for i, block in layers.named_children() if isinstance(block, FSDPModule)],
        "resharded": [int(i) for i, block in layers.named_children() if _reshards(block)],
        "embedding": getattr(part, "tok_embeddings", None) is not None,
        "head": getattr(part, "output", None) is not None,
        "local_elements": _local_elements(part),
        "model_parallel_elements": _model_parallel_elements(part),
        "wq": _placements(part, "attention.wq.weight"),
        "experts": _placements(part, "moe.experts.w1"),
    }


def run_rank(text: str, world: int, rank: int) -> dict[str, Any]:
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    activation_checkpoint._layer_sac_count = 0  # type: ignore[attr-defined]
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(text)
    job = ConfigManager().parse_args(["--job.config_file", f.name])
    p = job.parallelism
    dims = ParallelDims(
        dp_replicate=p.data_parallel_replicate_degree,
        dp_shard=p.data_parallel_shard_degree,
        cp=p.context_parallel_degree,
        tp=p.tensor_parallel_degree,
        pp=p.pipeline_parallel_degree,
        ep=p.expert_parallel_degree,
        etp=p.expert_tensor_parallel_degree,
        world_size=world,
    )
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
        stages = [stage.stage_index for stage in _stages(schedule)]
    else:
        parts, stages = [spec.parallelize_fn(model, dims, job)], [0]
    return {"meshes": meshes, "parts": [_part(s, m) for s, m in zip(stages, parts, strict=True)]}


def _stages(schedule: Any) -> list[Any]:
    return list(getattr(schedule, "_stages", None) or [schedule._stage])


def read(case: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for rank in case["ranks"]:
        try:
            out[str(rank)] = run_rank(case["toml"], case["world"], rank)
        except (AssertionError, ValueError, TypeError, KeyError, RuntimeError, NotImplementedError) as err:
            out[str(rank)] = {"error": f"{type(err).__name__}: {err}"}
    return out


def main() -> None:
    answer(read, ())


if __name__ == "__main__":
    main()
