"""Parameter counts from the architecture (ARCHITECTURE 8.2).

Per layer, following the HF modelling code of each family:
  attention (GQA):  Q h*a*d_h, K and V 2*h*k_v*d_h, O a*d_h*h (+ biases when attention_bias,
                    + one sink logit per head with attention_sinks: GptOssAttention.sinks, shape [a])
  attention (MLA, DeepSeek-V2/V3 modeling_deepseek.py): q_a h*r_q, q_b r_q*a*(d_nope+d_rope),
                    kv_a h*(r_kv+d_rope), kv_b r_kv*a*(d_nope+d_v), O a*d_v*h, two LoRA norms
  MLP:              gated 3*h*f, plain 2*h*f (+ biases when mlp_bias)
  MoE MLP:          E routed experts of width f_e, router h*E (+ E with mlp_bias), shared experts;
                    LatentMoE: the experts read and write the latent (moe_latent_size) instead of h,
                    plus fc1_latent_proj h*latent and fc2_latent_proj latent*h (biases with mlp_bias)
  norms:            2 per layer, h each (RMSNorm) or 2h (LayerNorm has a bias)
  Mamba-2 mixer (hybrid models; Megatron-Core MambaMixer, HF NemotronHMamba2Mixer): in_proj
                    h*(2*d_inner + 2*G*N + H) (z, x, B, C, dt), the causal conv1d over x, B, C
                    (d_inner + 2*G*N channels x conv_kernel weights + a bias each), dt_bias, A_log
                    and D (H each), the gated RMSNorm (d_inner), out_proj d_inner*h
A hybrid model's layers are single blocks (one norm each): attention, Mamba-2, MLP or MoE FFN.
Plus the embedding V*h (and learned positions), the final norm, and the LM head V*h unless tied.
Checked in tests against published totals (Llama-3 70B 70.6e9, Mixtral 8x7B 46.7e9, ...).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import NonNegativeInt

from planner.schemas.base import Frozen

if TYPE_CHECKING:
    from planner.schemas.model import ModelSpec


class ParameterCounts(Frozen):
    """Parameter counts of a model, by where they sit. ``active`` counts what one token touches."""

    total: NonNegativeInt
    active_per_token: NonNegativeInt
    embedding: NonNegativeInt
    lm_head: NonNegativeInt
    final_norm: NonNegativeInt
    attention_per_layer: NonNegativeInt
    norms_per_layer: NonNegativeInt
    dense_mlp_per_layer: NonNegativeInt
    moe_experts_per_layer: NonNegativeInt
    moe_expert_each: NonNegativeInt
    moe_shared_per_layer: NonNegativeInt
    moe_router_per_layer: NonNegativeInt
    moe_latent_per_layer: NonNegativeInt  # LatentMoE's two projections (0 without)
    mamba_per_layer: NonNegativeInt  # one Mamba-2 mixer (hybrid models), without its norm
    dense_layer: NonNegativeInt  # hybrid models: the mean of the layers that are not MoE, rounded
    moe_layer: NonNegativeInt
    moe_layer_active: NonNegativeInt


def norm_params(model: ModelSpec, width: int) -> int:
    """Parameters of one norm over ``width`` features: weight, plus bias for LayerNorm."""
    return width * (2 if model.norm_type == "layernorm" else 1)


def attention_matmul_params(model: ModelSpec) -> int:
    """Weight-matrix parameters of one attention block (no biases or norms): what its GEMMs multiply."""
    h, a = model.hidden_size, model.num_attention_heads
    if model.is_mla:
        d_nope, d_rope = model.qk_nope_head_dim, model.qk_rope_head_dim
        r_kv, d_v = model.kv_lora_rank, model.v_head_dim
        assert d_nope and d_rope and r_kv and d_v  # guaranteed by ModelSpec validation
        r_q = model.q_lora_rank
        q = h * r_q + r_q * a * (d_nope + d_rope) if r_q else h * a * (d_nope + d_rope)
        return q + h * (r_kv + d_rope) + r_kv * a * (d_nope + d_v) + a * d_v * h
    d_h, k_v = model.head_dim_resolved, model.num_kv_heads
    return h * a * d_h + 2 * h * k_v * d_h + a * d_h * h


def mlp_matmul_params(model: ModelSpec, width: int, inputs: int | None = None) -> int:
    """Weight-matrix parameters of one MLP of width ``width`` over ``inputs`` features (the hidden
    size unless given: a LatentMoE expert's latent): 3*h*f gated, 2*h*f plain."""
    return (3 if model.is_gated_mlp else 2) * (inputs or model.hidden_size) * width


def latent_projection_params(model: ModelSpec) -> int:
    """LatentMoE's fc1_latent_proj and fc2_latent_proj of one MoE layer (0 without a latent)."""
    latent = model.moe_latent_size
    if latent is None:
        return 0
    h = model.hidden_size
    return 2 * h * latent + ((h + latent) if model.mlp_bias else 0)


def mamba_in_proj_width(model: ModelSpec) -> int:
    """Output width of a Mamba-2 mixer's in_proj: z and x (d_inner each), B and C (G*N each), dt (H)."""
    return model.mamba_inner_size + model.mamba_conv_channels + (model.mamba_num_heads or 0)


def mamba_matmul_params(model: ModelSpec) -> int:
    """Weight-matrix parameters of one Mamba-2 mixer: in_proj and out_proj (0 without Mamba layers)."""
    if not model.mamba_inner_size:
        return 0
    return model.hidden_size * (mamba_in_proj_width(model) + model.mamba_inner_size)


def mamba_params(model: ModelSpec) -> int:
    """Parameters of one Mamba-2 mixer (module docstring), excluding the block's pre-norm."""
    if not model.mamba_inner_size:
        return 0
    heads = model.mamba_num_heads or 0
    conv = model.mamba_conv_channels * (model.mamba_conv_width + 1)
    return mamba_matmul_params(model) + conv + 3 * heads + model.mamba_inner_size


def attention_params(model: ModelSpec) -> int:
    """Parameters of one attention block (projections, biases, q/k norms), excluding the pre-norm."""
    h, a = model.hidden_size, model.num_attention_heads
    if model.is_mla:
        # The two LoRA norms (over r_q and r_kv) are the only parameters outside the matrices.
        return attention_matmul_params(model) + (model.q_lora_rank or 0) + model.kv_lora_rank  # type: ignore[operator]
    d_h, k_v = model.head_dim_resolved, model.num_kv_heads
    weights = attention_matmul_params(model)
    biases = (a * d_h + 2 * k_v * d_h + h) if model.attention_bias else 0
    qk_norm = 2 * d_h if model.qk_norm else 0
    sinks = a if model.attention_sinks else 0
    return weights + biases + qk_norm + sinks


def mlp_params(model: ModelSpec, width: int, inputs: int | None = None) -> int:
    """One MLP of hidden width ``width`` over ``inputs`` features (``mlp_matmul_params``): 3*h*f
    gated (SwiGLU), 2*h*f plain, plus biases."""
    h = inputs or model.hidden_size
    biases = ((2 if model.is_gated_mlp else 1) * width + h) if model.mlp_bias else 0
    return mlp_matmul_params(model, width, inputs) + biases


def largest_dense_layer(model: ModelSpec) -> int:
    """Parameters of the largest layer that is not MoE: a transformer's dense layer; in a hybrid
    model the largest of its attention, Mamba-2 and MLP blocks with its norm (what ZeRO-3 gathers
    for one layer, where ``ParameterCounts.dense_layer`` is their mean)."""
    c = model.parameter_counts
    if not model.is_hybrid:
        return c.dense_layer
    blocks = {"*": c.attention_per_layer, "M": c.mamba_per_layer, "-": c.dense_mlp_per_layer}
    present = [params for symbol, params in blocks.items() if model.blocks_of(symbol)]
    return max(present, default=0) + c.norms_per_layer


def count_parameters(model: ModelSpec) -> ParameterCounts:
    """Count parameters by kind; see the module docstring for the per-matrix formulas."""
    h, V = model.hidden_size, model.vocab_size
    attention = attention_params(model)
    norms = 2 * norm_params(model, h)
    dense_mlp = mlp_params(model, model.intermediate_size)
    embedding = V * h + (model.max_position_embeddings * h if model.position_embedding_type == "learned" else 0)
    lm_head = 0 if model.tie_word_embeddings else V * h
    final_norm = norm_params(model, h)

    experts = expert_each = shared = router = 0
    top_k = model.num_experts_per_tok or 0
    if model.is_moe:
        expert_each = mlp_params(model, model.expert_intermediate_size, model.expert_input_size)
        experts = model.num_experts_total * expert_each
        # the router's bias comes with the biased linears (GptOssTopKRouter.bias; Megatron-Core
        # TopKRouter.bias under add_bias_linear)
        router = (h + (1 if model.mlp_bias else 0)) * model.num_experts_total
        shared = (model.n_shared_experts or 0) * mlp_params(model, model.expert_intermediate_size)
        if model.shared_expert_intermediate_size:
            # Qwen2-MoE: one shared expert of its own width, plus a sigmoid gate of h parameters.
            shared += mlp_params(model, model.shared_expert_intermediate_size) + h

    mamba = mamba_params(model)
    latent = latent_projection_params(model)
    n_moe, n_dense = model.num_moe_layers, model.num_dense_layers
    outside = embedding + lm_head + final_norm
    if model.is_hybrid:  # one norm per block, attention only in the attention blocks
        norms = norm_params(model, h)
        others = model.blocks_of("*") * attention + model.blocks_of("M") * mamba + model.blocks_of("-") * dense_mlp
        dense_total = others + n_dense * norms
        dense_layer = round(dense_total / max(n_dense, 1))
        moe_layer = norms + experts + shared + router + latent
        moe_layer_active = norms + top_k * expert_each + shared + router + latent
    else:
        dense_layer = attention + norms + dense_mlp
        moe_layer = attention + norms + experts + shared + router + latent
        moe_layer_active = attention + norms + top_k * expert_each + shared + router + latent
        dense_total = n_dense * dense_layer
    return ParameterCounts(
        total=dense_total + n_moe * moe_layer + outside,
        active_per_token=dense_total + n_moe * moe_layer_active + outside,
        embedding=embedding,
        lm_head=lm_head,
        final_norm=final_norm,
        attention_per_layer=attention,
        norms_per_layer=norms,
        dense_mlp_per_layer=dense_mlp,
        moe_experts_per_layer=experts,
        moe_expert_each=expert_each,
        moe_shared_per_layer=shared,
        moe_router_per_layer=router,
        moe_latent_per_layer=latent,
        mamba_per_layer=mamba,
        dense_layer=dense_layer,
        moe_layer=moe_layer,
        moe_layer_active=moe_layer_active,
    )
