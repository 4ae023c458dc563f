"""Published serving rows (shared/groundtruth/inference_runs.yaml) priced from their own fields
(ARCHITECTURE 9.7): the model from ``model.shape`` (and the HF id's family where the shape
cannot say the MLP kind), the cluster from ``hardware``, the layout from ``parallel``, the
formats from ``precision``, the load from ``workload``; never from the row's name. A row the
translator cannot express raises ``UnpriceableError`` with the reason.

Modes, from the row's workload and tool:
  max_throughput  offline runs at an unbounded request rate (trtllm-bench throughput,
                  gptManagerBenchmark with request_rate -1): the engine runs as many sequences as
                  its KV cache and max batch allow (``memory.plan_memory``), with the token budget
                  trtllm-bench sizes (``trtllm_bench_max_num_tokens``); scored as ``plan serve``
                  reports that layout without targets, the closed-loop replay at that batch
                  (``served``); fitted by the faster waves of B the stated requests run in
                  (``_waves``: a prefill of the wave's prompts, osl decode rounds), a trtllm-bench
                  row that states none at TensorRT-LLM's count for its lengths
                  (``bench_requests``); other rows that state none at B / TPOT / GPUs of the mixed
                  round of ``search.price_colocated``.
  static          gptSessionBenchmark's static batch: one prefill of B prompts, then osl decode
                  rounds of B sequences.
  ttft            batch-1 time to first token: one prefill round of the prompt.
  concurrency     a fixed number of requests in flight (vllm bench serve --max-concurrency): TTFT
                  and TPOT of the stated number of requests replayed in a closed loop (each
                  finished request sends the next), else scored as ``plan serve --concurrency``
                  replays the load (``served``) and fitted at that batch's steady round; the
                  throughput scored as ``plan serve --concurrency`` reports it (``served``),
                  fitted by the steady round.
  rate            a fixed request rate (Triton online rows): TTFT and TPOT of the stated number of
                  requests replayed iteration by iteration (``replay.replay``), else scored as
                  ``plan serve --request-rate`` replays the load (``served``) and fitted at the
                  batch Little's law gives; their throughput is the offered rate, so it is
                  not scored.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from planner.catalog import load_cluster, read_yaml
from planner.errors import PlannerError, UnpriceableError, shown_value, validate_as
from planner.hf_config import full_every
from planner.runs import check_row_names
from planner.schemas.base import positive_figure
from planner.schemas.hardware import ClusterSpec
from planner.schemas.job import MAX_SEQ_LEN
from planner.schemas.model import TORCH_DTYPE_NAMES, ModelSpec
from planner.serving.engine import THROUGHPUT_METRICS, EngineProfile, FittedParameters, load_engine
from planner.serving.layout import Layouts
from planner.serving.memory import reserved_context
from planner.serving.replay import Replayed, replay
from planner.serving.step import RoundCost, Setting, resolve_ssm_dtype, round_cost, round_weight_bytes, steady_round

GPU_PROFILES: tuple[tuple[str, str], ...] = (
    ("GB300", "gb300-nvl72"),
    ("GB200", "gb200-nvl72"),
    ("GH200", "gh200"),
    ("B200", "dgx-b200"),
    ("H200", "dgx-h200"),
    ("H100 SXM", "dgx-h100"),
    ("A100-SXM4-80GB", "dgx-a100-80g"),
    ("L40S", "l40s"),
    ("RTX PRO 6000", "rtx-pro-6000"),
)
"""The row's ``hardware.gpu`` text (first match) -> the bundled profile of that GPU."""

PLAIN_MLP_FAMILIES = ("gpt-j", "falcon")
"""HF ids whose MLP is a plain two-matrix GELU MLP rather than gated (the shape gives only its
width): GPT-J (modeling_gptj.py GPTJMLP fc_in/fc_out, activation gelu_new) and Falcon
(modeling_falcon.py FalconMLP dense_h_to_4h/dense_4h_to_h, GELU)."""

MAX_REPLAYED_REQUESTS = 1_000_000
"""The most requests a row's stated load is replayed with, iteration by iteration (``replay``
holds a few arrays per request): 20x the largest the published rows state (49,152), so no real
benchmark is refused, while 1e30 fails by name instead of as numpy's 'Maximum allowed dimension
exceeded'. A bound, not a measurement."""

TRTLLM_BENCH_MAX_BATCH = 4096
"""trtllm-bench caps the batch it builds for at 4096 requests over the pipeline stages
(tensorrt_llm/bench/build/tuning.py finetune_setting: raw_bs = min(kv_cache_max_requests, 4096) /
pp_size), above TensorRT-LLM's serving default of 2048 (engines/trtllm.yaml)."""

CHUNKED_CONTEXT = "chunked context"
"""A row's ``engine.tool`` text saying its benchmark ran TensorRT-LLM's chunked context (the GH200
rows of TensorRT-LLM 0.17's perf overview: 'gptManagerBenchmark (IFB, request_rate -1, chunked
context)'): a prompt longer than the token budget runs in pieces (``EngineProfile.chunked_prefill``)."""

TRTLLM_BENCH_MAX_TOKENS = 32768
"""trtllm-bench caps the token budget it builds for at 32,768 tokens an iteration
(tensorrt_llm/bench/build/tuning.py finetune_setting: ``min(raw_bs * (1 + input_len / output_len),
32768)``, "to avoid TRT activation buffer becoming too large")."""


def trtllm_bench_max_num_tokens(batch_per_replica: float, input_len: int, output_len: int, pp: int) -> int:
    """The max_num_tokens trtllm-bench runs with (tensorrt_llm/bench/build/tuning.py
    ``finetune_setting``, read at 04cba882): the prompts of as many sequences as finish an iteration
    at the batch it sizes, ``min(requests, 4096) / pp x (1 + isl / osl)``, capped at
    ``TRTLLM_BENCH_MAX_TOKENS`` and rounded up (to 256 below 4,096, at least 2,048; to 512 below
    8,192; to 1,024 above); without chunked prefill (its default) at least the longest prompt and
    the max batch beside it (bench/benchmark/utils/general.py ``get_settings``: ``max(max_num_tokens,
    max_isl + max_batch_size)``, the batch rounded up as ``finetune_setting`` rounds it). trtllm-bench
    sizes the requests from its own estimate of the KV cache (``calc_engine_setting``: the free
    memory over a sequence's KV at isl + osl); the planner's KV room at the row's lengths stands in
    for it. At the serving default (8,192) a replay at the bench's batch had queued most of it where
    prompts are long: 218 of 1,031 published rows ran under 90% of their batch, replayed 53% below
    the waves' price."""
    raw_bs = min(batch_per_replica, TRTLLM_BENCH_MAX_BATCH) / pp
    raw = min(raw_bs * (1.0 + input_len / output_len), TRTLLM_BENCH_MAX_TOKENS)
    tokens = _rounded_up(raw, ((4096, 256), (8192, 512), (math.inf, 1024)), 2048)
    max_bs = _rounded_up(raw_bs, ((256, 32), (1024, 128), (math.inf, 256)), 64)
    return max(tokens, input_len + max_bs)


