"""Hugging Face config.json -> ModelSpec: the keys ModelSpec shares with HF (after
``HF_KEY_ALIASES``), each model family's class defaults the file leaves out, and refusals by name
of what ModelSpec cannot price (state-space, recurrent, linear or sparse attention layers, MoE
layouts it does not express)."""

from __future__ import annotations

import re
from typing import Any

from planner.errors import PlannerError, shown_value, validate_as
from planner.schemas.model import MAX_MODEL_DIMENSION, ModelSpec

HF_KEY_ALIASES = {
    # GPT-2 style configs (transformers' GPT2Config.attribute_map).
    "n_layer": "num_hidden_layers",
    "n_embd": "hidden_size",
    "n_head": "num_attention_heads",
    "n_positions": "max_position_embeddings",
    "n_inner": "intermediate_size",
    "activation_function": "hidden_act",
    # Falcon/BLOOM style.
    "n_heads": "num_attention_heads",
    "num_kv_heads": "num_key_value_heads",
    # Ling / Bailing-MoE: DeepSeek-style shared experts, each moe_intermediate_size wide.
    "num_shared_experts": "n_shared_experts",
    # The norms' epsilon, by family: Llama/Qwen/DeepSeek, BERT-style, GPT-2/BLOOM/Nemotron-H.
    "rms_norm_eps": "norm_eps",
    "layer_norm_eps": "norm_eps",
    "layer_norm_epsilon": "norm_eps",
}
"""HF config keys that name a canonical ModelSpec key another way."""

LEARNED_POSITION_MODELS = frozenset({"gpt2", "gpt_bigcode", "opt", "gpt_neo"})
"""HF model types with learned absolute position embeddings, LayerNorm and biases."""

TIED_BY_DEFAULT = frozenset({"gemma", "gemma2", "gemma3_text"})
"""HF model types whose config class defaults ``tie_word_embeddings`` to True where a config.json
leaves it out (transformers GemmaConfig, Gemma2Config, Gemma3TextConfig: ``tie_word_embeddings=True``;
LlamaConfig, MistralConfig, Qwen2Config and most others default to False, as ModelSpec does).
Gemma-2-9B read as untied counted 10.16 B parameters instead of its 9.24 B."""

ALTERNATING_SLIDING_WINDOW = frozenset({"gemma2"})
"""HF model types whose ``sliding_window`` applies to every other layer, starting with layer 0,
when the config lists no ``layer_types`` (transformers Gemma2DecoderLayer: ``is_sliding = not
bool(layer_idx % 2)``; newer Gemma2Config writes the same list as its layer_types default)."""

QKV_BIAS_MODELS = frozenset({"qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl"})
"""HF model types whose q, k and v projections always carry a bias, which their config.json does not
state (transformers Qwen2Attention and Qwen2MoeAttention: ``nn.Linear(..., bias=True)`` for q_proj,
k_proj and v_proj, ``bias=False`` for o_proj; Qwen2Config has no attention_bias key): read as
``attention_bias`` (the Megatron export's --add-qkv-bias). ModelSpec's attention_bias also counts an
o_proj bias (HF Llama's), h parameters a layer that Qwen2 lacks: 0.001% of Qwen2.5-7B."""

USE_SLIDING_WINDOW = "use_sliding_window"
MAX_WINDOW_LAYERS = "max_window_layers"
"""Qwen2's switch on its window and the first layer it windows (``_qwen2_window``)."""

QWEN2_MAX_WINDOW_LAYERS = 28
"""transformers' default ``max_window_layers`` (Qwen2Config, Qwen2MoeConfig, Qwen3Config,
Qwen3MoeConfig ``max_window_layers=28``), where a config switches the window on without it."""

SLIDING_WINDOW_PATTERN = "sliding_window_pattern"
"""The key of configs that slide on all but every N-th layer where they list no ``layer_types``
(Gemma 3's 6, Cohere2's 4: transformers Gemma3TextConfig builds its layer_types default as
``"sliding_attention" if bool((i + 1) % sliding_window_pattern) else "full_attention"``, and
Cohere2 the same): read so, where the window had been priced on every layer."""

SINK_ATTENTION_TYPES = frozenset({"gpt_oss"})
"""HF model types whose attention has a learned sink logit per head (transformers
modeling_gpt_oss.py: ``GptOssAttention.sinks`` of shape [num_attention_heads], concatenated to
every query's scores before the softmax) and biases on the expert MLPs (``GptOssExperts``
gate_up_proj_bias, down_proj_bias), neither of which the config states as a key."""

FALCON_TYPES = frozenset({"falcon", "RefinedWebModel", "RefinedWeb"})
"""Falcon, with the RW-format configs of its first release (model_type RefinedWebModel /
RefinedWeb, keys n_layer, n_head, multi_query, parallel_attn, bias). transformers FalconConfig and
modeling_falcon.py: a plain 4h GELU MLP (dense_h_to_4h, ffn_hidden_size defaulting to 4 x
hidden_size, activation gelu), LayerNorm, biases only where ``bias`` is set (False in the released
models), rotary positions unless ``alibi``, tied embeddings (PretrainedConfig's default), and the
KV heads: one with ``multi_query`` (Falcon-7B), ``num_kv_heads`` with ``new_decoder_architecture``
(Falcon-40B, 180B), else one per head."""

BLOOM_TYPES = frozenset({"bloom"})
"""BLOOM, whose config (transformers BloomConfig: n_layer, n_head, hidden_size, vocab_size) leaves
its class the rest: a 4h GELU MLP (BloomMLP: dense_h_to_4h, bloom_gelu_forward), LayerNorm, biases
on every linear, ALiBi positions (no position parameters), tied embeddings (PretrainedConfig's
default) and no max_position_embeddings key: ``BLOOM_TRAINED_SEQUENCE`` stands for it."""

BLOOM_TRAINED_SEQUENCE = 2048
"""The sequence length the BLOOM models were trained at (arXiv:2211.05100 section 3.4, 'sequence
length of 2048 tokens'; bigscience-workshop/bigscience train/tr11-176B-ml/README.md SEQ_LEN=2048),
read as the context of a BLOOM config, which has no position-count key."""

