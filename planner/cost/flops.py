"""Training FLOPs per token (ARCHITECTURE 8.2), counted from the architecture.

Forward FLOPs of a matmul are 2 x (weight parameters) per token; backward is twice forward, so
training is 6 x matmul parameters per token (Kaplan et al. 2020, 'Scaling Laws for Neural
Language Models', section 2.1). Attention scores add, per layer and token, 2*s*a*d_qk for QK^T
and 2*s*a*d_v for AV in the forward pass, counted over the full s x s square as PaLM (Chowdhery
et al. 2022, appendix B), torchtitan, llm-foundry and Megatron-LM until mid-2025 report model
FLOPs, although causal kernels skip about half; Megatron-LM now counts the causal half
(``model_flops_per_token(causal=True)``, for the stacks whose logs do: ``Stack.causal_model_flops``).
For GPT (12h^2 matmul parameters per layer, d_qk = d_v = h/a, LM head V*h) this is exactly
Megatron-LM's 72*B*s*L*h^2*(1 + s/(6h) + V/(12hL)) (Narayanan et al. 2021, eq. 3 without the
recompute pass), checked in tests.

Recompute adds forward work to hardware FLOPs only: full recompute a forward pass of every
layer (the LM head is not recomputed: Narayanan et al.'s 96*B*s*L*h^2*(1 + s/(6h) + V/(16hL))),
selective the forward attention core. Korthikanti et al. 2022 appendix A writes the selective
case as 72*B*s*L*h^2*(1 + s/(3h) + V/(12hL)), i.e. counting the attention core twice more
rather than once; we count the one recomputed forward pass, which is what the kernels execute.
"""

from __future__ import annotations

from planner.cost.params import attention_matmul_params, mamba_matmul_params, mlp_matmul_params
from planner.schemas.job import JobSpec
from planner.schemas.model import ModelSpec
from planner.schemas.stack import AttentionKernel

CAUSAL_SHARE = 0.5
"""Share of the s x s score square a causal mask keeps, as Megatron-LM counts it (s/2 keys per
query; the exact mean is (s+1)/2)."""


def attention_dims(model: ModelSpec) -> tuple[int, int]:
    """(d_qk, d_v): head dims of the score and value products. MLA uses nope+rope and v_head_dim
    (the approximation stated in the DeepSeek model card's notes)."""
    if model.is_mla:
        return model.head_dim_resolved, model.v_head_dim  # type: ignore[return-value]
    return model.head_dim_resolved, model.head_dim_resolved


def dense_layer_matmul_params(model: ModelSpec) -> float:
    """Matmul weights one token multiplies in a dense layer: attention + MLP (a hybrid model's
    dense kind: the mean of its attention, Mamba-2 and MLP blocks, ``ModelSpec.layer_kind``)."""
    kind = model.layer_kind(moe=False)
    mixers = kind.attention * attention_matmul_params(model) + kind.mamba * mamba_matmul_params(model)
    return mixers + kind.mlp * mlp_matmul_params(model, model.intermediate_size)


def moe_ffn_active_matmul_params(model: ModelSpec) -> int:
    """Matmul weights one token multiplies in a MoE FFN: router, top-k routed experts (on the
    latent under LatentMoE, with its two projections, as Megatron's num_floating_point_operations
    counts 'Routed experts run on moe_latent_size' plus the up and down projections) and the
    shared experts."""
    h = model.hidden_size
    shared = (model.n_shared_experts or 0) * mlp_matmul_params(model, model.expert_intermediate_size)
    if model.shared_expert_intermediate_size:
        shared += mlp_matmul_params(model, model.shared_expert_intermediate_size) + h
    return h * model.num_experts_total + routed_matmul_params(model) + shared


def routed_matmul_params(model: ModelSpec) -> int:
    """Matmul weights of a token's top-k routed experts, over the latent with LatentMoE's two
    projections (h x latent each)."""
    expert = mlp_matmul_params(model, model.expert_intermediate_size, model.expert_input_size)
    latent = 2 * model.hidden_size * model.moe_latent_size if model.moe_latent_size else 0
    return (model.num_experts_per_tok or 0) * expert + latent


