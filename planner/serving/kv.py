"""KV cache size from the architecture (ARCHITECTURE 9.2).

Per token and layer (what attention keeps for every past token):
  GQA/MHA   2 x k_v x d_h x bytes          (K and V per KV head; Ainslie et al. 2023, GQA)
  MLA       (kv_lora_rank + qk_rope_head_dim) x bytes
            (DeepSeek-V2 report, arXiv:2405.04434 section 2.1.2: the compressed latent c_KV and
            the decoupled RoPE key k^R are all that is cached; vLLM and TensorRT-LLM cache exactly
            these 512 + 64 values per token for DeepSeek-V3)
  sliding-window layers keep at most ``sliding_window`` tokens (Mistral, GPT-OSS; vLLM's
            SlidingWindowSpec frees blocks beyond the window).
Llama 3 70B at 8,192 tokens in bf16: 80 x 2 x 8 x 128 x 2 x 8192 = 2.5 GiB per sequence.

Across tensor-parallel ranks: GQA splits the KV heads (a rank holds ceil(k_v / t) of them, so
with t > k_v heads are replicated, as vLLM does); MLA's latent is not per head and every TP rank
holds all of it (why engines run MLA models with attention data-parallel). Under attention DP a
sequence lives on one rank with its whole cache.
"""

from __future__ import annotations

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


def kv_bytes_per_token(model: ModelSpec, kv_dtype: str, context_tokens: float | None = None) -> float:
    """KV bytes one token adds across all layers. With ``context_tokens`` given, the average over
    a context of that length (sliding-window layers stop growing at their window)."""
    per_layer = kv_elements_per_token_per_layer(model) * KV_BYTES_PER_ELEMENT[kv_dtype]
    sliding, full = model.num_sliding_layers, model.num_hidden_layers - model.num_sliding_layers
    if context_tokens is None or not sliding:
        return per_layer * model.num_hidden_layers
    window_share = min(1.0, float(model.sliding_window) / max(context_tokens, 1.0))  # type: ignore[arg-type]
    return per_layer * (full + sliding * window_share)


def cached_tokens(model: ModelSpec, context: np.ndarray, block_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """(tokens cached by a full-attention layer, by a sliding-window layer) for a sequence of
    ``context`` tokens, each rounded up to whole pages of ``block_tokens`` (paged attention
    allocates whole blocks)."""
    context = np.asarray(context, dtype=float)
    full = np.ceil(context / block_tokens) * block_tokens
    if model.sliding_window is None:
        return full, full
    window = np.minimum(context, float(model.sliding_window))
    return full, np.ceil(window / block_tokens) * block_tokens


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
) -> np.ndarray:
    """KV bytes one sequence of ``context`` tokens holds on each GPU that keeps part of it (its
    layers over pp stages, its heads over tp unless MLA or attention DP), pages rounded."""
    per_layer = kv_elements_per_token_per_layer(model) * KV_BYTES_PER_ELEMENT[kv_dtype]
    full_tokens, window_tokens = cached_tokens(model, context, block_tokens)
    sliding = model.num_sliding_layers
    layer_tokens = (model.num_hidden_layers - sliding) * full_tokens + sliding * window_tokens
    return per_layer * layer_tokens * kv_split(model, tp, attention_dp) / np.asarray(pp, dtype=float)