STATE_SPACE_TYPES = frozenset({"mamba", "mamba2", "jamba", "falcon_mamba", "zamba", "zamba2", "bamba"})
"""HF model types built from state-space (Mamba) layers, alone or between attention layers, that the
planner does not read (NemotronH's, ``NEMOTRON_H_TYPES``, it does)."""

NEMOTRON_H_TYPES = frozenset({"nemotron_h"})
"""NemotronH (Nemotron-H, Nemotron Nano 2, Nemotron 3 Nano): Mamba-2, attention, MLP and MoE blocks
placed by ``hybrid_override_pattern`` (``_nemotron_h_fields``)."""

NEMOTRON_H_KEYS = {
    "mamba_num_heads": ("mamba_num_heads",),
    "mamba_head_dim": ("mamba_head_dim",),
    "ssm_state_size": ("ssm_state_size",),
    "mamba_n_groups": ("n_groups", "mamba_n_groups"),
    "mamba_conv_kernel": ("conv_kernel", "mamba_d_conv"),
    "mamba_chunk_size": ("chunk_size", "mamba_chunk_size"),
    "head_dim": ("attention_head_dim", "head_dim"),
}
"""ModelSpec field <- the NemotronH config keys that may hold it: the config.json the checkpoints
ship (remote code: n_groups, conv_kernel, chunk_size, attention_head_dim) and transformers'
NemotronHConfig (mamba_n_groups, mamba_d_conv, mamba_chunk_size)."""

RECURRENT_TYPES = frozenset({"rwkv", "rwkv5", "rwkv6", "rwkv7", "recurrent_gemma", "xlstm"})
"""HF model types built from recurrent or linear-attention blocks (RWKV's time mixing,
RecurrentGemma's RG-LRU, xLSTM), which have no attention heads to price."""

ENCODER_TYPES = frozenset(
    {
        "bert", "roberta", "xlm-roberta", "camembert", "distilbert", "albert", "electra", "deberta",
        "deberta-v2", "mpnet", "modernbert", "nomic_bert", "t5", "mt5", "umt5", "longt5", "bart", "mbart",
        "pegasus", "marian", "whisper",
    }
)  # fmt: skip
"""HF model types whose language model is a bidirectional encoder (BERT's family, ModernBERT) or an
encoder-decoder (T5, BART, Whisper): no causal mask, masked-LM or sequence-to-sequence objectives,
cross-attention. The planner prices decoder-only language models; a config saying
``is_encoder_decoder: true`` is refused alike."""

UNMODELLED_COUNT_KEYS = {
    "attn_layer_period": "Jamba's attention-every-k-layers layout (the rest are Mamba layers)",
    "expert_layer_period": "Jamba's MoE-every-k-layers layout",
    "interleave_moe_layer_step": "interleaved MoE layers, read only for Llama 4's model types",
    "moe_layer_freq": "a MoE-every-k-layers layout (1, every layer after the dense ones, as DeepSeek's, is modelled)",
    "mlp_only_layers": "dense layers listed between MoE layers",
}
"""HF config keys that change the parameter count or the layer kinds in ways ModelSpec does not
express (it knows MoE on every layer, DeepSeek's first_k_dense_replace and Qwen-MoE's
decoder_sparse_step): a config that sets them is refused by name rather than miscounted (Jamba
was counted +78% with no warning)."""

UNMODELLED_LAYER_KEYS = {
    "hybrid_override_pattern": "Mamba-2, attention, MLP and MoE layers, read only for model_type nemotron_h",
    "linear_num_value_heads": "Qwen3-Next's Gated DeltaNet (linear attention) layers",
    "linear_attn_config": "Kimi Linear's KDA (linear attention) layers",
    "index_topk": "DeepSeek Sparse Attention, whose lightning indexer keeps index_topk keys per query; without "
    "the index_* keys the model prices as dense MLA, an upper bound on its attention",
    "altup_num_inputs": "Gemma 3n's AltUp streams, LAuReL blocks and per-layer embeddings",
    "block_configs": "per-layer blocks of DeciLM and Nemotron-NAS (Llama-3.3-Nemotron-Super-49B), whose layers "
    "differ in FFN width and may skip attention",
    "cross_attention_layers": "Llama 3.2 Vision's (Mllama) cross-attention layers, whose keys are image tokens",
}
"""HF config keys of layers ModelSpec cannot price (its layers are softmax attention, full or
sliding-window, followed by a dense or MoE MLP): the keys as the configuration classes name them
(transformers NemotronHConfig.hybrid_override_pattern, Qwen3NextConfig.linear_num_value_heads,
moonshotai/Kimi-Linear-48B-A3B-Instruct config.json linear_attn_config, deepseek-ai/DeepSeek-V3.2
config.json index_topk 2048, Gemma3nTextConfig.altup_num_inputs,
MllamaTextConfig.cross_attention_layers). A config that sets one is refused by name: priced as
attention layers, Kimi Linear and MiniMax-Text-01 came out as plain transformers with no warning."""

PRICED_LAYER_TYPES = frozenset({"full_attention", "sliding_attention", "chunked_attention"})
"""``layer_types`` entries ModelSpec prices; others (Qwen3-Next's
and MiniMax's 'linear_attention', LFM2's 'conv', Granite-4's 'mamba') are refused by name."""

LINEAR_ATTENTION_TYPE = 0
"""MiniMax-Text-01 / M1 ``attn_type_list``: 0 marks a lightning (linear) attention layer, 1 a
softmax one (sglang MiniMaxText01Config.linear_layer_ids: ``attn_type == 0``)."""