def moe_layer_active_matmul_params(model: ModelSpec) -> float:
    """Matmul weights one token multiplies in a MoE layer: attention (none in a hybrid model's MoE
    blocks) and the MoE FFN (``moe_ffn_active_matmul_params``)."""
    return model.layer_kind(moe=True).attention * attention_matmul_params(model) + moe_ffn_active_matmul_params(model)


def mamba_scan_flops_per_token_fwd(model: ModelSpec, tp: float = 1.0) -> float:
    """Forward FLOPs per token of one Mamba-2 layer's SSD scan over ``tp`` ranks, counted from the
    chunked algorithm (Dao and Gu 2024, 'Transformers are SSMs', section 6; mamba_ssm
    ssd_minimal.py) with chunk Q, heads H, head dim P, state N and groups G: the intra-chunk
    scores C B^T (2QN per token and group), their product with x over the whole chunk block (2QP
    per token and head), the chunk states B^T x and their readout C h (2NP each per token and
    head); the inter-chunk recurrence (2NP per chunk and head) is left out, under 1%. Megatron's
    num_floating_point_operations counts 7 d_in N for it ('flops estimate for scan should be
    updated based on new SSD kernels, but small percent of overall layer flops')."""
    q, n = float(model.mamba_chunk), float(model.ssm_state_size or 0)
    p, heads, groups = (
        float(model.mamba_head_dim or 0),
        float(model.mamba_num_heads or 0),
        float(model.mamba_n_groups or 0),
    )
    return 2.0 * (q * n * groups + heads * (q * p + 2.0 * n * p)) / tp


def attention_score_flops_per_token_fwd(model: ModelSpec, seq_len: int) -> float:
    """Forward QK^T + AV FLOPs per token per layer, averaged over the layers: 2*s*a*(d_qk + d_v)
    over the full s x s square (PaLM's convention, which torchtitan and llm-foundry log, and
    Narayanan et al. 2021's; ``model_flops_per_token(causal=True)`` halves it, as Megatron-LM now
    counts); a sliding-window layer counts the keys it can attend, 2 x its window
    (``attended_keys``), and a chunked layer twice its chunked mean (``chunked_keys``; the whole
    sequence within one chunk), in the same convention, where the frameworks' own logs count every
    attention layer over the whole sequence (Megatron-LM's num_floating_point_operations and
    torchtitan's 12*l*h*q*t have no window term): for a windowed model the MFU shown is below the
    log's (GPT-OSS-120B at 32K: 45.4 against 59.8 GFLOP per token, causal). A hybrid
    model's average counts its attention blocks alone (``ModelSpec.attention_layer_share``)."""
    d_qk, d_v = attention_dims(model)
    sliding = model.num_sliding_layers / model.num_hidden_layers
    chunked = model.num_chunked_layers / model.num_hidden_layers
    full_keys = float(seq_len)
    window_keys = 2.0 * attended_keys(seq_len, model.sliding_window) if sliding else 0.0
    chunk_keys = 2.0 * chunked_keys(seq_len, model.attention_chunk_size or seq_len) if chunked else 0.0
    keys = (1.0 - sliding - chunked) * full_keys + sliding * min(window_keys, full_keys)
    keys += chunked * min(chunk_keys, full_keys)
    return 2.0 * keys * model.num_attention_heads * (d_qk + d_v) * model.attention_layer_share


def attended_keys(seq_len: int, window: int | None) -> float:
    """Mean number of keys a query attends to under a causal mask over ``seq_len`` tokens:
    (s+1)/2 ~ s/2 without a window; with a window w <= s, query i sees min(i+1, w) keys, a mean of
    w - w(w-1)/(2s)."""
    s = float(seq_len)
    if window is None or window >= seq_len:
        return (s + 1.0) / 2.0
    w = float(window)
    return w - w * (w - 1.0) / (2.0 * s)


