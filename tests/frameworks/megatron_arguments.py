"""Run Megatron exports through Megatron-LM's own ``parse_args`` and ``validate_args``.

Usage: ``python megatron_arguments.py <folder>``, where <folder> holds a megatron-core release
whose wheel ships Megatron-LM's ``megatron/training`` package (0.17.0 is the first on the
registry that does; earlier ones ship ``megatron/core`` only), as ``pip install --no-deps
--target <folder>`` leaves it (tests/test_frameworks.py's session fixture). The folder goes first
on sys.path, so that its ``megatron`` package is read, not the installed megatron-core's.

Reads JSON on stdin: a list of {"argv": the export's flags, "env": the environment the export's
launcher sets, "world": GPUs}. For each, sets ``WORLD_SIZE`` (what torchrun sets; validate_args
derives the data-parallel size from it), ``RANK`` 0 and the case's environment, puts the flags in
``sys.argv`` after a script name, and calls ``megatron.training.arguments.parse_args()`` and
``validate_args(args, {})`` as ``megatron.training.initialize.initialize_megatron`` does. Prints
the resolved sizes the test compares, or Megatron's error (its refusals are assertions and
argparse exits), with a hybrid model's pattern, MTP depths, latent size and hybrid flag as
validate_args and the config resolve them, the RoPE and the router the config builds. Then builds the
TransformerConfig from the arguments as ``pretrain_gpt.py`` does
(``core_transformer_config_from_args``), whose ``__post_init__`` holds Megatron-Core's own
refusals (moe_act recompute without grouped GEMMs, delayed fp8 scaling with layernorm recompute,
flex dispatch with capacity padding); Transformer Engine is absent, so its version checks
(``is_te_min_version``) answer yes, its fused permutation kernels are stood in for
(``FUSED_PERMUTATION``) and RoPE fusion, a TE kernel, is off.

validate_args asks the GPU twice (``get_device_arch_version`` for the CUDA_DEVICE_MAX_CONNECTIONS
rule, which changes with Blackwell, and ``torch.cuda.get_device_capability`` for grouped GEMM);
with no GPU here both are answered as the planned cluster's H100 (compute capability 9.0).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import warnings
from typing import Any

from answer import answer

warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)  # Megatron-Core logs its layout parse on stdout, which carries the answers
sys.path.insert(0, sys.argv[1])

import torch  # noqa: E402
from megatron.training import arguments  # noqa: E402

assert arguments.__file__.startswith(sys.argv[1]), f"megatron.training read from {arguments.__file__}"
from megatron.core.transformer import transformer_config  # noqa: E402

transformer_config.is_te_min_version = lambda *args, **kwargs: True  # type: ignore[attr-defined]
from megatron.core.transformer.moe import moe_utils  # noqa: E402

FUSED_PERMUTATION = (
    "fused_permute", "fused_permute_with_probs", "fused_sort_chunks_by_index",
    "fused_sort_chunks_by_index_with_probs", "fused_unpermute",
)  # fmt: skip
"""Transformer Engine's permutation kernels, None in moe_utils without it: TransformerConfig refuses
--moe-permute-fusion where one is missing, as it would on a machine without TE >= 2.1; stood in for,
as the TE version checks are answered yes."""
for _name in FUSED_PERMUTATION:
    if getattr(moe_utils, _name, None) is None:
        setattr(moe_utils, _name, lambda *args, **kwargs: None)

HOPPER = (9, 0)
arguments.get_device_arch_version = lambda: HOPPER[0]  # type: ignore[attr-defined]
torch.cuda.get_device_capability = lambda device=None: HOPPER  # type: ignore[assignment]


MLA_ROPE = ("rope_type", "rotary_scaling_factor", "mscale", "mscale_all_dim")
"""MLATransformerConfig's YaRN fields the arguments set."""


def read(case: dict[str, Any]) -> dict[str, Any]:
    saved = dict(os.environ)
    os.environ.update(WORLD_SIZE=str(case["world"]), RANK="0", LOCAL_RANK="0", **case["env"])
    sys.argv = ["pretrain_gpt.py", *case["argv"]]
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(said):
            args = arguments.validate_args(arguments.parse_args(), {})
            args.apply_rope_fusion = False  # a Transformer Engine kernel, absent here
            config = arguments.core_transformer_config_from_args(args)
    except SystemExit as exit:  # argparse: an unknown flag or a bad value
        raise ValueError(" ".join(said.getvalue().split())[-600:]) from exit
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return {
        "config": type(config).__name__,
        "sizes": [args.tensor_model_parallel_size, args.pipeline_model_parallel_size, args.data_parallel_size,
                  args.context_parallel_size, args.expert_model_parallel_size, args.expert_tensor_parallel_size,
                  args.virtual_pipeline_model_parallel_size],
        "batch": [args.global_batch_size, args.micro_batch_size, args.seq_length],
        "shape": [args.num_layers, args.hidden_size, args.ffn_hidden_size, args.num_attention_heads,
                  args.num_query_groups if args.group_query_attention else args.num_attention_heads, args.num_experts,
                  args.padded_vocab_size if hasattr(args, "padded_vocab_size") else None],
        "sequence_parallel": args.sequence_parallel,
        "recompute": [args.recompute_granularity, args.recompute_method, args.recompute_num_layers],
        "fp8": args.fp8,
        "bf16": args.bf16,
        "hybrid": [args.hybrid_layer_pattern, args.mtp_num_layers, config.moe_latent_size, config.is_hybrid_model],
        "rope": [args.rotary_base, args.use_rope_scaling, args.rope_scaling_factor if args.use_rope_scaling else None,
                 [getattr(config, key) for key in MLA_ROPE] if hasattr(config, "mscale_all_dim") else None],
        "router": [config.moe_router_score_function, config.moe_router_enable_expert_bias,
                   config.moe_router_topk_scaling_factor, config.moe_router_pre_softmax,
                   config.moe_apply_probs_on_input],
    }  # fmt: skip


def main() -> None:
    answer(read, (AssertionError, ValueError, TypeError, KeyError))


if __name__ == "__main__":
    main()