UNREAD_MOE_KEYS_ALLOWED = frozenset(
    {
        "output_router_logits",
        "router_jitter_noise", "input_jitter_noise", "aux_loss_alpha", "seq_aux", "topk_method",
        "score_function", "ep_size", "moe_router_enable_expert_bias", "use_routing_bias",
        "router_z_loss_coef", "moe_aux_loss_coeff", "moe_z_loss_coeff", "experts_per_token", "moe_layers",
    }
)  # fmt: skip
"""MoE keys of HF configs that change how tokens are routed or the loss, not which weights a
token multiplies (load-balancing coefficients other than ``router_aux_loss_coef``, a ModelSpec key
the Megatron export writes, GPT-OSS's ``experts_per_token`` beside its
num_experts_per_tok; Llama 4's ``moe_layers``, read by ``_llama4_fields``; ``topk_method``, read
for its 'noaux_tc' expert bias). The router's score function, renormalisation and scale are
ModelSpec keys (``scoring_func``, ``norm_topk_prob``, ``routed_scaling_factor``), read for the
Megatron export, not priced."""

ROUTER_AUX_LOSS_DEFAULTS: dict[str, float] = {
    "mixtral": 0.001,
    "qwen2_moe": 0.001,
    "qwen3_moe": 0.001,
    "llama4": 0.001,
    "llama4_text": 0.001,
    "gpt_oss": 0.9,
    "olmoe": 0.01,
}
"""``router_aux_loss_coef`` as each model type's config class defaults it where config.json leaves it
out (transformers 4.57.1: configuration_mixtral.py, configuration_qwen2_moe.py,
configuration_qwen3_moe.py, configuration_llama4.py Llama4TextConfig, configuration_gpt_oss.py,
configuration_olmoe.py): the coefficient the model's own code would train with. Mixtral-8x7B's
config.json states 0.02 over the class's 0.001."""

NOAUX_TOPK_METHOD = "noaux_tc"
"""DeepSeek-V3's ``topk_method`` for aux-loss-free balancing (modeling_deepseek.py MoEGate:
``e_score_correction_bias`` added to the sigmoid scores for the top-k choice): ``router_expert_bias``."""


def _refuse_disagreeing_aliases(config: dict[str, Any], where: str) -> None:
    """Raise where two keys naming one ModelSpec key (``HF_KEY_ALIASES``: n_layer and
    num_hidden_layers, n_head and num_attention_heads) state different values: the later had
    silently replaced the earlier. The same value under both is read once; the norms' epsilon,
    which prices nothing, is not checked (a config may carry an RMSNorm and a LayerNorm one)."""
    seen: dict[str, str] = {}
    for key, value in config.items():
        name = HF_KEY_ALIASES.get(key, key)
        if name == "norm_eps":
            continue
        first = seen.setdefault(name, key)
        if first != key and config[first] != value:
            raise PlannerError(
                f"{where}: keys '{first}' ({shown_value(config[first])}) and '{key}' ({shown_value(value)}) both "
                f"state {name}, differently; give one"
            )


def _refuse_unread_moe_keys(config: dict[str, Any], where: str) -> None:
    """Raise on a key that names experts or MoE layers (``expert`` in it, or a ``moe_`` prefix) and
    that neither ModelSpec, ``UNMODELLED_COUNT_KEYS`` nor ``UNREAD_MOE_KEYS_ALLOWED`` reads: ERNIE
    4.5's moe_num_experts and moe_k, Hunyuan's moe_topk, LongCat's zero experts. Left unread,
    ERNIE-4.5-300B-A47B was priced as a 47.9 B dense model."""
    known = set(ModelSpec.model_fields) | set(UNMODELLED_COUNT_KEYS) | UNREAD_MOE_KEYS_ALLOWED
    for key in config:
        name = HF_KEY_ALIASES.get(key, key)
        if ("expert" in key or key.startswith("moe_")) and name not in known:
            raise PlannerError(
                f"{where}: key '{key}' declares experts in a way the planner does not read; it reads "
                "num_local_experts (or n_routed_experts, num_experts), num_experts_per_tok, moe_intermediate_size, "
                "n_shared_experts or shared_expert_intermediate_size, first_k_dense_replace or decoder_sparse_step"
            )


def _refuse_unmodelled_layers(config: dict[str, Any], where: str) -> None:
    """Raise where an HF config declares layers ModelSpec does not price (``UNMODELLED_LAYER_KEYS``,
    ``layer_types`` outside ``PRICED_LAYER_TYPES``, MiniMax's linear ``attn_type_list`` entries)."""
    supported = "supported: softmax attention (full or sliding-window) with dense or MoE MLP layers"
    for key, what in UNMODELLED_LAYER_KEYS.items():
        if config.get(key) not in (None, 0, [], "", {}):
            raise PlannerError(f"{where}: key '{key}' ({what}) is not modelled; {supported}")
    kinds = config.get("layer_types")
    if isinstance(kinds, list):
        other = sorted({str(k) for k in kinds if not (isinstance(k, str) and k in PRICED_LAYER_TYPES)})
        if other:
            raise PlannerError(
                f"{where}: key 'layer_types' names {', '.join(map(repr, other))} layers, which are not modelled; "
                f"allowed: {', '.join(sorted(PRICED_LAYER_TYPES))}"
            )
    attn_types = config.get("attn_type_list")
    if attn_types is not None and not isinstance(attn_types, list):  # else its linear layers went unread
        raise PlannerError(f"{where}: key 'attn_type_list': expected a list of 0 and 1, got {shown_value(attn_types)}")
    linear = (
        sum(1 for t in attn_types if t == LINEAR_ATTENTION_TYPE and not isinstance(t, bool))
        if isinstance(attn_types, list)
        else 0
    )
    if linear:
        raise PlannerError(
            f"{where}: key 'attn_type_list' marks {linear} of {len(attn_types)} layers as lightning (linear) "
            f"attention (MiniMax), which is not modelled; {supported}"
        )


def _hf_flag(config: dict[str, Any], key: str, default: bool, where: str) -> bool:
    """A true/false key of an HF config, ``default`` where it is null or absent. Only JSON true
    or false: read by truthiness, the text "false" was true (a Falcon with biases) and 0 false."""
    value = config.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise PlannerError(f"{where}: key '{key}': expected true or false, got {shown_value(value)}")
    return value


