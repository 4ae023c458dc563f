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
        return per_layer * model.num_hidden_layers
    full = model.num_hidden_layers - sum(layers for layers, _ in spans)
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
    full = model.num_hidden_layers - sum(layers for layers, _ in spans)

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