def chunked_keys(seq_len: int, chunk: int) -> float:
    """Mean number of keys a query attends to under chunked causal attention (Llama 4: a query sees
    the tokens of its own chunk up to itself) over ``seq_len`` tokens: query i sees (i mod c) + 1,
    so q full chunks and a remainder r give (q c(c+1)/2 + r(r+1)/2) / s; (s+1)/2 within one chunk,
    about (c+1)/2 over many."""
    full, rest = divmod(int(seq_len), int(chunk))
    return (full * chunk * (chunk + 1) / 2.0 + rest * (rest + 1) / 2.0) / max(int(seq_len), 1)


def flash_attention_runs(model: ModelSpec, job: JobSpec) -> bool:
    """Whether the attention core runs a flash (fused) kernel that keeps the scores on chip: the
    job's ``flash_attention``, unless the model's sinks send the stack to its unfused path
    (``Stack.sink_attention`` 'unfused', Transformer Engine's UnfusedDotProductAttention, or 'local',
    Megatron-Core's own attention)."""
    return job.flash_attention and not (model.attention_sinks and job.software.sink_attention in ("unfused", "local"))


def attention_kernel_for(model: ModelSpec, job: JobSpec) -> AttentionKernel:
    """The fused kernel the attention core runs: the stack's, except that sinks take the GPU's own
    fused kernel where the stack runs them fused (Transformer Engine 2.9 get_attention_backend
    disables FlashAttention for any softmax_type but 'vanilla' and keeps cuDNN's FusedAttention)."""
    if model.attention_sinks and job.software.sink_attention == "fused":
        return "fused"
    return job.attention_kernel


def layers_matmul_params_active(model: ModelSpec) -> float:
    """Matmul weights one token multiplies across all transformer layers."""
    return model.num_dense_layers * dense_layer_matmul_params(model) + model.num_moe_layers * (
        moe_layer_active_matmul_params(model) if model.is_moe else 0
    )


def residual_output_matmul_params(model: ModelSpec) -> int:
    """Weights of the MLP down projections (dense, routed top-k and shared experts) across all
    layers: the GEMMs whose output only the residual add uses (``compute.RESIDUAL_OUTPUT_GEMMS``)."""
    h = model.hidden_size
    # LatentMoE: the experts' down projections feed fc2_latent_proj, whose output feeds the residual
    routed = (model.num_experts_per_tok or 0) * model.expert_intermediate_size if model.is_moe else 0
    if model.moe_latent_size:
        routed = model.moe_latent_size
    moe = model.num_moe_layers * (routed + model.shared_expert_width) * h if model.is_moe else 0
    return model.blocks_of("-") * model.intermediate_size * h + int(moe)


def mtp_layers(model: ModelSpec, job: JobSpec) -> int:
    """MTP layers the job trains: its ``mtp_layers``, else the model's ``num_nextn_predict_layers``
    where the stack builds MTP modules (``Stack.trains_mtp``) and none where it does not (a job
    asking for them there is refused, ``constraints``: ``stack_trains_mtp``)."""
    if job.mtp_layers is not None:
        return job.mtp_layers
    return model.num_nextn_predict_layers if job.software.trains_mtp else 0


def mtp_block_counts(model: ModelSpec) -> tuple[int, int]:
    """(layers, MoE layers) of one MTP module's decoder part, in the units the stage counts layers
    in: a transformer's one layer of its last layer's kind (``mtp_layer_is_moe``); a hybrid's
    blocks of its ``mtp_hybrid_override_pattern`` (Nemotron 3 Super's '*E': 2, one MoE), its
    non-MoE blocks priced at the model's dense kind (``ModelSpec.layer_kind``: the mean of its
    other blocks, an approximation for an MTP attention block)."""
    pattern = model.mtp_hybrid_override_pattern
    return (1 if pattern is None else len(pattern)), mtp_blocks_of(model, "E")