def _hf_size(config: dict[str, Any], key: str, where: str) -> int | None:
    """A size key of an HF config, None where it is null or absent (the class's default applies);
    else a positive integer: 0 or false is no size, where ``or`` once took the default silently."""
    value = config.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlannerError(f"{where}: key '{key}': expected a positive integer, got {shown_value(value)}")
    return value


def _falcon_fields(config: dict[str, Any], spec: dict[str, Any], where: str) -> dict[str, Any]:
    """ModelSpec fields a Falcon config leaves to its class (``FALCON_TYPES``); its flags and
    sizes as ``_hf_flag`` and ``_hf_size`` read them."""
    hidden = spec.get("hidden_size")
    bias = _hf_flag(config, "bias", False, where)
    fields: dict[str, Any] = {
        "hidden_act": config.get("activation", "gelu"),
        "gated_mlp": False,
        "norm_type": "layernorm",
        "attention_bias": bias,
        "mlp_bias": bias,
        "tie_word_embeddings": config.get("tie_word_embeddings", True),
        "position_embedding_type": "alibi" if _hf_flag(config, "alibi", False, where) else "rope",
        "max_position_embeddings": config.get("max_position_embeddings", 2048),  # FalconConfig's default
    }
    ffn = _hf_size(config, "ffn_hidden_size", where)
    if ffn is not None or isinstance(hidden, int):
        fields["intermediate_size"] = ffn or 4 * hidden
    if _hf_flag(config, "new_decoder_architecture", False, where):
        fields["num_key_value_heads"] = _hf_size(config, "num_kv_heads", where) or spec.get("num_attention_heads")
    elif _hf_flag(config, "multi_query", True, where):  # FalconConfig defaults multi_query to True
        fields["num_key_value_heads"] = 1
    return fields


def _bloom_defaults(spec: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """ModelSpec fields a BLOOM config leaves to its class (``BLOOM_TYPES``), for those it leaves
    out or states as null (n_inner: null is the 4h MLP)."""
    hidden = spec.get("hidden_size")
    fields: dict[str, Any] = {
        "norm_type": "layernorm",
        "attention_bias": True,
        "mlp_bias": True,
        "tie_word_embeddings": True,
        "hidden_act": "gelu",
        "position_embedding_type": "alibi",
    }
    if "seq_length" not in config:  # read below as the context where a config states it
        fields["max_position_embeddings"] = BLOOM_TRAINED_SEQUENCE
    if isinstance(hidden, int):
        fields["intermediate_size"] = 4 * hidden
    return fields


LLAMA4_TYPES = frozenset({"llama4", "llama4_text"})
"""Llama 4 (Scout, Maverick), whose text config (transformers Llama4TextConfig) names its widths
and layer kinds its own way (``_llama4_fields``)."""

LLAMA4_DEFAULTS = {"intermediate_size": 8192, "intermediate_size_mlp": 16384, "attention_chunk_size": 8192}
"""Llama4TextConfig's defaults for the keys ``_llama4_fields`` reads, where a config.json leaves them
out (transformers models/llama4/configuration_llama4.py)."""


def _llama4_fields(config: dict[str, Any], spec: dict[str, Any], where: str) -> dict[str, Any]:
    """ModelSpec fields of a Llama 4 text config (transformers Llama4TextConfig and
    modeling_llama4.py): routed experts and the one always-on shared expert (Llama4TextMoe's
    ``shared_expert``, no gate) are ``intermediate_size`` wide, dense layers
    ``intermediate_size_mlp``; layer i is MoE when (i + 1) % interleave_moe_layer_step == 0 (its
    ``moe_layers`` default, ``decoder_sparse_step`` here; another explicit list is refused); the RoPE
    layers (``no_rope_layers`` 1, every layer but each ``no_rope_layer_interval``-th) run chunked
    attention over ``attention_chunk_size`` tokens, the NoPE layers full attention. Its weightless
    L2 q/k norm adds no parameters and is not priced. Scout (16 experts, every layer MoE) counts
    107.8 B parameters, 17.2 B active; Maverick (128 experts, every other layer) 400.7 B and 17.2 B
    (Meta: 109 B / 17 B and 400 B / 17 B, Scout's with its vision encoder)."""
    layers = spec.get("num_hidden_layers")
    step = _hf_size(config, "interleave_moe_layer_step", where) or 1
    sizes = {key: _hf_size(config, key, where) or default for key, default in LLAMA4_DEFAULTS.items()}
    fields: dict[str, Any] = {
        "intermediate_size": sizes["intermediate_size_mlp"],
        "moe_intermediate_size": sizes["intermediate_size"],
        "n_shared_experts": 1,
        "decoder_sparse_step": step,
        "scoring_func": "sigmoid",  # Llama4TextMoe: sigmoid of the top-k logits, which scales the input
    }
    if not isinstance(layers, int) or not 0 < layers <= MAX_MODEL_DIMENSION:
        return fields  # ModelSpec names the missing or bad layer count
    stated = config.get("moe_layers")
    if stated is not None and stated != list(range(step - 1, layers, step)):
        raise PlannerError(
            f"{where}: key 'moe_layers': the planner prices MoE on every interleave_moe_layer_step-th layer "
            f"({step}: layers {step - 1}, {2 * step - 1}, ...), not the list {shown_value(stated)}"
        )
    if config.get("attention_chunk_size", 1) is None:  # stated null: no chunking, every layer full
        return fields
    fields["attention_chunk_size"] = sizes["attention_chunk_size"]
    if config.get("layer_types") is None:
        interval = _hf_size(config, "no_rope_layer_interval", where) or 4
        rope = config.get("no_rope_layers")
        if rope:
            fields["layer_types"] = [
                "chunked_attention" if r else "full_attention" for r in _rope_flags(rope, layers, where)
            ]
        else:
            fields["layer_types"] = full_every(interval, layers, "chunked_attention")
    return fields


def _rope_flags(rope: object, layers: int, where: str) -> list[int]:
    """Llama 4's ``no_rope_layers``: one 0 or 1 per layer (transformers Llama4TextConfig: 1 where the
    layer uses RoPE and chunked attention, 0 where it is a NoPE layer of full attention); anything else,
    or a list of another length, is refused naming the key."""
    flags = rope if isinstance(rope, list) else None
    if flags is None or len(flags) != layers or any(type(f) is not int or f not in (0, 1) for f in flags):
        raise PlannerError(
            f"{where}: key 'no_rope_layers': expected a list of 0 or 1, one per layer ({layers}), got "
            f"{shown_value(rope)}"
        )
    return flags


def _nemotron_h_fields(config: dict[str, Any], where: str) -> dict[str, Any]:
    """ModelSpec fields of a NemotronH config (HF NemotronHConfig and the checkpoints'
    configuration_nemotron_h.py; Megatron-Bridge NemotronHModelProvider): its
    ``hybrid_override_pattern``, the Mamba-2 sizes (``NEMOTRON_H_KEYS``), the MLP activation under
    ``mlp_hidden_act`` (relu2: squared ReLU, two matrices), RMSNorm (its ``layer_norm_epsilon`` is
    the RMSNorm's), no position embedding (Megatron-Core MambaModel and Bridge's
    MambaModelProvider default position_embedding_type 'none'), and the MoE blocks' shared expert of
    ``moe_shared_expert_intermediate_size`` without a gate (as n_shared_experts of the expert width
    where it divides); LatentMoE's ``moe_latent_size`` (Nemotron 3 Super) is a ModelSpec key, and
    its MTP modules' blocks come under ``mtp_hybrid_override_pattern`` or ``mtp_layers_block_type``
    (their count under ``num_nextn_predict_layers``)."""
    pattern = _block_pattern(config, "hybrid_override_pattern", "layers_block_type", where)
    if not isinstance(pattern, str) or not pattern:
        raise PlannerError(
            f"{where}: key 'hybrid_override_pattern': a NemotronH config needs its layer pattern string "
            "(or a layers_block_type list)"
        )
    fields: dict[str, Any] = {
        "hybrid_override_pattern": pattern,
        "mtp_hybrid_override_pattern": _block_pattern(
            config, "mtp_hybrid_override_pattern", "mtp_layers_block_type", where
        ),
        "hidden_act": config.get("mlp_hidden_act", "relu2"),
        "norm_type": "rmsnorm",
        "position_embedding_type": "none",
    }
    for field, keys in NEMOTRON_H_KEYS.items():
        for key in keys:
            if config.get(key) is not None:
                fields[field] = _hf_size(config, key, where)
                break
    if config.get("mamba_ssm_cache_dtype") is not None:
        # the checkpoint's SSM state format for serving (Nemotron 3 Nano and Super: "float32"); the
        # schema names what it allows when the value is something else
        fields["mamba_ssm_cache_dtype"] = config["mamba_ssm_cache_dtype"]
    if any(config.get(key) for key in ("n_routed_experts", "num_experts")):
        # NemotronHTopkRouter (modeling_nemotron_h.py): sigmoid scores, e_score_correction_bias for the
        # top-k choice; Megatron-Bridge NemotronHModelProvider: moe_router_score_function "sigmoid",
        # moe_router_enable_expert_bias True
        fields.update(scoring_func="sigmoid", router_expert_bias=True)
    shared = _hf_size(config, "moe_shared_expert_intermediate_size", where)
    expert = _hf_size(config, "moe_intermediate_size", where)
    if shared is not None and expert is not None and shared % expert == 0:
        fields["n_shared_experts"] = shared // expert
    elif shared is not None:
        fields["shared_expert_intermediate_size"] = shared
    return fields


NEMOTRON_H_READ_KEYS = frozenset({"moe_shared_expert_intermediate_size"})
"""NemotronH MoE keys ``_nemotron_h_fields`` reads, which the unread-MoE-key check lets pass."""

NEMOTRON_H_BLOCK_TYPES = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}
"""NemotronH's ``layers_block_type`` names -> pattern symbols (Megatron-LM's HF checkpoint loader for
Nemotron 3 Super, tools/checkpoint: ``mapping = {"mamba": "M", "attention": "*", "moe": "E", "mlp": "-"}``)."""


