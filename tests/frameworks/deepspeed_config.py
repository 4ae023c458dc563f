"""Read DeepSpeed configs with DeepSpeed's own DeepSpeedConfig on its own pipeline grid.

Reads JSON on stdin: a list of {"config": the exported dict, "pp": stages, "dp": data-parallel
degree}. torch's fake process-group backend stands in for pp*dp ranks (rank 0 of them);
``deepspeed.comm`` is initialised over it; DeepSpeed's ``PipeDataParallelTopology`` and
``PipelineParallelGrid`` (deepspeed/runtime/pipe/topology.py, what ``PipelineModule`` builds)
give the data-parallel group, and ``DeepSpeedConfig(config, mpu=grid)`` runs DeepSpeed's batch
and ZeRO checks (``_configure_train_batch_size``). Prints the resolved values or the error. Run
as a subprocess by tests/test_frameworks.py.
"""

from __future__ import annotations

import warnings

import torch.distributed as torch_dist
from answer import answer
from torch.testing._internal.distributed.fake_pg import FakeStore

warnings.filterwarnings("ignore")


def read(case: dict) -> dict:
    import deepspeed.comm as dist
    from deepspeed.runtime.config import DeepSpeedConfig
    from deepspeed.runtime.pipe.topology import PipeDataParallelTopology, PipelineParallelGrid

    if torch_dist.is_initialized():
        torch_dist.destroy_process_group()
    world = case["pp"] * case["dp"]
    torch_dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    dist.init_distributed(dist_backend="fake", auto_mpi_discovery=False)
    grid = PipelineParallelGrid(topology=PipeDataParallelTopology(num_pp=case["pp"], num_dp=case["dp"]))
    config = DeepSpeedConfig(case["config"], mpu=grid)
    return {
        "batch": [config.train_batch_size, config.train_micro_batch_size_per_gpu, config.gradient_accumulation_steps],
        "data_parallel": grid.get_data_parallel_world_size(),
        "zero_stage": config.zero_optimization_stage,
        "bf16": config.bfloat16_config.enabled,
        "fp16": config.float16_config.enabled,
    }


def main() -> None:
    answer(read, (AssertionError, ValueError, TypeError, KeyError))


if __name__ == "__main__":
    main()