def mtp_blocks_of(model: ModelSpec, symbol: str) -> int:
    """Blocks of one ``HYBRID_BLOCKS`` kind in one MTP module: a hybrid's in its MTP pattern; a
    transformer's one layer holds an attention block and an MLP or MoE FFN as its last layer does
    (``mtp_layer_is_moe``), and no Mamba block."""
    pattern = model.mtp_hybrid_override_pattern
    if pattern is not None:
        return pattern.count(symbol)
    moe = mtp_layer_is_moe(model)
    return {"*": 1, "E": int(moe), "-": int(not moe)}.get(symbol, 0)


def mtp_layer_is_moe(model: ModelSpec) -> bool:
    """An MTP module's decoder layer has the kind of the model's last layer (Megatron-Core builds
    it from the decoder's layer spec; DeepSeek-V3's MTP layer is a MoE layer)."""
    return model.is_moe_layer(model.num_hidden_layers - 1)


def mtp_projection_params(model: ModelSpec) -> int:
    """The MTP module's own matmul weights besides its decoder layer: the 2h x h projection of
    [norm(embedding); norm(hidden)] (DeepSeek-V3 report section 2.2, M_k; Megatron-LM's
    num_floating_point_operations counts it as 2h^2 per token per MTP layer)."""
    return 2 * model.hidden_size * model.hidden_size


def mtp_matmul_params_active(model: ModelSpec) -> float:
    """Matmul weights one token multiplies in one MTP module: its decoder layer (a hybrid's blocks
    of its MTP pattern, each as its kind counts them), the projection and its own LM head (the
    shared output weight, a second V x h product)."""
    pattern = model.mtp_hybrid_override_pattern
    if pattern is not None:
        per_block = {
            "*": attention_matmul_params(model),
            "M": mamba_matmul_params(model),
            "-": mlp_matmul_params(model, model.intermediate_size),
            "E": moe_ffn_active_matmul_params(model) if model.is_moe else 0,
        }
        layer: float = sum(per_block[symbol] for symbol in pattern)
    else:
        layer = moe_layer_active_matmul_params(model) if mtp_layer_is_moe(model) else dense_layer_matmul_params(model)
    return layer + mtp_projection_params(model) + model.vocab_size * model.hidden_size


def counted_score_flops_per_token_fwd(model: ModelSpec, seq_len: int, causal: bool) -> float:
    """``attention_score_flops_per_token_fwd`` in a log's count: the full square, or with ``causal``
    the ``CAUSAL_SHARE`` of it a causal mask keeps (``Stack.causal_model_flops``)."""
    return attention_score_flops_per_token_fwd(model, seq_len) * (CAUSAL_SHARE if causal else 1.0)


def model_flops_per_token(model: ModelSpec, seq_len: int, mtp: int = 0, causal: bool = False) -> float:
    """Model FLOPs per trained token: 6 * (layer matmul params + LM head V*h) + 3 * L * attention,
    plus ``mtp`` MTP modules (``mtp_matmul_params_active`` and one more layer's attention), as
    Megatron-LM's num_floating_point_operations counts them (megatron/training/training.py:
    the MTP layer among the layers, "3 * 2 * mtp_num_layers * (3h + 2h^2)" for its norms and
    projection, logits "(mtp_num_layers + 1)" times).

    The attention scores count the full s x s square of a causal layer (PaLM appendix B,
    torchtitan, llm-foundry, Narayanan et al. 2021), or with ``causal`` the half its mask keeps, as
    Megatron-LM has since mid-2025 ("/ 2  # causal mask (only half of the mask is non-zero)",
    megatron-core 0.17 training.py; ``Stack.causal_model_flops``): Llama-3-70B at 8,192 tokens
    481.4 or 449.2 GFLOP per token. Mamba-2's scan is not a masked square and counts alike.

    The LM head matmul runs even when its weights are tied to the embedding; the embedding
    lookup is a gather and costs no FLOPs.
    """
    head = model.vocab_size * model.hidden_size
    per_layer = counted_score_flops_per_token_fwd(model, seq_len, causal)
    per_attention_block = per_layer / model.attention_layer_share if model.attention_layer_share else 0.0
    attention = model.num_hidden_layers * per_layer + mtp * mtp_blocks_of(model, "*") * per_attention_block
    attention += (model.blocks_of("M") + mtp * mtp_blocks_of(model, "M")) * mamba_scan_flops_per_token_fwd(model)
    return 6.0 * (layers_matmul_params_active(model) + head + mtp * mtp_matmul_params_active(model)) + 3.0 * attention