def _block_pattern(config: dict[str, Any], key: str, names_key: str, where: str) -> Any:
    """A NemotronH block pattern: the string under ``key``, else the ``names_key`` list newer configs
    give (mamba, attention, mlp, moe: ``NEMOTRON_H_BLOCK_TYPES``), else None."""
    kinds = config.get(names_key)
    if config.get(key) is not None or not isinstance(kinds, list):
        return config.get(key)
    unknown = sorted({str(k) for k in kinds if k not in NEMOTRON_H_BLOCK_TYPES})
    if unknown:
        raise PlannerError(
            f"{where}: key '{names_key}' names {', '.join(map(repr, unknown))}; allowed: "
            f"{', '.join(NEMOTRON_H_BLOCK_TYPES)}"
        )
    return "".join(NEMOTRON_H_BLOCK_TYPES[k] for k in kinds)


def full_every(period: int, layers: int, other: str) -> list[str]:
    """``layer_types`` with full attention on every ``period``-th layer (layer i when (i + 1) %
    period == 0) and ``other`` on the rest: Gemma 3's and Cohere2's sliding_window_pattern, Llama 4's
    no_rope_layer_interval, and at period 2 the alternation that slides first (Gemma 2's, GPT-OSS's
    layer_types, the runs files' 'alternating' windows)."""
    return ["full_attention" if (i + 1) % period == 0 else other for i in range(layers)]


QUANT_METHOD_FORMATS = {"fp8": "fp8", "fbgemm_fp8": "fp8", "mxfp4": "fp4"}
"""HF ``quantization_config.quant_method`` values whose weights the planner prices, by format:
transformers' FineGrainedFP8Config ('fp8', DeepSeek-V3's 128 x 128 block scales), FbgemmFp8Config,
Mxfp4Config (gpt-oss's experts). ModelOpt checkpoints ('modelopt') name theirs in ``quant_algo``
(``MODELOPT_ALGO_FORMATS``)."""

