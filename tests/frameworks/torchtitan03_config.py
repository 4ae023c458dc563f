"""Parse torchtitan 0.3 command-line overrides with torchtitan 0.3.0's own ConfigManager.

Usage: ``python torchtitan03_config.py <folder>``, where <folder> holds torchtitan 0.3.0 and the
two pure-Python packages it imports that the `frameworks` extra does not pin for 0.2.2
(spmd_types, torch_checkpointing), as ``pip install --no-deps --target <folder>`` leaves them
(tests/test_frameworks.py's session fixture). The folder goes first on sys.path, so that 0.3.0 is
read, not the installed 0.2.2.

Reads JSON on stdin: a list of {"argv": [...], "world": GPUs}. For each, calls
``torchtitan.config.ConfigManager().parse_args(argv)`` (which imports the ``--module``'s
config_registry, calls the ``--config`` function and applies every other argument as a tyro
override of the Trainer.Config it returns, refusing unknown flags), builds
``torchtitan.distributed.ParallelDims.from_config`` (its ``_validate`` runs on construction) and
``efsdp`` as 0.3's build_mesh computes it (dp_shard*cp*tp // ep), and builds the model the config
function names from its ``model_spec`` on the meta device, reporting its parameter count. A
config function whose fp8/MXFP8 converters refuse to build on this machine (torchao absent, or
no SM89+ GPU) reports that error: the test expects it for those functions.

As tests/frameworks/torchtitan_config.py does for 0.2.2, the package is entered as a bare
namespace (its ``__init__`` imports Triton-backed kernels); the modules that import Triton at
import time and are only GPU kernels (minimal_async_ep's copy kernels, the fused MLA and SwiGLU
overrides) are replaced by modules whose functions refuse to run; reading a config and building
on meta calls none of them.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import sys
import types
import warnings
from typing import Any, NoReturn

from answer import answer

warnings.filterwarnings("ignore")
sys.path.insert(0, sys.argv[1])

_spec = importlib.util.find_spec("torchtitan")
assert _spec is not None and _spec.submodule_search_locations is not None, "torchtitan 0.3 is not in the folder"
assert all(path.startswith(sys.argv[1]) for path in _spec.submodule_search_locations), "torchtitan 0.3 not first"
_package = types.ModuleType("torchtitan")
_package.__path__ = list(_spec.submodule_search_locations)
sys.modules["torchtitan"] = _package

GPU_KERNEL_MODULES = (
    "torchtitan.distributed.minimal_async_ep.kernels",
    "torchtitan.overrides.fused_mla",
    "torchtitan.overrides.fused_swiglu",
)


def _no_gpu(*args: object, **kwargs: object) -> NoReturn:
    raise RuntimeError("a torchtitan GPU kernel does not run here (no Triton)")


class _Kernels(types.ModuleType):
    """A GPU kernel module whose every name is a function that refuses to run."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _no_gpu


for _name in GPU_KERNEL_MODULES:
    sys.modules[_name] = _Kernels(_name)

import torch  # noqa: E402
from torchtitan.config import ConfigManager  # noqa: E402
from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC  # noqa: E402
from torchtitan.distributed.parallel_dims import ParallelDims  # noqa: E402


def _checkpoint(config: object) -> str:
    if config is None:
        return "none"
    if isinstance(config, FullAC.Config):
        return "full"
    if isinstance(config, SelectiveAC.Config):
        return "selective"
    return type(config).__qualname__


def parse(argv: list[str]) -> Any:
    """ConfigManager().parse_args, with tyro's message (it prints it and exits) as the error."""
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            return ConfigManager().parse_args(argv)
    except SystemExit as exit:
        raise ValueError(" ".join(said.getvalue().split())[-600:]) from exit


def read(argv: list[str], world: int) -> dict[str, Any]:
    job = parse(argv)
    p = job.parallelism
    dims = ParallelDims.from_config(p, world)
    with torch.device("meta"):
        model = job.model_spec.model.build()
    return {
        "model": [job.model_spec.name, job.model_spec.flavor],
        "dims": [dims.dp_replicate, dims.dp_shard, dims.cp, dims.tp, dims.pp, dims.ep],
        "efsdp": dims.dp_shard * dims.cp * dims.tp // dims.ep,
        "training": [job.training.local_batch_size, job.training.global_batch_size, job.training.seq_len],
        "pipeline": [p.pipeline_parallel_schedule, p.pipeline_parallel_microbatch_size, p.module_fqns_per_model_part,
                     p.pipeline_parallel_layers_per_stage],
        "sequence_parallel": p.enable_sequence_parallel,
        "spmd_backend": p.spmd_backend,
        "checkpoint": _checkpoint(job.activation_checkpoint),
        "compile": [job.compile.enable, job.compile.enable_async_tensor_parallel],
        "fsdp_reshard_after_forward": p.fsdp_reshard_after_forward,
        "params": sum(t.numel() for t in model.parameters()),
    }  # fmt: skip


def main() -> None:
    answer(lambda case: read(case["argv"], case["world"]), (AssertionError, ValueError, TypeError, ImportError))


if __name__ == "__main__":
    main()