def module_recompute_matmul_params(model: ModelSpec, modules: tuple[str, ...]) -> int:
    """Matmul weights one token multiplies again across the layers under Megatron's selective
    recompute of ``modules`` (``cost.recompute.MODULES``): MLA's up-projections (mla_up_proj), the
    dense MLPs (mlp), the MoE layers' router, routed and shared experts (moe) or the shared experts
    alone (shared_experts). core_attn, layernorm and moe_act run no matmul."""
    h, a = model.hidden_size, model.num_attention_heads
    total = 0
    if "mla_up_proj" in modules and model.is_mla:
        d_nope, d_rope, d_v = model.qk_nope_head_dim or 0, model.qk_rope_head_dim or 0, model.v_head_dim or 0
        r_q, r_kv = model.q_lora_rank or 0, model.kv_lora_rank or 0
        total += model.num_hidden_layers * (r_q * a * (d_nope + d_rope) + r_kv * a * (d_nope + d_v))
    if "mlp" in modules:
        total += model.blocks_of("-") * mlp_matmul_params(model, model.intermediate_size)
    if model.is_moe:
        moe_mlp = moe_ffn_active_matmul_params(model)
        shared = moe_mlp - h * model.num_experts_total - routed_matmul_params(model)
        if "moe" in modules:
            total += model.num_moe_layers * moe_mlp
        elif "shared_experts" in modules:
            total += model.num_moe_layers * shared
    return total


def recompute_flops_per_token(
    model: ModelSpec,
    seq_len: int,
    recompute: str,
    selective: str = "attention",
    modules: tuple[str, ...] = ("core_attn",),
    causal: bool = False,
) -> float:
    """Extra forward FLOPs per token that recompute executes: 0; under selective, Megatron's
    ``modules`` (``selective`` 'attention': the attention core for core_attn, Korthikanti et al.
    2022, and the matmuls of ``module_recompute_matmul_params``) or half of the matmuls whose
    outputs backward needs ('alternate_matmuls', torchtitan's per-op SAC:
    ``compute.selective_recompute_forward_s``); every layer's forward under full recompute.
    Attention counts as in ``model_flops_per_token`` with the same ``causal``."""
    attention = model.num_hidden_layers * counted_score_flops_per_token_fwd(model, seq_len, causal)
    attention += model.blocks_of("M") * mamba_scan_flops_per_token_fwd(model)
    if recompute == "full":
        return 2.0 * layers_matmul_params_active(model) + attention
    if recompute == "selective":
        if selective == "alternate_matmuls":
            return float(layers_matmul_params_active(model) - residual_output_matmul_params(model))
        core = attention if "core_attn" in modules else 0.0
        return core + 2.0 * module_recompute_matmul_params(model, modules)
    return 0.0


def megatron_gpt_flops_per_step(
    batch: int, seq_len: int, layers: int, hidden: int, vocab: int, full_recompute: bool
) -> float:
    """Megatron-LM's closed form for GPT (Narayanan et al. 2021, eq. 3): the reference our
    general count must reproduce. 72 without recompute; 96 with full recompute, where the LM
    head term becomes V/(16hL) because the head is not recomputed."""
    if full_recompute:
        return (
            96.0 * batch * seq_len * layers * hidden**2 * (1 + seq_len / (6 * hidden) + vocab / (16 * hidden * layers))
        )
    return 72.0 * batch * seq_len * layers * hidden**2 * (1 + seq_len / (6 * hidden) + vocab / (12 * hidden * layers))
