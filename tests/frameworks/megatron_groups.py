"""Run Megatron-Core's own rank placement for meshes read as JSON on stdin; print JSON on stdout.

Each case gives the sizes a Megatron export sets (tp, pp, vp, cp, ep, expert_tp, and whether it
asks for --use-tp-pp-dp-mapping), the world size and the ranks to report. For each, this calls
``megatron.core.parallel_state.initialize_model_parallel`` on torch's fake process-group backend
(one process pretends to be the given rank of the world; no collective runs) with the order
Megatron-LM's ``initialize._initialize_distributed`` passes ('tp-cp-ep-dp-pp', or
'tp-cp-ep-pp-dp' with the mapping flag), and returns every group the rank belongs to, or the
error Megatron raises. Run as a subprocess by tests/test_frameworks.py (Megatron's state is
global, and one process holds one default group at a time).
"""

from __future__ import annotations

import warnings

import torch.distributed as dist
from answer import answer
from torch.testing._internal.distributed.fake_pg import FakeStore

warnings.filterwarnings("ignore")  # "Transformer Engine and Apex are not installed"

from megatron.core import parallel_state as ps  # noqa: E402


def groups(case: dict, rank: int) -> dict:
    if dist.is_initialized():
        ps.destroy_model_parallel()
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=case["world"])
    ps.initialize_model_parallel(
        tensor_model_parallel_size=case["tp"],
        pipeline_model_parallel_size=case["pp"],
        virtual_pipeline_model_parallel_size=case["vp"] if case["vp"] > 1 else None,
        context_parallel_size=case["cp"],
        expert_model_parallel_size=case["ep"],
        expert_tensor_parallel_size=case["expert_tp"],
        order="tp-cp-ep-pp-dp" if case["tp_pp_dp_mapping"] else "tp-cp-ep-dp-pp",
        create_gloo_process_groups=False,
    )

    def ranks(group: object) -> list[int]:
        return sorted(dist.get_process_group_ranks(group))

    return {
        "tp": ranks(ps.get_tensor_model_parallel_group()),
        "pp": ranks(ps.get_pipeline_model_parallel_group()),
        "dp": ranks(ps.get_data_parallel_group()),
        "cp": ranks(ps.get_context_parallel_group()),
        "dp_cp": ranks(ps.get_data_parallel_group(with_context_parallel=True)),
        "ep": ranks(ps.get_expert_model_parallel_group()),
        "etp": ranks(ps.get_expert_tensor_parallel_group()),
        "edp": ranks(ps.get_expert_data_parallel_group()),
    }


def main() -> None:
    answer(
        lambda case: {str(rank): groups(case, rank) for rank in case["ranks"]},
        (AssertionError, RuntimeError, ValueError),
    )


if __name__ == "__main__":
    main()