MODELOPT_ALGO_FORMATS = {"FP8": "fp8", "FP8_BLOCK_SCALES": "fp8", "NVFP4": "fp4"}
"""NVIDIA ModelOpt's quant_algo names (hf_quant_config.json, and config.json quantization_config of
the -FP8/-NVFP4 repositories) by format."""


MAPPING_KEYS = ("rope_scaling", "rope_parameters", "quantization_config")
"""HF config keys whose entries the planner reads (RoPE scaling for the exported launch settings,
the checkpoint's weight format for memory): a mapping in transformers' config classes, or null. A
string or number there (``"quantization_config": "fp8"``) was read as absent: 16-bit weights and
no RoPE scaling, silently; it is refused instead."""


QUANTIZATION_NAME_KEYS = ("quant_method", "quant_algo")
"""The ``quantization_config`` entries that name the checkpoint's format (``checkpoint_weights_dtype``):
strings in transformers' quantization configs and ModelOpt's; another type is refused by key."""


FP4_METHODS, FP4_ALGOS = {"mxfp4": "mxfp4"}, {"NVFP4": "nvfp4"}
"""The 4-bit format (``ModelSpec.checkpoint_fp4_format``) by transformers' quant_method or ModelOpt's
quant_algo."""


def _named(quantization: object, methods: dict[str, str], algos: dict[str, str]) -> str | None:
    """What ``methods`` (by quant_method) or, for ModelOpt, ``algos`` (by quant_algo) say of a
    config.json ``quantization_config``; None where it names neither or is no mapping."""
    if not isinstance(quantization, dict):
        return None
    method = str(quantization.get("quant_method", "")).lower()
    if method == "modelopt":
        return algos.get(str(quantization.get("quant_algo", "")).upper())
    return methods.get(method)


def checkpoint_fp4_format(quantization: object) -> str | None:
    """MXFP4 or NVFP4 where ``quantization`` (config.json quantization_config) is an fp4 checkpoint's."""
    return _named(quantization, FP4_METHODS, FP4_ALGOS)


def checkpoint_weights_dtype(quantization: object) -> str | None:
    """The weight format a checkpoint ships in (``ModelSpec.checkpoint_weights_dtype``) from its
    config.json ``quantization_config``; None for 16-bit weights or a method the planner has no rate
    for (int4 AWQ/GPTQ, int8: priced as 16-bit, as `plan serve` says of such rows)."""
    return _named(quantization, QUANT_METHOD_FORMATS, MODELOPT_ALGO_FORMATS)


UNCONVERTED_MODULE_KEYS = ("modules_to_not_convert", "exclude_modules", "ignore")
"""``quantization_config`` lists of the modules a quantized checkpoint leaves 16-bit: transformers'
(openai/gpt-oss: ``["model.layers.*.self_attn", "model.layers.*.mlp.router",
"model.embed_tokens", "lm_head"]``), ModelOpt's hf_quant_config.json ``exclude_modules`` and the
``ignore`` of compressed-tensors and of ModelOpt's config.json (which SGLang's ModelOptFp4Config
reads as its exclude_modules)."""


EVERY_LAYERS_ATTENTION = re.compile(r"^(?:re:)?(?:\*\.?|.*\blayers\.\*\.)(?:self_attn|attn|attention)(?:\.?\*)?$")
"""A module name that covers the whole attention block of every layer: 'model.layers.*.self_attn',
'*.self_attn.*', '*self_attn*'; not one layer's ('model.layers.0.self_attn*'), one projection's
('model.layers.*.self_attn.o_proj') or a linear-attention block's ('model.layers.*.linear_attn')."""

NOT_THE_LANGUAGE_MODEL = ("vision", "visual")
"""Module-name words of a multimodal checkpoint's encoder, whose attention is not the language
model's."""


def keeps_attention_16bit(quantization: object) -> bool:
    """Whether a quantized checkpoint leaves every layer's attention 16-bit
    (``ModelSpec.checkpoint_16bit_attention``): an entry of ``UNCONVERTED_MODULE_KEYS`` naming the
    whole attention block of all the language model's layers (``EVERY_LAYERS_ATTENTION``); one
    layer's, one projection's or an encoder's is not priced apart."""
    if not isinstance(quantization, dict):
        return False
    for key in UNCONVERTED_MODULE_KEYS:
        names = quantization.get(key)
        if isinstance(names, list) and any(
            EVERY_LAYERS_ATTENTION.match(str(n)) and not any(w in str(n) for w in NOT_THE_LANGUAGE_MODEL) for n in names
        ):
            return True
    return False


def _qwen2_window(config: dict[str, Any], spec: dict[str, Any], layers: object, where: str) -> None:
    """Qwen2's switch on its window (transformers Qwen2Config, Qwen2MoeConfig, Qwen3Config):
    ``sliding_window`` applies only with ``use_sliding_window`` true ("self.sliding_window =
    sliding_window if self.use_sliding_window else None"), and then to the layers from
    ``max_window_layers`` on ("sliding_attention" if i >= max_window_layers). Qwen2 and Qwen2.5
    ship a 32,768 or 131,072 window with the switch off: read as on, every layer had been priced
    windowed (2.6x too few attention FLOPs at 64K tokens)."""
    use = config.get(USE_SLIDING_WINDOW)
    if use is None:
        return
    if not isinstance(use, bool):
        raise PlannerError(f"{where}: key '{USE_SLIDING_WINDOW}': expected true or false, got {shown_value(use)}")
    if not use:
        spec.pop("sliding_window", None)
        return
    first = config.get(MAX_WINDOW_LAYERS, QWEN2_MAX_WINDOW_LAYERS)
    if first is None or "layer_types" in spec or not spec.get("sliding_window") or not isinstance(layers, int):
        return
    if isinstance(first, bool) or not isinstance(first, int) or first < 0:
        raise PlannerError(f"{where}: key '{MAX_WINDOW_LAYERS}': expected a layer count >= 0, got {shown_value(first)}")
    if 0 < layers <= MAX_MODEL_DIMENSION:  # else ModelSpec names the count
        spec["layer_types"] = ["sliding_attention" if i >= first else "full_attention" for i in range(layers)]