def _rounded_up(value: float, tiers: tuple[tuple[float, int], ...], least: int) -> int:
    """``value`` rounded up to the step of the first tier whose bound it is below, at least
    ``least`` (``finetune_setting``'s rounding of the token budget and the max batch)."""
    step = next(step for bound, step in tiers if value < bound)
    return max(least, step * math.ceil(value / step))


TRTLLM_BENCH_REQUESTS = {
    (128, 128): 30000,
    (128, 2048): 3000,
    (128, 4096): 1500,
    (500, 2000): 3000,
    (1000, 1000): 3000,
    (1000, 2000): 1500,
    (1024, 1024): 3000,
    (2048, 128): 3000,
    (2048, 2048): 1500,
    (5000, 500): 1500,
    (8192, 1024): 1500,
    (1024, 8192): 1500,
    (20000, 2000): 1000,
    (32768, 1024): 1000,
    (1024, 32768): 1000,
}
"""Requests per trtllm-bench throughput run by input / output length, as TensorRT-LLM's performance
overview lists them for its dataset step (docs/source/performance/perf-overview.md, v0.20, read at
ab4143e1 in a fork snapshot, and
docs/source/developer-guide/perf-overview.md @03e27c7, 'Preparing a Dataset': "For shorter input
and output lengths, a larger number of messages were used to guarantee that the system hit a
steady state"). A row of those tables whose lengths the list leaves out (1000/1000 in the later
doc, 1024/2048 in v0.20) is priced at the count of the nearest listed lengths (``bench_requests``):
an inference from the same document, not a statement. The count matters: at a KV room of
thousands of sequences 3,000 requests run as one full wave and a partial one, which the steady
round (what those 52 rows had been priced at) leaves out."""

KV_FRACTION = re.compile(r"kv_cache_free_gpu_mem_fraction\s*(0?\.\d+)")
"""A KV memory fraction the row states (trtllm-bench's extra options)."""

UNBOUNDED_LOAD = ("infinite", "max-load", "offline", "engine max batch", "request_rate -1", "no delay")


def parse_tokens(value: Any, what: str) -> int:
    """A token count: 2048, '2K' / '2k' (x 1024), '~20k (+-15%)', '1K (derived ...)'. A count
    that is not finite, or beyond the longest sequence planned (``MAX_SEQ_LEN``, the training
    job's bound), makes the row unpriceable rather than overflowing a cost."""
    if isinstance(value, bool):
        raise UnpriceableError(f"{what} is not a token count: {value!r}")
    if isinstance(value, int | float):
        n = float(value)
    else:
        m = re.match(r"\s*~?\s*(\d+(?:\.\d+)?)\s*([kK])?", str(value))
        if not m:
            raise UnpriceableError(f"{what} not stated ({str(value)[:60]})")
        n = float(m.group(1)) * (1024 if m.group(2) else 1)
    if not n <= MAX_SEQ_LEN:  # also NaN
        raise UnpriceableError(f"{what} {value!r} is not a token count up to {MAX_SEQ_LEN:,}")
    if n < 1 or n != int(n):  # 1.5 had read as 1, 0.5 as no tokens
        raise UnpriceableError(f"{what} {value!r} is not a whole count of tokens >= 1")
    return int(n)


