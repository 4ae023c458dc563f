"""KV cache size from the architecture (ARCHITECTURE 9.2).

Per token and layer (what attention keeps for every past token):
  GQA/MHA   2 x k_v x d_h x bytes          (K and V per KV head; Ainslie et al. 2023, GQA)
  MLA       (kv_lora_rank + qk_rope_head_dim) x bytes
            (DeepSeek-V2 report, arXiv:2405.04434 section 2.1.2: the compressed latent c_KV and
            the decoupled RoPE key k^R are all that is cached; vLLM and TensorRT-LLM cache exactly
            these 512 + 64 values per token for DeepSeek-V3)
  sliding-window layers keep at most ``sliding_window`` tokens (Mistral, GPT-OSS; vLLM's
            SlidingWindowSpec frees blocks beyond the window), chunked layers at most one
            ``attention_chunk_size`` chunk (Llama 4; vLLM's ChunkedLocalAttentionSpec: "we hold KV
            for at most one chunk window", v1/kv_cache_interface.py).
Llama 3 70B at 8,192 tokens in bf16: 80 x 2 x 8 x 128 x 2 x 8192 = 2.5 GiB per sequence.

A hybrid Mamba-2 model caches KV in its attention blocks only (``kv_layers``); each Mamba-2 layer
keeps a per-sequence state instead (``mamba_state_bytes``; ARCHITECTURE 9.8).

Across tensor-parallel ranks: GQA splits the KV heads (a rank holds ceil(k_v / t) of them, so
with t > k_v heads are replicated, as vLLM does); MLA's latent is not per head and every TP rank
holds all of it (why engines run MLA models with attention data-parallel). Under attention DP a
sequence lives on one rank with its whole cache.
"""

from __future__ import annotations

import math

import numpy as np

from planner.schemas.model import ModelSpec

KV_BYTES_PER_ELEMENT = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0}
"""Storage of one cached element: bf16/fp16 2 bytes, fp8 (e4m3, vLLM --kv-cache-dtype fp8,
TensorRT-LLM FP8 KV) 1 byte; per-tensor scales are negligible."""


def kv_elements_per_token_per_layer(model: ModelSpec) -> int:
    """Cached values per token per layer on one unsplit replica (see module docstring)."""
    if model.is_mla:
        return int(model.kv_lora_rank) + int(model.qk_rope_head_dim)  # type: ignore[arg-type]
    return 2 * model.num_kv_heads * model.head_dim_resolved


def kv_layers(model: ModelSpec) -> int:
    """Layers that cache keys and values: every layer of a transformer, the attention blocks ('*')
    of a hybrid (its Mamba-2, MLP and MoE blocks keep nothing per token)."""
    return model.blocks_of("*")


def windowed_layers(model: ModelSpec, chunked_kv: str = "full") -> list[tuple[int, float]]:
    """(layers, tokens each caches at most) of the layers whose cache stops growing: the
    sliding-window layers at their window, and the chunked layers at their chunk where the engine
    keeps one (``EngineProfile.chunked_kv`` 'chunk'; 'full' caches them as full-attention layers)."""
    spans = [(model.num_sliding_layers, float(model.sliding_window or 0))]
    if chunked_kv == "chunk":
        spans.append((model.num_chunked_layers, float(model.attention_chunk_size or 0)))
    return [(layers, span) for layers, span in spans if layers]


def kv_bytes_per_token(
    model: ModelSpec, kv_dtype: str, context_tokens: float | None = None, chunked_kv: str = "full"
) -> float:
    """KV bytes one token adds across all layers. With ``context_tokens`` given, the average over
    a context of that length (windowed layers stop growing at their span, ``windowed_layers``)."""
    per_layer = kv_elements_per_token_per_layer(model) * KV_BYTES_PER_ELEMENT[kv_dtype]
    spans = windowed_layers(model, chunked_kv)
    if context_tokens is None or not spans:
        return per_layer * kv_layers(model)
    full = kv_layers(model) - sum(layers for layers, _ in spans)
    return per_layer * (full + sum(n * min(1.0, span / max(context_tokens, 1.0)) for n, span in spans))


