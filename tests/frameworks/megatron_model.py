"""Build the model a Megatron export describes with Megatron-Core's own classes; print its size.

Reads JSON on stdin: a list of argv lists (the flags ``planner.export.megatron_args`` writes) with
the vocabulary size. For each, it fills Megatron-Core's ``TransformerConfig`` (or
``MLATransformerConfig``) from the architecture flags the way Megatron-LM's
``core_transformer_config_from_args`` does for them (--swiglu: gated SiLU; --squared-relu;
--disable-bias-linear; --group-query-attention; --num-experts; --moe-layer-freq evaluated as a
list; MLA's ranks and head dims; --quick-geglu: gated quick-GELU, with --glu-linear-offset and
--activation-func-clamp-value; --window-size, --window-attn-skip-freq and --softmax-type; the
router's score function, expert bias, scaling, pre-softmax and probabilities on the input), lets
its ``__post_init__`` check them, builds ``GPTModel`` with
the local (Transformer-Engine-free) layer spec on the meta device at TP = PP = 1 (torch's fake
process-group backend, world 1) and prints the parameter count, or Megatron's error. An MLA model
is checked as a config only: the local spec's attention has no MLA (building it needs Transformer
Engine). Run as a subprocess by tests/test_frameworks.py.
"""

from __future__ import annotations

import warnings

import torch
import torch.distributed as dist
import torch.nn.functional as F  # noqa: N812  (as Megatron-LM writes it)
from answer import answer
from torch.testing._internal.distributed.fake_pg import FakeStore

warnings.filterwarnings("ignore")  # "Transformer Engine and Apex are not installed"

from megatron.core import parallel_state as ps  # noqa: E402
from megatron.core.activations import squared_relu  # noqa: E402
from megatron.core.fusions.fused_bias_geglu import quick_gelu  # noqa: E402
from megatron.core.models.gpt import GPTModel  # noqa: E402
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec  # noqa: E402
from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig  # noqa: E402

FLAGS_WITH_VALUES = {
    "--num-layers": ("num_layers", int),
    "--hidden-size": ("hidden_size", int),
    "--ffn-hidden-size": ("ffn_hidden_size", int),
    "--num-attention-heads": ("num_attention_heads", int),
    "--kv-channels": ("kv_channels", int),
    "--num-query-groups": ("num_query_groups", int),
    "--normalization": ("normalization", str),
    "--num-experts": ("num_moe_experts", int),
    "--moe-router-topk": ("moe_router_topk", int),
    "--moe-ffn-hidden-size": ("moe_ffn_hidden_size", int),
    "--moe-shared-expert-intermediate-size": ("moe_shared_expert_intermediate_size", int),
    "--moe-layer-freq": ("moe_layer_freq", eval),  # arguments.py: moe_freq_type evaluates the expression
    "--q-lora-rank": ("q_lora_rank", int),
    "--kv-lora-rank": ("kv_lora_rank", int),
    "--qk-head-dim": ("qk_head_dim", int),
    "--qk-pos-emb-head-dim": ("qk_pos_emb_head_dim", int),
    "--v-head-dim": ("v_head_dim", int),
    "--softmax-type": ("softmax_type", str),
    "--window-size": ("window_size", lambda x: tuple(int(i) for i in x.strip("()").split(","))),  # tuple_type
    "--window-attn-skip-freq": ("window_attn_skip_freq", lambda x: eval(x) if "[" in x else int(x)),  # moe_freq_type
    "--glu-linear-offset": ("glu_linear_offset", float),
    "--activation-func-clamp-value": ("activation_func_clamp_value", float),
    "--moe-router-score-function": ("moe_router_score_function", str),
    "--moe-router-topk-scaling-factor": ("moe_router_topk_scaling_factor", float),
}
SWITCHES = {
    "--moe-router-enable-expert-bias": "moe_router_enable_expert_bias",
    "--moe-router-pre-softmax": "moe_router_pre_softmax",
    "--moe-apply-probs-on-input": "moe_apply_probs_on_input",
}
"""Flags that turn a TransformerConfig field on (store_true in arguments.py)."""


def build(argv: list[str], vocab: int) -> dict:
    """Megatron-Core's config for ``argv`` (its checks run on construction) and, where the local
    layer spec can build the model (not MLA, which needs Transformer Engine's attention), the
    parameter count."""
    config: dict = {"add_bias_linear": True, "use_cpu_initialization": True, "perform_initialization": False}
    for flag, (field, kind) in FLAGS_WITH_VALUES.items():
        if flag in argv:
            config[field] = kind(argv[argv.index(flag) + 1])
    config.update({field: True for flag, field in SWITCHES.items() if flag in argv})
    if "--swiglu" in argv:
        config.update(gated_linear_unit=True, activation_func=F.silu)
    if "--quick-geglu" in argv:
        config.update(gated_linear_unit=True, activation_func=quick_gelu)
    if "--squared-relu" in argv:
        config["activation_func"] = squared_relu
    if "--disable-bias-linear" in argv:
        config["add_bias_linear"] = False
    if "--add-qkv-bias" in argv:
        config["add_qkv_bias"] = True
    if "--qk-layernorm" in argv:
        config["qk_layernorm"] = True
    mla = "--multi-latent-attention" in argv
    if mla:
        config["multi_latent_attention"] = True
        if "q_lora_rank" not in config:
            config["q_lora_rank"] = None
    cls = MLATransformerConfig if mla else TransformerConfig
    transformer = cls(**config)
    if mla:
        return {"config": "checked"}  # the local spec's DotProductAttention has no MLA: building needs TE
    spec = get_gpt_layer_local_spec(
        num_experts=config.get("num_moe_experts"),
        qk_layernorm=bool(config.get("qk_layernorm")),
        multi_latent_attention=mla,
        normalization=config.get("normalization", "LayerNorm"),
    )
    position = argv[argv.index("--position-embedding-type") + 1]
    # Megatron-Core's DotProductAttention puts learnable sink logits on torch.cuda.current_device()
    # explicitly (dot_product_attention.py, softmax_type 'learnable'): on this CPU-only harness that
    # device is the meta device the rest of the model is built on
    torch.cuda.current_device = lambda: "meta"  # type: ignore[assignment]
    with torch.device("meta"):
        model = GPTModel(
            config=transformer,
            transformer_layer_spec=spec,
            vocab_size=vocab,
            max_sequence_length=int(argv[argv.index("--max-position-embeddings") + 1]),
            position_embedding_type=position,
            share_embeddings_and_output_weights="--untie-embeddings-and-output-weights" not in argv,
        )
    return {"params": sum(p.numel() for p in model.parameters())}


def main() -> None:
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=1)
    ps.initialize_model_parallel(create_gloo_process_groups=False)
    answer(lambda case: build(case["argv"], case["vocab"]), (AssertionError, RuntimeError, ValueError, TypeError))


if __name__ == "__main__":
    main()