def _int(value: Any, what: str) -> int:
    """A positive whole count of the row (a GPU count, a parallel degree, a batch): -1 x -1 GPUs
    had made a layout of one GPU, priced at nonsense."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise UnpriceableError(f"{what} not a number ({str(value)[:60]})")
    if value < 1:
        raise UnpriceableError(f"{what} {value} is not a positive count")
    return value


def model_from_row(row: dict[str, Any]) -> ModelSpec:
    """A ModelSpec from the row's ``model.shape`` (HF key names); a hybrid Mamba-2 row's from the
    catalog (``hybrid_model_from_row``)."""
    model = row.get("model") or {}
    shape = model.get("shape") or {}
    hf_id = str(model.get("hf_id", ""))
    if "mamba" in str(model.get("arch", "")).lower():
        return hybrid_model_from_row(row)
    if "full_attn_heads" in shape or "hybrid" in str(model.get("arch", "")):
        raise UnpriceableError("hybrid linear-attention (Gated DeltaNet) layers are not modelled")
    if "sparse" in str(model.get("arch", "")) or "DSA" in str(model.get("arch", "")):
        raise UnpriceableError("sparse attention (DeepSeek DSA indexer) is not modelled")
    spec: dict[str, Any] = {
        "name": str(model.get("key", "row-model")),
        "source": f"inference_runs row shape ({hf_id})",
        "max_position_embeddings": 1 << 20,
    }
    try:
        spec |= {
            "num_hidden_layers": shape["layers"],
            "hidden_size": shape["hidden"],
            "num_attention_heads": shape["heads"],
            "vocab_size": shape["vocab"],
        }
    except KeyError as err:
        raise UnpriceableError(f"model shape lacks {err.args[0]}") from None
    if "kv_heads" in shape:
        spec["num_key_value_heads"] = shape["kv_heads"]
    if "head_dim" in shape:
        spec["head_dim"] = shape["head_dim"]
    if shape.get("attention") == "MLA":
        for key in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            if key not in shape and key != "q_lora_rank":
                raise UnpriceableError(f"MLA shape lacks {key}")
            if key in shape:
                spec[key] = shape[key]
    experts = shape.get("experts")
    if not experts and shape.get("top_k"):  # experts 0 beside a top-k: a dense price of a MoE row
        raise UnpriceableError(f"model shape: top_k {shape['top_k']} with experts {experts!r}; give both or neither")
    spec["intermediate_size"] = shape.get("ffn") or shape.get("ffn_dense") or shape.get("ffn_expert")
    if spec["intermediate_size"] is None:
        raise UnpriceableError("model shape lacks the FFN width (ffn / ffn_dense / ffn_expert)")
    if experts:
        spec |= {
            "num_local_experts": experts,
            "num_experts_per_tok": shape.get("top_k"),
            "moe_intermediate_size": shape.get("ffn_expert"),
            "n_shared_experts": shape.get("shared_experts") or 0,
        }
        if shape.get("dense_layers"):
            spec["first_k_dense_replace"] = shape["dense_layers"]
        if shape.get("moe_every_n_layers"):
            spec["decoder_sparse_step"] = shape["moe_every_n_layers"]
    if any(f in hf_id.lower() for f in PLAIN_MLP_FAMILIES):
        spec["gated_mlp"] = False
        spec["hidden_act"] = "gelu"
    spec |= catalog_checkpoint_format(spec, model)
    window = shape.get("sliding_window")
    if window is None:  # the shape states no window: the checkpoint's chunked attention, if any
        spec |= catalog_chunked_attention(spec, hf_id)
    else:
        m = re.match(r"\s*(\d+)", str(window))
        if not m:
            raise UnpriceableError(f"sliding_window not a number ({window})")
        spec["sliding_window"] = int(m.group(1))
    try:
        built = validate_as(ModelSpec, spec, "model")
        if window is not None and "alternating" in str(window):  # the layer count validated first
            kinds = full_every(2, built.num_hidden_layers, "sliding_attention")
            built = validate_as(ModelSpec, spec | {"layer_types": kinds}, "model")
    except PlannerError as err:  # a value the schema refuses: the row is unpriceable, as planner.runs reads it
        raise UnpriceableError(str(err)) from None
    return built


CHUNK_AGREEMENT = ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads")
"""What a row's shape must share with the catalog model its hf_id names for that model's chunked
attention to be read (``catalog_chunked_attention``)."""


def catalog_chunked_attention(spec: dict[str, Any], hf_id: str) -> dict[str, Any]:
    """The chunked attention (``attention_chunk_size``, ``layer_types``) of the catalog model whose
    ``hf_repos`` hold the row's ``hf_id``, where the row's shape agrees with it on
    ``CHUNK_AGREEMENT``; else nothing. A row's shape has no key for it, but its checkpoint's
    config.json does: Llama 4's attention_chunk_size 8192 on three of every four layers, which
    TensorRT-LLM applies as a mask in context and generation (engines/trtllm.yaml, chunked_kv).
    Until 2026-12-06 the Llama 4 rows were priced with full attention on every layer (Maverick's
    and Scout's rows at 20K-33K prompts paid the whole context's prefill attention)."""
    known = _catalog_model(spec, hf_id)
    if known is None or not known.attention_chunk_size:
        return {}
    return {"attention_chunk_size": known.attention_chunk_size, "layer_types": known.layer_types}


def catalog_checkpoint_format(spec: dict[str, Any], model: dict[str, Any]) -> dict[str, Any]:
    """The formats of the checkpoint a row ran (``checkpoint_weights_dtype``,
    ``checkpoint_16bit_attention``, ``checkpoint_fp4_format``), from the catalog model whose
    ``hf_repos`` hold it (the first word of the row's ``model.checkpoint``, else, where that names no
    repository the catalog holds, its ``hf_id``) where the row's shape agrees with it on
    ``CHUNK_AGREEMENT``; else nothing. A row's shape has no key for them, but its checkpoint's
    config.json does: openai/gpt-oss leaves the attention 16-bit beside its MXFP4 experts
    (quantization_config modules_to_not_convert), which a row served in MXFP4 runs so
    (``memory.attention_weights_dtype``)."""
    words = str(model.get("checkpoint") or "").split()
    known = _catalog_model(spec, words[0]) if words else None
    if known is None:  # no checkpoint named, or not a repository the catalog holds: the model's own
        known = _catalog_model(spec, str(model.get("hf_id", "")))
    if known is None or known.checkpoint_weights_dtype is None:
        return {}
    return {
        "checkpoint_weights_dtype": known.checkpoint_weights_dtype,
        "checkpoint_16bit_attention": known.checkpoint_16bit_attention,
        "checkpoint_fp4_format": known.checkpoint_fp4_format,
    }


def _catalog_model(spec: dict[str, Any], repo: str) -> ModelSpec | None:
    """The catalog model whose ``hf_repos`` hold ``repo``, where a row's shape ``spec`` agrees with it
    on ``CHUNK_AGREEMENT``; else None."""
    from planner.catalog import model_for_repo

    known = model_for_repo(repo)
    if known is None or any(spec.get(f) is not None and spec[f] != getattr(known, f) for f in CHUNK_AGREEMENT):
        return None
    return known


HYBRID_SHAPE_KEYS = {
    "layers": "num_hidden_layers",
    "hidden": "hidden_size",
    "heads": "num_attention_heads",
    "kv_heads": "num_key_value_heads",
    "experts": "num_experts_total",
    "top_k": "num_experts_per_tok",
    "mamba_layers": "num_mamba_layers",
    "attention_layers": "num_attention_layers",
}
"""Shape keys of a hybrid row (``hybrid_model_from_row``) and what they must equal in the catalog
model its hf_id names (``num_mamba_layers`` and ``num_attention_layers`` count its pattern's blocks)."""


def hybrid_model_from_row(row: dict[str, Any]) -> ModelSpec:
    """A hybrid (Mamba-2) row's model: its layer pattern places the Mamba, attention and MoE blocks,
    which a row's counts do not, so the row is priced as the catalog model whose ``hf_repos`` hold
    its ``hf_id`` (any of the checkpoint's quantised variants: the repository without its -FP8/-BF16
    /-NVFP4 suffix), after the shape it states agrees with it (``HYBRID_SHAPE_KEYS``); else it is
    refused with the reason (as ``planner.runs.hybrid_model_from_row`` prices training rows)."""
    from planner.catalog import list_models

    model = row.get("model") or {}
    stem = re.sub(r"-(bf16|fp8|nvfp4|fp4)$", "", str(model.get("hf_id", "")).lower())
    found = [m for m in list_models() if stem and any(r.lower().startswith(stem) for r in m.hf_repos)]
    if not found:
        raise UnpriceableError(
            f"hybrid Mamba-2 model '{model.get('hf_id')}': priced from a catalog model's layer pattern, and no catalog "
            "model holds that repository"
        )
    spec = found[0]
    blocks = {"num_mamba_layers": spec.blocks_of("M"), "num_attention_layers": spec.blocks_of("*")}
    known = {key: blocks[attr] if attr in blocks else getattr(spec, attr) for key, attr in HYBRID_SHAPE_KEYS.items()}
    shape = model.get("shape") or {}
    wrong = [f"{key} {shape[key]} (catalog {known[key]})" for key in known if key in shape and shape[key] != known[key]]
    if wrong:
        raise UnpriceableError(f"model: the row disagrees with catalog model {spec.name} on {', '.join(wrong)}")
    return spec


def ssm_dtype_from_row(row: dict[str, Any]) -> str | None:
    """A hybrid row's stated SSM state format (``precision.mamba_ssm_cache``: fp32 / float32, bf16 /
    bfloat16, fp16 / float16); None where it is not stated (the checkpoint's, else the engine's
    default, ``step.resolve_ssm_dtype``); other text makes the row unpriceable."""
    text = str((row.get("precision") or {}).get("mamba_ssm_cache", "not stated")).lower()
    if "not stated" in text:
        return None
    for torch_name, name in TORCH_DTYPE_NAMES.items():
        if name in text or torch_name in text:
            return name
    raise UnpriceableError(f"precision.mamba_ssm_cache {text[:40]!r}: fp32, bf16 or fp16")


def cluster_from_row(row: dict[str, Any]) -> ClusterSpec:
    hw = row.get("hardware") or {}
    gpu = str(hw.get("gpu", ""))
    profile = next((p for key, p in GPU_PROFILES if key in gpu), None)
    if profile is None:
        raise UnpriceableError(f"no hardware profile for GPU '{gpu}'")
    count = _int(hw.get("count"), "hardware.count")
    try:
        return load_cluster(profile, gpus=count)
    except PlannerError as err:  # a count no cluster of the profile has (0, beyond any built)
        raise UnpriceableError(f"hardware.count: {err}") from None


TENSORRT_ENGINE_WORDS = ("tensorrt engine", "tensorrtllm_backend")
"""Words of a TensorRT-LLM row's ``engine.backend`` that name the TensorRT-engine runtime (built
engines in the C++ executor: trtllm-bench's and gptSessionBenchmark's builds, Triton's
tensorrtllm_backend), priced with ``trtllm-tensorrt``; any other backend ('pytorch') is the
PyTorch backend, ``trtllm``."""


def engine_from_row(row: dict[str, Any]) -> EngineProfile:
    """The engine profile a row ran: its ``engine.name``, and for TensorRT-LLM its runtime
    (``engine.backend``, ``TENSORRT_ENGINE_WORDS``)."""
    engine = row.get("engine") or {}
    name = str(engine.get("name", ""))
    if name.startswith("TensorRT-LLM"):
        backend = str(engine.get("backend", "")).lower()
        return load_engine("trtllm-tensorrt" if any(w in backend for w in TENSORRT_ENGINE_WORDS) else "trtllm")
    if name.startswith("vLLM"):
        return load_engine("vllm")
    if name.lower().startswith("sglang"):
        return load_engine("sglang")
    raise UnpriceableError(f"no engine profile for '{name}'")


WEIGHT_WORDS = ("fp4", "fp8", "fp16", "bf16", "float16", "bfloat16")
"""Words of a precision description that name a format the planner prices (NVFP4 and MXFP4 as fp4,
any fp8, 16-bit floats as bf16)."""

UNPRICED_WORDS = ("int4", "int8", "awq", "gptq", "w4a16", "w8a8", "fp6", "fp32", "nf4")
"""Words of weight or KV formats the planner has no rate or size for: a description that names one
and no priced format (``WEIGHT_WORDS``) makes the row unpriceable, where it was priced as bf16."""

FORMATS = "(fp4: NVFP4/MXFP4, fp8, bf16/fp16)"


def _priced_format_text(precision: dict[str, Any], key: str) -> str:
    """``precision.<key>`` lower-cased; one that names a format without a rate here
    (``UNPRICED_WORDS``) and none with one (``WEIGHT_WORDS``) makes the row unpriceable."""
    text = str(precision.get(key, "")).lower()
    if any(word in text for word in UNPRICED_WORDS) and not any(word in text for word in WEIGHT_WORDS):
        raise UnpriceableError(f"precision.{key} '{precision.get(key)}': not a format the planner prices {FORMATS}")
    return text


def checkpoint_format(hf_id: str) -> str | None:
    """The weight format of the published checkpoint ``hf_id`` names, where a catalog model holds
    that repository (``ModelSpec.hf_repos``) and states one (``checkpoint_weights_dtype``: gpt-oss's
    MXFP4 experts, DeepSeek-V3's and R1's fp8); None otherwise. For rows whose weights are 'the
    model's default' or not stated."""
    from planner.catalog import model_for_repo

    model = model_for_repo(hf_id)
    return model.checkpoint_weights_dtype if model is not None else None


def dtypes_from_row(row: dict[str, Any]) -> tuple[str, str]:
    """(weights, kv) formats. Weights: fp4 where the text names FP4 (NVFP4, MXFP4), fp8 where FP8,
    else bf16 (fp16 and bf16 cost the same). KV: fp8 where stated (or TensorRT-LLM's 'FP8
    quantization sets the KV cache to FP8'); where not stated, fp8 for fp8/fp4 checkpoints (ModelOpt's
    hf_ptq quantises the KV cache to FP8 by default) and bf16 otherwise; 'auto' follows the checkpoint's
    KV format, which the row does not state: bf16. A format without a rate here (int4 AWQ, int8,
    ``UNPRICED_WORDS``) makes the row unpriceable, where it was priced as bf16."""
    prec = row.get("precision") or {}
    w = _priced_format_text(prec, "weights")
    weights = "fp4" if "fp4" in w else "fp8" if "fp8" in w else "bf16"
    hf_id = str((row.get("model") or {}).get("hf_id", "")).lower()
    if "default" in w or "not stated" in w:
        weights = checkpoint_format(hf_id) or weights
    kv_text = _priced_format_text(prec, "kv_cache")
    if "fp8" in kv_text:
        kv = "fp8"
    elif "not stated" in kv_text and "presumably" not in kv_text and weights in ("fp8", "fp4"):
        kv = "fp8"
    else:
        kv = "bf16"
    return weights, kv


RECIPE_ATTENTION_DP = "sets enable_attention_dp: true"
"""What a row's ``parallel.attention_dp`` says where its table states no layout beyond TP but the
source's recipe for MoE models turns attention DP on: TensorRT-LLM 1.0's perf-overview
(docs/source/performance/perf-overview.md @00f37686, 'For MoE models': ``trtllm-bench --tp $tp_size
--pp $pp_size --ep $ep_size ...`` with llm_options ``enable_attention_dp: true``), whose rows say
'not stated (MoE llm_options example sets enable_attention_dp: true)'. A MoE row at tp > 1 that
says so runs attention DP, with its unstated ep the TP degree (the DEPn layout every row that
states attention DP states: ep = tp; the only attention-DP layout the cost model prices). Read so,
the 132 such rows (Qwen3-235B, Llama 4 Maverick and Scout, Qwen3-30B at TP 2-8) went from -25.1%
signed, 31.6% MAPE, cross-validated (Maverick on B200 -57%, Qwen3-30B at TP 8 on the RTX PRO 6000
-54%) to -6.4% and 21.9% (ARCHITECTURE 9.7)."""


def _attention_dp(par: dict[str, Any], model: ModelSpec, tp: int) -> bool:
    """Whether a row ran attention DP: it says so (True), or it is a MoE row at tp > 1 whose
    source's MoE recipe sets it (``RECIPE_ATTENTION_DP``); 'not stated' alone is the engine's
    default, off."""
    stated = par.get("attention_dp")
    return stated is True or (model.is_moe and tp > 1 and RECIPE_ATTENTION_DP in str(stated))


def layout_from_row(row: dict[str, Any], model: ModelSpec, cluster: ClusterSpec) -> Layouts:
    par = row.get("parallel") or {}
    if par.get("disaggregated"):
        raise UnpriceableError("disaggregated deployment whose pool sizes and batches the row does not state")
    if par.get("speculative"):
        raise UnpriceableError(f"speculative decoding ({par['speculative']}) is not modelled")
    tp = _int(par.get("tp", 1), "parallel.tp")
    pp = _int(par.get("pp") or 1, "parallel.pp")
    adp = _attention_dp(par, model, tp)
    ep_raw = par.get("ep")
    if ep_raw is None or (isinstance(ep_raw, str) and ep_raw.startswith("not stated")):
        # the engines' default: experts tensor-parallel over tp (TensorRT-LLM moe_ep_size 1, vLLM
        # without EP); under attention DP, DEP: experts over the attention group (RECIPE_ATTENTION_DP)
        ep = tp if adp else 1
    else:
        ep = _int(ep_raw, "parallel.ep")
    dp_attention = par.get("dp_attention")
    replicas = par.get("dp_replicas") or 1
    replicas = _int(replicas, "parallel.dp_replicas")
    if adp and isinstance(dp_attention, int) and tp * dp_attention * pp * replicas == cluster.num_gpus:
        tp = tp * dp_attention  # vLLM's DP attention (tp 1, dp n): the data-parallel ranks form the attention group
    if tp * pp * replicas != cluster.num_gpus:
        raise UnpriceableError(
            f"layout tp {tp} x pp {pp} x replicas {replicas} does not use the {cluster.num_gpus} GPUs"
        )
    if model.is_moe and (tp % ep or model.num_experts_total % ep):
        raise UnpriceableError(f"ep {ep} does not divide tp {tp} and the {model.num_experts_total} experts")
    if not model.is_moe and ep != 1:  # no experts to spread; the engines take no EP for a dense model
        raise UnpriceableError(f"parallel.ep {ep} on a dense model: expert parallelism needs experts")
    if not adp and model.num_attention_heads % tp:
        raise UnpriceableError(f"tp {tp} does not divide the {model.num_attention_heads} heads")
    return Layouts.of(tp, pp, ep, adp, replicas)


@dataclass
class RowPlan:
    """A translated row: what to price and the published metrics (SI)."""

    name: str
    group: str
    setting: Setting
    layout: Layouts
    mode: str
    input_len: int
    output_len: int
    batch: float
    published: dict[str, float]
    cost: RoundCost | None = None  # throughput rows: the cost of the unit the tokens count over
    tokens: float = 0.0  # tokens (of the scored kind) produced per ``cost`` per replica
    notes: list[str] = field(default_factory=list)
    requests: int | None = None  # a rate or concurrency row's stated request count: its latencies are replayed
    through_server: bool = False  # its latencies were measured by a client of a server (``through_server``)
    # the throughput plan serve reports for the row (``served``) over the fit's stand-in (``cost``), at a
    # first fit's parameters: the fit prices the row at cost x this (``calibrate.replay_ratios``)
    replay_ratio: float = 1.0
    # a replayed TPOT row's steady round at its load and the replay's TPOT over it, at a first fit's
    # parameters: the fit prices the row's TPOT at the round x this (``calibrate.replay_ratios``)
    tpot_cost: RoundCost | None = None
    tpot_ratio: float = 1.0
    engine_ttft_cache: dict[tuple[float, ...], float] = field(default_factory=dict, repr=False, compare=False)

    def engine_ttft_s(self, params: FittedParameters) -> float:
        """The row's predicted TTFT at ``params`` without the server's request path: the engine's
        first token, which the request path adds to (``calibrate.fit_request_path``). Kept per
        parameters, so that a fit that varies only the request path replays the row once."""
        engine_only = params.model_copy(update={"request_path_ms": 0.0})
        key = tuple(float(v) for v in engine_only.model_dump().values())
        if key not in self.engine_ttft_cache:
            self.engine_ttft_cache[key] = predict(self, engine_only)["ttft_s"]
        return self.engine_ttft_cache[key]

    @property
    def architecture(self) -> str:
        return str(self.setting.cluster.gpu.architecture)

    @property
    def key(self) -> str:
        """The (engine, architecture) whose fitted parameters price this row."""
        return f"{self.setting.engine.name}/{self.architecture}"


SERVER_WORDS = re.compile(r"(?<![a-z])serv(e|er|ers|ing)(?![a-z])|triton")
"""Words of a row's ``engine.backend``, ``engine.tool`` or ``workload.tool`` (lower-cased) that say a
client measured it through a server: Triton's tensorrtllm_backend ("online serving"), ``vllm bench
serve``, ``trtllm-serve``, SGLang's ``bench_serving``; whole words, so "reserved" is none. The
in-process benchmarks (trtllm-bench, gptManagerBenchmark, gptSessionBenchmark) hold none."""


def through_server(row: dict[str, Any]) -> bool:
    """Whether the row's latencies were measured by a client through a server, so that its TTFT
    holds the request path (``FittedParameters.request_path_ms``) beside the engine's first token."""
    engine, wl = row.get("engine") or {}, row.get("workload") or {}
    text = " ".join(str(v) for v in (engine.get("backend"), engine.get("tool"), wl.get("tool")) if v).lower()
    return SERVER_WORDS.search(text) is not None


def _mode(row: dict[str, Any]) -> tuple[str, float]:
    wl = row.get("workload") or {}
    tool = str((row.get("engine") or {}).get("tool", ""))
    conc = wl.get("concurrency")
    text = f"{conc} {tool} {wl.get('batch_size', '')}".lower()
    if "request_rate_qps" in wl:
        return "rate", _request_rate(wl["request_rate_qps"])
    if "static batch" in str(conc).lower():
        return "static", float(_int(wl.get("batch_size"), "workload.batch_size"))
    if isinstance(conc, int) and not isinstance(conc, bool):
        if conc < 1:
            raise UnpriceableError(f"workload.concurrency {conc} is not a positive count")
        if conc == 1 and wl.get("osl") == 1:
            return "ttft", 1.0
        return "concurrency", float(conc)
    if any(k in text for k in UNBOUNDED_LOAD):
        return "max_throughput", 0.0
    raise UnpriceableError(f"load not stated (concurrency: {str(conc)[:60]})")


def _request_rate(stated: Any) -> float:
    """A row's offered request rate: a positive number, or 'inf' (an unbounded rate: the engine runs
    at its capacity, ``_batch_at_load``); text, NaN, 0 or true make the row unpriceable."""
    try:
        rate = float(stated)
    except (TypeError, ValueError):
        rate = math.nan
    if isinstance(stated, bool) or not rate > 0:
        raise UnpriceableError(f"workload.request_rate_qps not a positive number ({str(stated)[:60]})")
    return rate


SCORED_FIGURES = (
    "output_tokens_per_s_per_gpu",
    "output_tokens_per_s_total",
    "total_tokens_per_s_per_gpu",
    "ttft_ms",
    "ttft_ms_mean",
    "ttft_ms_p50",
    "itl_ms_mean",
    "itl_ms_p50",
    "tpot_ms_mean",
    "tpot_ms_p50",
)
"""The ``measured`` fields a row is scored on (``_published``); the rest are notes."""


def _published(row: dict[str, Any], count: int, mode: str) -> dict[str, float]:
    """The row's scored figures in SI. One stated (not null) that is not a positive finite number
    makes the row unpriceable: a NaN or 0 would score as NaN or inf, and skipping it would score
    the row on another figure (a per-GPU rate of NaN became the total / GPUs) without saying so."""
    m = row.get("measured") or {}
    stated = {k: m[k] for k in SCORED_FIGURES if m.get(k) is not None}
    bad = next((k for k, v in stated.items() if positive_figure(v) is None), None)
    if bad is not None:
        raise UnpriceableError(f"measured.{bad} is not a positive finite number ({shown_value(stated[bad])})")
    figures = {k: float(v) for k, v in stated.items()}
    out: dict[str, float] = {}
    if mode in ("max_throughput", "static", "concurrency"):
        if "output_tokens_per_s_per_gpu" in figures:
            out["output_tokens_per_s_per_gpu"] = figures["output_tokens_per_s_per_gpu"]
        elif "output_tokens_per_s_total" in figures:
            out["output_tokens_per_s_per_gpu"] = figures["output_tokens_per_s_total"] / count
        elif "total_tokens_per_s_per_gpu" in figures:
            out["total_tokens_per_s_per_gpu"] = figures["total_tokens_per_s_per_gpu"]
    for key, name in (("ttft_ms", "ttft_s"), ("ttft_ms_mean", "ttft_s"), ("ttft_ms_p50", "ttft_s")):
        if key in figures:
            out[name] = figures[key] / 1e3
    for key in ("itl_ms_mean", "itl_ms_p50", "tpot_ms_mean", "tpot_ms_p50"):
        if key in figures:
            out["tpot_s"] = figures[key] / 1e3
    if not out:
        raise UnpriceableError(f"no metric the translator scores ({', '.join(sorted(k for k in m if k != 'derived'))})")
    return out


SLOWEST_PLAUSIBLE_UTILISATION = 1e-5
"""A published serving rate whose weight FLOPs (2 x active parameters per token) use less than
this share of the GPU's dense bf16 peak is refused as a typo or another unit: the slowest shipped
row uses 0.24% (Qwen3-30B-A3B at 32K input on eight RTX PRO 6000), and 1e-300 tokens/s had been
scored with a 300-digit error. A judgement with a 240x margin."""


def _check_plausible_rate(published: dict[str, float], model: ModelSpec, cluster: ClusterSpec) -> None:
    """Refuse a throughput figure below ``SLOWEST_PLAUSIBLE_UTILISATION`` of the GPU (UnpriceableError)."""
    peak = cluster.gpu.peak_flops_per_s("bf16")
    for key in ("output_tokens_per_s_per_gpu", "total_tokens_per_s_per_gpu"):
        rate = published.get(key)
        floor = SLOWEST_PLAUSIBLE_UTILISATION * peak / (2.0 * model.parameter_counts.active_per_token)
        if rate is not None and rate < floor:
            raise UnpriceableError(
                f"measured.{key} {rate:.3g} is below {floor:.3g} tokens/s per GPU, {SLOWEST_PLAUSIBLE_UTILISATION:.0e} "
                f"of a {cluster.gpu.name}'s bf16 peak for {model.name}'s weights: a typo or another unit"
            )


def _check_static_rate_reachable(plan: RowPlan) -> None:
    """Refuse a static-batch row whose published output rate is faster than its batch can step
    (UnpriceableError): every decode step of a batch of B reads the weights each GPU holds (the
    routed experts its B / pp tokens touch: ``step.round_weight_bytes``, as the round prices), at best at the
    GPU's datasheet HBM bandwidth, so a GPU makes at most B / (weights / bandwidth) / GPUs output
    tokens a second, before any KV read, prefill or overhead. TensorRT-LLM 0.9's Mixtral-8x7B at TP 2
    on A100, batch 32 of 2K/2K, states 801 tokens/s per GPU, where its 46.5 GB per GPU at 2.04 TB/s
    allow 703: not output tokens per GPU (its siblings' figures are within 25% of the prediction)."""
    s, lay = plan.setting, plan.layout
    if plan.mode != "static" or "output_tokens_per_s_per_gpu" not in plan.published:
        return
    non_expert, experts = round_weight_bytes(s, lay, np.array([plan.batch / float(lay.pp[0])]))
    step_s = float(non_expert[0] + experts[0]) / s.cluster.gpu.hbm_bandwidth_bytes_per_s
    ceiling = plan.batch / step_s / float(lay.gpus_per_replica[0])
    rate = plan.published["output_tokens_per_s_per_gpu"]
    if rate > ceiling:
        raise UnpriceableError(
            f"measured.output_tokens_per_s_per_gpu {rate:.3g} is above {ceiling:.3g}, what a static batch of "
            f"{plan.batch:.0f} reaches when each step reads its weights at the {s.cluster.gpu.name}'s datasheet HBM "
            "bandwidth: a typo or another unit"
        )


def plan_row(row: dict[str, Any], fitted: dict[str, FittedParameters] | None = None) -> RowPlan:
    """Translate one row (see the module docstring); raises UnpriceableError with the reason."""
    model = model_from_row(row)
    cluster = cluster_from_row(row)
    engine = engine_from_row(row).for_gpu(cluster.gpu)
    tool = str((row.get("engine") or {}).get("tool", ""))
    bench = "trtllm-bench" in tool
    if bench:
        engine = engine.model_copy(update={"max_batch_size": TRTLLM_BENCH_MAX_BATCH})
    if CHUNKED_CONTEXT in tool:  # gptManagerBenchmark's --enable_chunked_context, as the row states it
        engine = engine.model_copy(update={"chunked_prefill": True})
    stated = KV_FRACTION.search(str((row.get("workload") or {}).get("batch_size", "")))
    if stated:
        engine = engine.model_copy(
            update={"gpu_memory_fraction": float(stated.group(1)), "gpu_memory_fraction_by_tp": None}
        )
    weights, kv = dtypes_from_row(row)
    lay = layout_from_row(row, model, cluster)
    wl = row.get("workload") or {}
    isl = parse_tokens(wl.get("isl"), "workload.isl")
    osl = parse_tokens(wl.get("osl"), "workload.osl")
    mode, load = _mode(row)
    arch = cluster.gpu.architecture
    key = f"{engine.name}/{arch}"
    params = (fitted or {}).get(key) or engine.parameters(arch)
    s = Setting(model, cluster, engine, weights, kv, params, resolve_ssm_dtype(model, engine, ssm_dtype_from_row(row)))
    published = _published(row, cluster.num_gpus, mode)
    if osl == 1 and "tpot_s" in published:  # as `plan serve` refuses a TPOT target at output_len 1
        raise UnpriceableError("a TPOT at workload.osl 1: a request of one output token has no token after the first")
    _check_plausible_rate(published, model, cluster)
    name, group = str(row.get("name")), str(row.get("group"))
    plan = RowPlan(name, group, s, lay, mode, isl, osl, load, published, through_server=through_server(row))
    if mode == "max_throughput":
        mem = s.memory(lay, reserved_context(engine, isl, osl))
        if bench:  # the token budget trtllm-bench builds for at this batch (its activations take memory)
            budget = trtllm_bench_max_num_tokens(float(mem.max_concurrency[0]), isl, osl, int(lay.pp[0]))
            engine = engine.model_copy(update={"max_num_batched_tokens": budget})
            s = replace(s, engine=engine)
            plan.setting = s
            mem = s.memory(lay, reserved_context(engine, isl, osl))
        batch = float(mem.max_concurrency[0])
        if batch < 1:
            raise UnpriceableError(
                f"does not fit: {mem.weights_bytes[0] / 2**30:.0f} GiB of weights per GPU leave no KV room "
                f"on {cluster.gpu.name}"
            )
        plan.batch = batch
    requests = (row.get("workload") or {}).get("num_requests")
    stated = isinstance(requests, int) and not isinstance(requests, bool) and requests > 0
    if mode == "max_throughput" and not stated and bench:
        requests, stated = bench_requests(isl, osl), True
        plan.notes.append(f"requests not stated: {requests}, TensorRT-LLM's count for the nearest listed lengths")
    if stated and requests > MAX_REPLAYED_REQUESTS:
        raise UnpriceableError(
            f"workload.num_requests {requests:,} is more than the {MAX_REPLAYED_REQUESTS:,} requests a row is "
            "replayed with"
        )
    if mode in ("rate", "concurrency", "max_throughput") and stated:
        plan.requests = requests
    if mode in ("rate", "concurrency") and stated:
        at = f"at {load:g}/s" if mode == "rate" else f"{load:g} at a time"
        plan.notes.append(f"{requests} requests {at} replayed iteration by iteration")
    if mode == "max_throughput" and stated:
        plan.cost, plan.tokens = _waves(s, lay, plan.batch / lay.replicas[0], requests / lay.replicas[0], isl, osl)
        plan.notes.append(f"{requests} requests at once, replayed iteration by iteration (waves of {plan.batch:.0f})")
    elif mode in ("max_throughput", "concurrency"):
        b = np.array([plan.batch / lay.replicas[0]])
        plan.cost = steady_round(s, lay, b, isl, osl)
        plan.tokens = float(b[0])
    elif mode == "static":
        b = np.array([plan.batch])
        prefill = round_cost(s, lay, np.zeros(1), np.zeros(1), b * isl, isl)
        decode = round_cost(s, lay, b, np.array([isl + osl / 2.0]), np.zeros(1), isl)
        plan.cost = prefill.plus(decode, float(osl))
        plan.tokens = float(b[0] * osl)
    if "total_tokens_per_s_per_gpu" in published and plan.cost is not None:
        plan.tokens *= (isl + osl) / osl
    _check_static_rate_reachable(plan)
    return plan


def bench_requests(isl: int, osl: int) -> int:
    """``TRTLLM_BENCH_REQUESTS`` at the listed input / output lengths nearest ``isl`` / ``osl`` (on a
    log scale: 1000/1000 takes 1024/1024's 3,000, 1024/2048 takes 1000/2000's 1,500)."""

    def distance(lengths: tuple[int, int]) -> float:
        return math.hypot(math.log(isl / lengths[0]), math.log(osl / lengths[1]))

    return TRTLLM_BENCH_REQUESTS[min(TRTLLM_BENCH_REQUESTS, key=distance)]


def _waves(s: Setting, lay: Layouts, batch: float, requests: float, isl: int, osl: int) -> tuple[RoundCost, float]:
    """An offline benchmark of ``requests`` fixed-length requests all queued at the start, at most
    ``batch`` in flight: they run in waves (requests of equal length admitted together finish
    together), each a prefill of its prompts and osl decode rounds; the last wave is partial.
    Under pipeline parallelism a wave's prompts are split over the pp micro-batches as its
    sequences are (``round_cost``'s prefill tokens are the replica's), each stage prefilling its
    share of them; until 2026-12-06 every micro-batch carried the whole wave's prompts, as one
    prompt's TTFT does, which charged the prefill pp times over (the RTX PRO 6000 tp1 rows at pp
    2 / 4 / 8 came out 21% / 30% / 41% under their published throughput, cross-validated; now
    -3% / +7% / +15%, the last a pipeline's bubbles, which are not priced). (trtllm-bench's
    synthetic datasets have stdev 0; its ramp-up, max_num_tokens prompt tokens per iteration, is
    short against osl decode rounds.) Returns (cost, output tokens)."""
    full, rest = divmod(requests, batch)
    sizes = [(batch, full)] + ([(rest, 1.0)] if rest >= 1 else [])
    total: RoundCost | None = None
    for b, count in sizes:
        if count <= 0:
            continue
        arr = np.array([b])
        prefill = round_cost(s, lay, np.zeros(1), np.zeros(1), arr * isl, isl)
        wave = prefill.plus(round_cost(s, lay, arr, np.array([isl + osl / 2.0]), np.zeros(1), isl), float(osl))
        total = wave.scaled(count) if total is None else total.plus(wave, count)
    assert total is not None
    return total, requests * osl


def replayed_load(plan: RowPlan, s: Setting) -> Replayed:
    """A row's stated request count replayed at its load (``replay.replay``) in setting ``s``, every
    request measured, as its benchmark ran: at its request rate, as a closed loop of its
    concurrency, or (a maximum-throughput row) all sent at once."""
    assert plan.mode in ("rate", "concurrency", "max_throughput") and plan.requests is not None
    isl, osl = plan.input_len, plan.output_len
    if plan.mode == "rate":
        return replay(s, plan.layout, isl, osl, plan.batch, plan.requests)
    if plan.mode == "max_throughput":
        return replay(s, plan.layout, isl, osl, math.inf, plan.requests)
    return replay(s, plan.layout, isl, osl, math.inf, plan.requests, concurrency=round(plan.batch))


def predict(plan: RowPlan, params: FittedParameters | None = None) -> dict[str, float]:
    """The row's metrics as the model predicts them at ``params`` (default: the plan's)."""
    s = plan.setting
    p = params or s.params
    lay = plan.layout
    out: dict[str, float] = {}
    isl, osl = plan.input_len, plan.output_len
    gpus = float(lay.gpus_per_replica[0])
    if plan.cost is not None:
        t = float(plan.cost.total_s(p)[0])
        rate = plan.tokens / t / gpus
        for key in ("output_tokens_per_s_per_gpu", "total_tokens_per_s_per_gpu"):
            if key in plan.published:
                out[key] = rate
    want_latency = {"ttft_s", "tpot_s"} & set(plan.published)
    if not want_latency:
        return out
    s_p = Setting(s.model, s.cluster, s.engine, s.weights_dtype, s.kv_dtype, p, s.ssm_state_dtype)
    path_s = p.request_path_s if plan.through_server else 0.0  # a client's TTFT holds the server's request path
    if plan.mode == "ttft":
        c = round_cost(s_p, lay, np.zeros(1), np.zeros(1), np.array([float(isl)]) * lay.pp, isl)
        out["ttft_s"] = float(c.total_s(p)[0]) + path_s
        return out
    if plan.mode in ("rate", "concurrency") and plan.requests is not None:
        r = replayed_load(plan, s_p)
        ttft, tpot = r.ttft_s, r.itl_s
    else:
        ttft, tpot = _latencies(s_p, lay, _batch_at_load(s_p, plan), isl, osl)
    if "ttft_s" in plan.published:
        out["ttft_s"] = ttft + path_s
    if "tpot_s" in plan.published:
        out["tpot_s"] = tpot
    return out


def served(
    plan: RowPlan, params: FittedParameters | None = None, predicted: dict[str, float] | None = None
) -> dict[str, float]:
    """A row's metrics as the engine's replay prices its run, at ``params`` (default: the plan's);
    ``predict`` prices the rows by their waves and steady round, the fit's fast stand-ins.

    A maximum-throughput or concurrency row that states its request count (or, run by trtllm-bench,
    takes TensorRT-LLM's count, ``bench_requests``) reports the output tokens of that whole run over
    its duration, so its throughput is the replay of that run (``replayed_load``: every request
    sent at once, or the closed loop of its concurrency; ``Replayed.output_tokens_per_s``), tail
    included: the last requests, fewer than the batch, decoding at a small batch to the end. From
    session 55 to 57 (2026-12-07) such a row was scored by the steady state ``plan serve`` prints
    for its layout instead, which leaves the tail out: Llama-3.3-70B in FP4 on eight RTX PRO 6000
    at TP1 x PP8, 1,500 requests of 1,000 / 2,000 tokens in a KV room of 1,420, runs one full wave
    and then 80 requests for as long again; the steady state came out 40% above the published 868
    tokens/s per GPU, the run replayed 7%, and the fit, pulled down by such rows, left the
    single-GPU rows of the same key 10-30% under theirs (ARCHITECTURE 9.7). A row without a count
    is scored as ``plan serve`` reports its layout: a maximum-throughput row without targets
    (``search.replay_at_batch``: the closed-loop replay at the row's batch, or at as many as the
    engine's token budget runs), a concurrency row as ``plan serve --concurrency`` does
    (``search.replay_at_load``), whose TTFT and TPOT come from the same replay at its load (a rate
    row's from ``plan serve --request-rate``'s), where ``predict`` gives the steady round's; a row
    that states its count has its latencies replayed with it in ``predict``. Other modes:
    ``predict``'s, or ``predicted`` where the caller has it at the same parameters (not replayed
    twice)."""
    from planner.serving.schemas import ServeRequest
    from planner.serving.search import replay_at_batch, replay_at_load

    out = dict(predict(plan, params) if predicted is None else predicted)
    scores_rate = plan.mode in ("max_throughput", "concurrency") and bool(set(THROUGHPUT_METRICS) & set(out))
    at_load = plan.mode in ("concurrency", "rate") and plan.requests is None and bool({"ttft_s", "tpot_s"} & set(out))
    if not (scores_rate or at_load):
        return out
    s = plan.setting
    s_p = replace(s, params=params or s.params)
    isl, osl = plan.input_len, plan.output_len
    if scores_rate and plan.requests is not None:  # the run of its count, as its benchmark reports it
        rate = replayed_load(plan, s_p).output_tokens_per_s / float(plan.layout.gpus_per_replica[0])
    elif plan.mode in ("concurrency", "rate"):  # as plan serve --concurrency / --request-rate prices the layout
        load = {"concurrency": round(plan.batch)} if plan.mode == "concurrency" else {"request_rate": plan.batch}
        path_s = s_p.params.request_path_s if plan.through_server else 0.0  # in process: no server path
        loaded = replay_at_load(s_p, plan.layout, ServeRequest(input_len=isl, output_len=osl, **load), path_s)
        if loaded is None:
            return out
        rate = loaded.output_tokens_per_s_per_gpu
        if at_load:
            if "ttft_s" in out:  # the replay's TTFT holds the request path; a row measured in process does not
                out["ttft_s"] = loaded.ttft_s - s_p.params.request_path_s + path_s
            if "tpot_s" in out and loaded.tpot_s is not None:
                out["tpot_s"] = loaded.tpot_s
    else:
        request = ServeRequest(input_len=isl, output_len=osl)
        rate = replay_at_batch(
            s_p, plan.layout, request, plan.batch / float(plan.layout.replicas[0])
        ).output_tokens_per_s_per_gpu
    if scores_rate:
        for key in THROUGHPUT_METRICS:
            if key in out:
                out[key] = rate * ((isl + osl) / osl if key == "total_tokens_per_s_per_gpu" else 1.0)
    return out


def _latencies(s: Setting, lay: Layouts, batch: float, isl: int, osl: int) -> tuple[float, float]:
    from planner.serving.search import first_token_s

    b = np.array([batch])
    tpot = steady_round(s, lay, b, isl, osl).total_s(s.params)
    return float(first_token_s(s, lay, b, np.array([isl + osl / 2.0]), isl, tpot)[0]), float(tpot[0])


def _batch_at_load(s: Setting, plan: RowPlan) -> float:
    """Sequences in flight per replica: the stated concurrency, or for a request rate the fixed
    point of Little's law B = rate x (TTFT + osl x TPOT(B)), at most what the KV cache holds and
    the token budget sustains (``search.budget_batch``): a rate beyond the replica's capacity
    queues, and the engine runs the batch whose prompts its budget admits. Without the budget's
    cap, TensorRT-LLM's online rows at an unbounded rate (70B, 467 / 16 tokens) ran the steady round
    at the KV room, 2,048 sequences taking 60K prompt tokens a round: 4.1 s, where their replay
    gives 0.41 s (published 0.55); with it, 271 sequences and 0.56 s."""
    from planner.serving.search import budget_batch

    reps = float(plan.layout.replicas[0])
    if plan.mode in ("concurrency", "static"):
        return plan.batch / reps if plan.mode == "concurrency" else plan.batch
    rate = plan.batch / reps
    mem = s.memory(plan.layout, reserved_context(s.engine, plan.input_len, plan.output_len))
    sustained = budget_batch(s, plan.layout, plan.input_len, plan.output_len)
    cap = max(1.0, min(float(mem.max_concurrency[0]), sustained))
    b = 1.0
    for _ in range(30):
        ttft, tpot = _latencies(s, plan.layout, b, plan.input_len, plan.output_len)
        nb = min(cap, max(1.0, rate * (ttft + plan.output_len * tpot)))
        if abs(nb - b) < 1e-3 * b:
            break
        b = nb
    return b


ROW_SECTIONS = ("source", "model", "precision", "hardware", "engine", "parallel", "workload", "measured")
"""The sections of a serving runs row, each a mapping of its fields (inference_runs.yaml's schema);
the model's ``shape`` is one too."""


def load_rows(path: str | Path) -> list[dict[str, Any]]:
    """The ``runs`` list of a serving runs file. As ``planner.runs.load_runs`` reads a training
    runs file, a row that is not a mapping, or a section of one that is not, fails the whole file
    with the row and field named (the translator reads every section as a mapping); a value the
    translator cannot use leaves just its row unpriced, with the reason."""
    rows = read_yaml(Path(path)).get("runs")
    if not isinstance(rows, list):
        raise PlannerError(f"{path}: field 'runs': expected a list of run mappings")
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise PlannerError(f"{path}: runs[{i}]: expected a run mapping, got {type(row).__name__}")
        model = row.get("model")
        sections = [(key, row.get(key)) for key in ROW_SECTIONS]
        sections += [("model.shape", model.get("shape"))] if isinstance(model, dict) else []
        for key, value in sections:
            if value is not None and not isinstance(value, dict):
                raise PlannerError(
                    f"{path}: runs[{i}] ({row.get('name')!r}): field '{key}': expected a mapping, "
                    f"got {type(value).__name__}"
                )
    check_row_names(rows, path)
    return rows