LLAMA_LIKE_TYPES = frozenset(
    {
        "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl", "qwen3", "qwen3_moe",
        "deepseek_v2", "deepseek_v3", "phi3",
    }
)  # fmt: skip
"""HF model types whose config classes and modelling files follow Llama's (transformers
LlamaConfig keys; RMSNorm, rotary positions, a SiLU-gated MLP, no biases but those the config or
``QKV_BIAS_MODELS`` state; DeepSeek's MLA and MoE keys read as ModelSpec names them; Phi-3's fused
qkv and gate_up projections hold the same weights as separate ones)."""

READ_TYPES = (
    LLAMA_LIKE_TYPES | LEARNED_POSITION_MODELS | TIED_BY_DEFAULT | ALTERNATING_SLIDING_WINDOW | QKV_BIAS_MODELS
    | SINK_ATTENTION_TYPES | FALCON_TYPES | BLOOM_TYPES | NEMOTRON_H_TYPES | LLAMA4_TYPES | {"gemma3"}
)  # fmt: skip
"""HF model types whose config.json the planner reads knowing its family: Llama's
(``LLAMA_LIKE_TYPES``) and those whose class defaults ``model_from_hf_config`` fills in by type.
A config of another type (Phi-2, StableLM, Cohere, OLMo, InternLM, ...) is read from the keys it
shares with Llama's config and Llama's defaults for the rest, which its own class may not
follow (a LayerNorm, a plain GELU MLP, a partial rotary or parallel block, biases, tied
embeddings): the plan says so (``unfamiliar_type_note``)."""


def unfamiliar_type_note(model: ModelSpec) -> str | None:
    """A warning for a model whose stated ``model_type`` is not one ``READ_TYPES`` knows: its
    parameters were counted with Llama's defaults where its config is silent. None otherwise,
    and for a model that states no type (the catalog's YAMLs and a user's own spell out every
    field they mean)."""
    kind = model.model_type
    if kind is None or kind in READ_TYPES:
        return None
    mlp = "SiLU-gated" if model.is_gated_mlp else "plain"
    return (
        f"model_type '{kind}' is not a family the planner reads by name: {model.name} was counted from the keys "
        f"its config shares with Llama's ({model.parameter_counts.total / 1e9:.2f} B parameters: {model.norm_type}, "
        f"{mlp} MLP, {model.position_embedding_type} positions, biases "
        f"{'on' if model.attention_bias or model.mlp_bias else 'off'}, embeddings "
        f"{'tied' if model.tie_word_embeddings else 'untied'}); compare with its model card, or give a model YAML "
        "(`plan show model` on the file prints what was read)"
    )


