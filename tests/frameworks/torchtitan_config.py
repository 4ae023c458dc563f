"""Read torchtitan job files with torchtitan's own ConfigManager; check its ParallelDims.

Reads JSON on stdin: a list of {"toml": text, "world": GPUs}. For each, writes the text to a
temporary file, parses it as ``--job.config_file`` with torchtitan 0.2.2's
``torchtitan.config.ConfigManager`` (which refuses any key its JobConfig does not have), builds
``torchtitan.distributed.ParallelDims`` from the parsed degrees (its ``_validate`` runs on
construction, with dp_shard -1 resolved as torchtitan does) and prints the fields the test
compares, or the error. Run as a subprocess by tests/test_frameworks.py.

torchtitan's package ``__init__`` imports its quantisation and MoE kernels, which import Triton
(a GPU compiler of about 1 GB, absent from CPU torch); reading a config needs neither, so the
package is entered as a bare namespace and only ``torchtitan.config`` and
``torchtitan.distributed.parallel_dims`` are imported.

It also builds the model the job file names, from torchtitan's own registry
(``torchtitan.protocols.train_spec.get_train_spec(name).model_args[flavor]``, ``model_cls``), on
the meta device, and reports its parameter count. The model modules import one Triton kernel
(``torchtitan.models.moe.kernels.generate_permute_indices``, the GPU index permutation of
grouped-GEMM MoE); building on meta never calls it, so that module alone is replaced by one that
refuses to run. torchtitan 0.2.2's deepseek_v3 flavors do not build in that release
(``DeepSeekV3ModelArgs`` has no ``moe_impl``, which its TransformerBlock reads): their count is
reported as missing with the error.
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
import types
import warnings
from dataclasses import asdict
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
from torchtitan.config import ConfigManager  # noqa: E402
from torchtitan.distributed.parallel_dims import ParallelDims  # noqa: E402
from torchtitan.protocols.train_spec import get_train_spec  # noqa: E402


def built_parameters(name: str, flavor: str) -> dict:
    """The parameter count of torchtitan's model ``name`` at ``flavor``, built on the meta device."""
    spec = get_train_spec(name)
    try:
        with torch.device("meta"):
            model = spec.model_cls(spec.model_args[flavor])
    except AttributeError as err:  # torchtitan 0.2.2's deepseek_v3 (see the module docstring)
        return {"params": None, "build_error": str(err)}
    return {"params": sum(p.numel() for p in model.parameters())}


def parse(text: str) -> Any:
    """The job file ``text`` as torchtitan's ConfigManager reads it (``--job.config_file``)."""
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(text)
    return ConfigManager().parse_args(["--job.config_file", f.name])


def parallel_dims(job: Any, world: int) -> ParallelDims:
    """torchtitan's ParallelDims of a parsed job on ``world`` ranks, as its trainer builds them."""
    p = job.parallelism
    return ParallelDims(
        dp_replicate=p.data_parallel_replicate_degree,
        dp_shard=p.data_parallel_shard_degree,
        cp=p.context_parallel_degree,
        tp=p.tensor_parallel_degree,
        pp=p.pipeline_parallel_degree,
        ep=p.expert_parallel_degree,
        etp=p.expert_tensor_parallel_degree,
        world_size=world,
    )


def read(text: str, world: int) -> dict:
    job = parse(text)
    p = job.parallelism
    dims = parallel_dims(job, world)
    return {
        "model": [job.model.name, job.model.flavor, list(job.model.converters)],
        "dims": [dims.dp_replicate, dims.dp_shard, dims.cp, dims.tp, dims.pp, dims.ep, dims.etp],
        "training": [job.training.local_batch_size, job.training.global_batch_size, job.training.seq_len],
        "pipeline": [p.pipeline_parallel_schedule, p.pipeline_parallel_microbatch_size, p.module_fqns_per_model_part,
                     p.pipeline_parallel_layers_per_stage],
        "checkpoint": [job.activation_checkpoint.mode, job.activation_checkpoint.selective_ac_option],
        "compile": job.compile.enable,
        "fsdp_reshard_after_forward": p.fsdp_reshard_after_forward,
        "quantize": asdict(job.quantize),
        **built_parameters(job.model.name, job.model.flavor),
    }  # fmt: skip


def main() -> None:
    answer(lambda case: read(case["toml"], case["world"]), (AssertionError, ValueError, TypeError, KeyError))


if __name__ == "__main__":
    main()