def layer_cached_tokens(
    model: ModelSpec, context: np.ndarray, block_tokens: int | None = None, chunked_kv: str = "full"
) -> np.ndarray:
    """Tokens a sequence of ``context`` tokens keeps cached, summed over the layers: the context in
    a full-attention layer, at most its span in a windowed one (``windowed_layers``), each layer's
    rounded up to whole pages of ``block_tokens`` where given (paged attention allocates whole
    blocks). Unrounded with ``chunked_kv`` 'chunk', the keys one decode query attends over the
    layers, a chunk an upper bound on what a chunked layer's query sees (its own chunk so far)."""
    context = np.asarray(context, dtype=float)
    spans = windowed_layers(model, chunked_kv)
    full = kv_layers(model) - sum(layers for layers, _ in spans)

    def pages(tokens: np.ndarray) -> np.ndarray:
        return tokens if block_tokens is None else np.ceil(tokens / block_tokens) * block_tokens

    return full * pages(context) + sum((n * pages(np.minimum(context, span)) for n, span in spans), 0.0 * context)


def kv_heads_per_rank(model: ModelSpec, tp: np.ndarray) -> np.ndarray:
    """KV heads a TP rank holds: k_v / t, at least one (replicated when t > k_v)."""
    return np.ceil(model.num_kv_heads / np.asarray(tp, dtype=float))


def kv_split(model: ModelSpec, tp: np.ndarray, attention_dp: np.ndarray) -> np.ndarray:
    """Fraction of a sequence's per-layer KV one rank of its attention group holds: ceil(k_v/t)/k_v
    under TP for GQA, 1 for MLA or under attention DP (one rank holds the whole sequence)."""
    tp = np.asarray(tp, dtype=float)
    if model.is_mla:
        return np.ones_like(tp)
    share = kv_heads_per_rank(model, tp) / model.num_kv_heads
    return np.where(np.asarray(attention_dp, dtype=bool), 1.0, share)


def sequence_kv_bytes_per_gpu(
    model: ModelSpec,
    kv_dtype: str,
    context: np.ndarray,
    block_tokens: int,
    tp: np.ndarray,
    pp: np.ndarray,
    attention_dp: np.ndarray,
    chunked_kv: str = "full",
) -> np.ndarray:
    """KV bytes one sequence of ``context`` tokens holds on each GPU that keeps part of it (its
    layers over pp stages, its heads over tp unless MLA or attention DP), pages rounded; chunked
    layers as the engine caches them (``chunked_kv``)."""
    per_layer = kv_elements_per_token_per_layer(model) * KV_BYTES_PER_ELEMENT[kv_dtype]
    layer_tokens = layer_cached_tokens(model, context, block_tokens, chunked_kv)
    return per_layer * layer_tokens * kv_split(model, tp, attention_dp) / np.asarray(pp, dtype=float)


STATE_BYTES_PER_ELEMENT = {"bf16": 2.0, "fp16": 2.0, "fp32": 4.0}
"""Storage of one element of a Mamba-2 layer's per-sequence state (see ``mamba_state_bytes``)."""


