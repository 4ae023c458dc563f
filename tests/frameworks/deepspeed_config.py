"""Read DeepSpeed configs with DeepSpeed's own DeepSpeedConfig on its own pipeline grid.

Reads JSON on stdin: a list of {"config": the exported dict, "pp": stages, "dp": data-parallel
degree}. torch's fake process-group backend stands in for pp*dp ranks (rank 0 of them);
``deepspeed.comm`` is initialised over it; DeepSpeed's ``PipeDataParallelTopology`` and
``PipelineParallelGrid`` (deepspeed/runtime/pipe/topology.py, what ``PipelineModule`` builds)
give the data-parallel group, and ``DeepSpeedConfig(config, mpu=grid)`` runs DeepSpeed's batch
and ZeRO checks (``_configure_train_batch_size``). Prints the resolved values or the error. Run
as a subprocess by tests/test_frameworks.py. A case's ``blocks`` (Hugging Face MoE block classes)
are checked against the config's ZeRO-3 leaf modules (``leaf_blocks``).

With pp > 1 it also builds DeepSpeed's ``deepspeed.pipe.PipelineModule`` as the export's note
says to, over the case's ``layers`` decoder layers between an embedding and a head (one-weight
stand-ins of classes Embedding, DecoderLayer and Head: a type partition counts layers, not
weights), on the same grid, once for each ``partition_method`` in the case's ``partitions``, and
reports the decoder layers each stage got from that partition (``PipelineModule.parts``,
computed for every stage on rank 0). DeepSpeed reads LOCAL_RANK from
the environment when it builds the module; the fake group is rank 0 of one node.
"""

from __future__ import annotations

import itertools
import os
import warnings

import torch
import torch.distributed as torch_dist
from answer import answer
from torch.testing._internal.distributed.fake_pg import FakeStore

warnings.filterwarnings("ignore")


class Embedding(torch.nn.Linear):
    """The first stage's extra module."""


class DecoderLayer(torch.nn.Linear):
    """A decoder layer: the class the partition method names."""


class Head(torch.nn.Linear):
    """The last stage's extra module."""


def stage_layers(layers: int, topology: object, method: str) -> list[int]:
    """Decoder layers per stage of DeepSpeed's own partition by ``method``."""
    from deepspeed.pipe import LayerSpec, PipelineModule

    os.environ.setdefault("LOCAL_RANK", "0")
    specs = [LayerSpec(Embedding, 1, 1), *(LayerSpec(DecoderLayer, 1, 1) for _ in range(layers)), LayerSpec(Head, 1, 1)]
    module = PipelineModule(layers=specs, topology=topology, partition_method=method)
    bounds = [int(b) for b in module.parts]
    kinds = [spec.typename.__name__ for spec in specs]
    return [kinds[a:b].count("DecoderLayer") for a, b in itertools.pairwise(bounds)]


def leaf_blocks(config: object, blocks: list[str]) -> list[str]:
    """Which of ``blocks`` (module-qualified class names) DeepSpeed's own ZeRO leaf-module config
    flags as leaves, on a stand-in model holding one module of each class (a class of that name and
    module, as ``z3_leaf_module._fully_qualified_class_name`` reads it)."""
    from deepspeed.utils.z3_leaf_module import apply_zero_leaf_module_config, z3_leaf_module

    modules = []
    for block in blocks:
        where, _, name = block.rpartition(".")
        modules.append(type(name, (torch.nn.Linear,), {"__module__": where})(1, 1))
    apply_zero_leaf_module_config(torch.nn.Sequential(*modules), config.zero_config.leaf_module)
    return [block for block, module in zip(blocks, modules, strict=True) if z3_leaf_module(module)]


def read(case: dict) -> dict:
    import deepspeed.comm as dist
    from deepspeed.runtime.config import DeepSpeedConfig
    from deepspeed.runtime.pipe.topology import PipeDataParallelTopology, PipelineParallelGrid

    if torch_dist.is_initialized():
        torch_dist.destroy_process_group()
    world = case["pp"] * case["dp"]
    torch_dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    dist.init_distributed(dist_backend="fake", auto_mpi_discovery=False)
    topology = PipeDataParallelTopology(num_pp=case["pp"], num_dp=case["dp"])
    grid = PipelineParallelGrid(topology=topology)
    config = DeepSpeedConfig(case["config"], mpu=grid)
    stages = {method: stage_layers(case["layers"], topology, method) for method in case.get("partitions", [])}
    return {
        "batch": [config.train_batch_size, config.train_micro_batch_size_per_gpu, config.gradient_accumulation_steps],
        "data_parallel": grid.get_data_parallel_world_size(),
        "zero_stage": config.zero_optimization_stage,
        "bf16": config.bfloat16_config.enabled,
        "fp16": config.float16_config.enabled,
        "stage_layers": stages,
        "leaf_blocks": leaf_blocks(config, case.get("blocks", [])),
    }


def main() -> None:
    answer(read, (AssertionError, ValueError, TypeError, KeyError))


if __name__ == "__main__":
    main()