def model_from_hf_config(config: dict[str, Any], name: str, where: str) -> ModelSpec:
    """Build a ModelSpec from a Hugging Face config.json mapping.

    Keys ModelSpec knows are taken as they are (after ``HF_KEY_ALIASES``); the many other keys an
    HF config carries (rope_theta, torch_dtype, architectures, ...) do not affect parallelism
    cost and are ignored. GPT-2-family types get LayerNorm, biases and learned positions.
    """
    model_type = str(config.get("model_type", ""))
    hybrid = model_type in NEMOTRON_H_TYPES
    mamba_keys = any(
        (k == "state_size" or k.startswith("mamba_")) and config[k] not in (None, [], "", {}) for k in config
    )
    if model_type in STATE_SPACE_TYPES or (mamba_keys and not hybrid):
        raise PlannerError(
            f"{where}: model_type '{model_type}' has state-space (Mamba) layers, which the planner does not "
            "model; supported: decoder-only transformers (dense, MoE, MLA, sliding-window attention) and "
            "NemotronH hybrids (Nemotron-H, Nemotron 3 Nano and Super)"
        )
    if model_type in ENCODER_TYPES or config.get("is_encoder_decoder") is True:
        kind = "an encoder-decoder" if config.get("is_encoder_decoder") is True else "a bidirectional encoder"
        raise PlannerError(
            f"{where}: model_type '{model_type}' is {kind}, which the planner does not model; supported: "
            "decoder-only transformers (dense, MoE, MLA, sliding-window attention) and NemotronH hybrids"
        )
    if model_type in RECURRENT_TYPES:
        raise PlannerError(
            f"{where}: model_type '{model_type}' is built from recurrent (linear-attention) blocks, which the "
            "planner does not model; supported: decoder-only transformers (dense, MoE, MLA, sliding-window attention)"
        )
    notes = ""
    if config.get("text_config") is not None and not isinstance(config["text_config"], dict):
        # read only as a mapping: another value had been dropped, the top level priced alone
        raise PlannerError(
            f"{where}: key 'text_config': expected a mapping or null, got {shown_value(config['text_config'])}"
        )
    towers = [k for k in ("vision_config", "audio_config") if k in config]
    if isinstance(config.get("text_config"), dict):  # Llava, Llama-4, Gemma-3: the language model is nested
        text = config["text_config"]
        config = {**{k: v for k, v in config.items() if k not in ("text_config", *towers)}, **text}
        model_type = str(text.get("model_type", model_type))
    for key in MAPPING_KEYS:  # read for their entries: another value would be dropped silently
        if config.get(key) is not None and not isinstance(config[key], dict):
            raise PlannerError(f"{where}: key '{key}': expected a mapping or null, got {shown_value(config[key])}")
    for entry in QUANTIZATION_NAME_KEYS:  # a list or number there read as an unknown method: 16-bit, silently
        value = (config.get("quantization_config") or {}).get(entry)
        if value is not None and not isinstance(value, str):
            raise PlannerError(
                f"{where}: key 'quantization_config.{entry}': expected a name (e.g. 'fp8', 'mxfp4', 'modelopt'), "
                f"got {shown_value(value)}"
            )
    _refuse_unmodelled_layers({k: v for k, v in config.items() if not hybrid or k != "hybrid_override_pattern"}, where)
    _refuse_unread_moe_keys({k: v for k, v in config.items() if not hybrid or k not in NEMOTRON_H_READ_KEYS}, where)
    if towers:  # Qwen2-VL keeps its language model at the top level beside vision_config
        notes = f"the language model of a multimodal config only: {', '.join(towers)} (its encoder) is not counted"
    for key, what in UNMODELLED_COUNT_KEYS.items():
        if key == "interleave_moe_layer_step" and model_type in LLAMA4_TYPES:
            continue  # read by _llama4_fields
        if isinstance(config.get(key), bool):  # true == 1 passed as moe_layer_freq 1, false as 0
            allowed = "a list of layer indices" if key == "mlp_only_layers" else "an integer count"
            raise PlannerError(f"{where}: key '{key}': expected {allowed}, got {shown_value(config[key])}")
        if config.get(key) not in (None, 0, []) and not (key == "moe_layer_freq" and config[key] == 1):
            raise PlannerError(
                f"{where}: key '{key}' ({what}) changes the parameter count and is not modelled; supported MoE "
                "layouts: every layer, first_k_dense_replace, decoder_sparse_step"
            )
    _refuse_disagreeing_aliases(config, where)
    data = {HF_KEY_ALIASES.get(k, k): v for k, v in config.items()}
    # A dense model may carry expert keys set to 0 (e.g. num_experts: 0): that means no experts.
    for key in ("num_local_experts", "n_routed_experts", "num_experts", "num_experts_per_tok"):
        if data.get(key) == 0 and not isinstance(data[key], bool):  # false is refused as a count
            data.pop(key)
    fields = ModelSpec.model_fields
    spec: dict[str, Any] = {k: v for k, v in data.items() if k in fields and k not in ("name", "source", "aliases")}
    if model_type in TIED_BY_DEFAULT:
        spec.setdefault("tie_word_embeddings", True)
    layers = spec.get("num_hidden_layers")
    _qwen2_window(config, spec, layers, where)
    windowed = spec.get("sliding_window") and "layer_types" not in spec
    if windowed and isinstance(layers, int) and 0 < layers <= MAX_MODEL_DIMENSION:  # else ModelSpec names it
        period = _hf_size(config, SLIDING_WINDOW_PATTERN, where)
        if model_type in ALTERNATING_SLIDING_WINDOW:
            spec["layer_types"] = full_every(2, layers, "sliding_attention")
        elif period is not None:
            spec["layer_types"] = full_every(period, layers, "sliding_attention")
    if notes:
        spec["notes"] = notes
    if model_type in LEARNED_POSITION_MODELS:
        spec.setdefault("position_embedding_type", "learned")
        spec.setdefault("norm_type", "layernorm")
        spec.setdefault("attention_bias", True)
        spec.setdefault("mlp_bias", True)
        spec.setdefault("tie_word_embeddings", config.get("tie_word_embeddings", True))
        if spec.get("intermediate_size") is None and isinstance(spec.get("hidden_size"), int):
            spec["intermediate_size"] = 4 * spec["hidden_size"]
    if model_type in QKV_BIAS_MODELS:
        spec.setdefault("attention_bias", True)
    if model_type in BLOOM_TYPES:
        spec.update({k: v for k, v in _bloom_defaults(spec, config).items() if spec.get(k) is None})
    if "layer_norm_eps" in config or "layer_norm_epsilon" in config:
        spec.setdefault("norm_type", "layernorm")
    if spec.get("scoring_func", "") is None:  # stated null: the default softmax
        spec.pop("scoring_func")
    if spec.get("rope_scaling") is None:  # null: no scaling (another non-mapping is refused above)
        spec.pop("rope_scaling", None)
    rope = config.get("rope_parameters")  # transformers 5: theta and scaling in one mapping
    if isinstance(rope, dict):
        spec.setdefault("rope_theta", rope.get("rope_theta"))
        if rope.get("rope_type", "default") != "default":
            spec.setdefault("rope_scaling", {k: v for k, v in rope.items() if k != "rope_theta"})
    quantised = checkpoint_weights_dtype(config.get("quantization_config"))
    if quantised is not None:
        spec["checkpoint_weights_dtype"] = quantised
        if quantised == "fp4":
            spec["checkpoint_fp4_format"] = checkpoint_fp4_format(config.get("quantization_config"))
        if keeps_attention_16bit(config.get("quantization_config")):
            spec["checkpoint_16bit_attention"] = True
    if config.get("topk_method") == NOAUX_TOPK_METHOD:
        spec.setdefault("router_expert_bias", True)
    if model_type in ROUTER_AUX_LOSS_DEFAULTS and spec.get("router_aux_loss_coef") is None:
        spec["router_aux_loss_coef"] = ROUTER_AUX_LOSS_DEFAULTS[model_type]
    if model_type in LLAMA4_TYPES:
        spec.update(_llama4_fields(config, spec, where))
    if model_type in FALCON_TYPES:
        spec.update(_falcon_fields(config, spec, where))
    if hybrid:
        spec.update(_nemotron_h_fields(config, where))
    if model_type.startswith("qwen3"):
        spec.setdefault("qk_norm", True)
    if model_type in SINK_ATTENTION_TYPES:
        spec.setdefault("attention_sinks", True)
        spec.setdefault("mlp_bias", True)
    if model_type.startswith("gemma"):
        # Gemma: GeGLU (gated GELU) MLP, activation under the key hidden_activation.
        spec.setdefault("gated_mlp", True)
        if config.get("hidden_activation") is not None:
            spec["hidden_act"] = config["hidden_activation"]
        elif spec.get("hidden_act") is None:  # null: transformers' GemmaMLP takes gelu_pytorch_tanh
            spec["hidden_act"] = "gelu_pytorch_tanh"
    if "max_position_embeddings" not in spec and "seq_length" in config:
        spec["max_position_embeddings"] = config["seq_length"]
    spec["name"] = name
    spec["source"] = f"Hugging Face config.json: {where}"
    return validate_as(ModelSpec, spec, where)