def mamba_state_elements(model: ModelSpec, tp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(conv, SSM) state elements one sequence keeps per Mamba-2 layer on one of ``tp`` ranks:
    the causal conv1d's last (K - 1) inputs over its channels (x, B and C: d_inner + 2 G N), and the
    SSM state H x P x N; heads and groups split over tp, the groups whole on every rank where tp
    does not divide them (one group, replicated). vLLM's MambaStateShapeCalculator.mamba2_state_shape
    (vllm/model_executor/layers/mamba/mamba_utils.py): conv (conv_dim / tp, K - 1) with n_groups
    extended to tp when they do not divide, temporal (heads / tp, head_dim, state_size)."""
    t = np.asarray(tp, dtype=float)
    groups = float(model.mamba_n_groups or 0)
    groups_per_rank = np.where(np.mod(groups, t) == 0, groups / t, groups)
    channels = model.mamba_inner_size / t + 2.0 * groups_per_rank * float(model.ssm_state_size or 0)
    conv = (model.mamba_conv_width - 1) * channels
    ssm = model.mamba_inner_size * float(model.ssm_state_size or 0) / t
    return conv, ssm


def mamba_state_bytes(model: ModelSpec, tp: np.ndarray, ssm_dtype: str, conv_dtype: str = "bf16") -> np.ndarray:
    """Bytes of one sequence's state in one Mamba-2 layer on one of ``tp`` ranks: what the layer
    keeps in place of a KV cache, the same at any context length (``mamba_state_elements``)."""
    conv, ssm = mamba_state_elements(model, tp)
    return conv * STATE_BYTES_PER_ELEMENT[conv_dtype] + ssm * STATE_BYTES_PER_ELEMENT[ssm_dtype]


def mixer_tp(tp: np.ndarray | float, attention_dp: np.ndarray | bool) -> np.ndarray:
    """The ranks a Mamba-2 mixer's heads are split over: tp, or 1 under attention DP (a sequence and
    its mixers whole on one rank, as attention is; vLLM's data-parallel ranks replicate every layer
    but the experts)."""
    return np.where(np.asarray(attention_dp, dtype=bool), 1.0, np.asarray(tp, dtype=float))


def sequence_state_bytes_per_gpu(
    model: ModelSpec,
    ssm_dtype: str,
    tp: np.ndarray | float,
    pp: np.ndarray | float,
    attention_dp: np.ndarray | bool,
) -> np.ndarray:
    """Mamba-2 state bytes one sequence holds on each GPU that keeps part of it: its Mamba layers
    over pp stages, their heads over tp unless attention DP (one rank holds the whole sequence, its
    mixers replicated as attention is); 0 for a transformer."""
    if not model.blocks_of("M"):
        return np.zeros_like(np.asarray(tp, dtype=float))
    t = mixer_tp(tp, attention_dp)
    return model.blocks_of("M") * mamba_state_bytes(model, t, ssm_dtype) / np.asarray(pp, dtype=float)


def shared_page_sequence_bytes_per_gpu(
    model: ModelSpec,
    kv_dtype: str,
    ssm_dtype: str,
    context: np.ndarray,
    align_tokens: int,
    tp: np.ndarray,
    pp: np.ndarray,
    attention_dp: np.ndarray,
) -> np.ndarray:
    """Bytes one sequence of ``context`` tokens takes per GPU of a hybrid in vLLM v1's one block pool
    (``EngineProfile.mamba_state`` 'shared_pages'): every page is one size, an attention block of
    ``align_tokens`` x ceil(Mamba state / (``align_tokens`` x KV bytes per token and layer))
    tokens, the Mamba state padded to it; layers go in groups of the smaller count of either kind
    (vLLM's newer rule takes the larger where it is under 1.5x the smaller), each group one page
    per block, so a sequence holds ceil(context / block) pages per attention group and one page per
    Mamba group (the last group padded). Nemotron 3 Nano at tp 1 with an fp32 SSM state and a bf16
    KV cache: 2,096-token blocks of 2.1 MB, groups of 6 layers, 5 blocks of 6 pages for a context
    of 2,048 (64 MB, where the state and KV alone are 62 MB)."""
    t = mixer_tp(tp, attention_dp)
    per_token = (
        kv_elements_per_token_per_layer(model) * KV_BYTES_PER_ELEMENT[kv_dtype] * kv_split(model, tp, attention_dp)
    )
    state = mamba_state_bytes(model, t, ssm_dtype)
    block = align_tokens * np.ceil(state / (align_tokens * per_token))
    page = block * per_token
    n_attention, n_mamba = kv_layers(model), model.blocks_of("M")
    small, large = min(n_attention, n_mamba), max(n_attention, n_mamba)
    group = large if large < 1.5 * small else small
    pages = math.ceil(n_attention / group) * np.ceil(np.asarray(context, dtype=float) / block) + math.ceil(
        n_mamba / group
    )
    return group * page * pages / np.asarray(pp, dtype=float)
