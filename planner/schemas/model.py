"""ModelSpec: a transformer's architecture, with Hugging Face config.json key names.

The keys are those of HF's ``config.json`` (LlamaConfig, MixtralConfig, Qwen3MoeConfig,
DeepseekV3Config), so a user can point ``--model`` at a downloaded config. Keys HF spells two
ways for the same thing (``num_local_experts``, ``n_routed_experts``, ``num_experts``) are all
accepted; ``num_experts_total`` resolves them. A few non-HF keys describe what HF encodes in the
model class instead of the config (``gated_mlp``, ``norm_type``, ``position_embedding_type``);
they are documented on each field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt, field_validator, model_validator

from planner.errors import PlannerError
from planner.schemas.base import Frozen

if TYPE_CHECKING:
    from planner.cost.params import ParameterCounts

GATED_ACTIVATIONS = frozenset({"silu", "swish", "swiglu", "geglu", "reglu"})

ACTIVATIONS = GATED_ACTIVATIONS | frozenset(
    {"gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_python", "quick_gelu", "relu", "relu2", "relu6"}
)
"""Activation names the planner prices (Hugging Face transformers' ACT2FN keys): the gated ones
above, whose MLP has a third matrix, and plain ones (two matrices) unless ``gated_mlp`` says
otherwise; another name is a typo or an MLP the planner has not priced."""
"""Activations HF models use with a gated MLP (SwiGLU: Shazeer 2020, 'GLU Variants Improve
Transformer'). GPT-2/3 and BLOOM use plain ``gelu``/``gelu_new`` with a 2-matrix MLP; a gated
GELU model (Gemma) sets ``gated_mlp: true`` explicitly."""


MAX_AUX_LOSS_COEF = 100.0
"""The largest auxiliary-loss coefficient a model may state (published ones run 0.001-0.9): a bound
against typos, not a measurement."""

MAX_MODEL_DIMENSION = 2**24
"""The largest layer count, width, head count, vocabulary or context a model may state,
16,777,216: far above any model built (hidden sizes up to about 32K, vocabularies up to about
260K, contexts up to 10M tokens), so no real model is refused, while a mistyped 4e12 fails at
once instead of overflowing the integer arithmetic of the cost terms. A bound, not a
measurement."""


MAX_MODEL_LAYERS = 2**16
"""The most decoder layers a model may state, 65,536: no model built has a thousand, and the
pipeline layout the planner writes for a split (cost.layout, which unrolls at most 100,000 layers
and stage breaks) must parse back. A bound, not a measurement."""

MAX_MODEL_PARAMETERS = 1e15
"""The largest model planned, a quadrillion parameters (1,000x GPT-1T): its fp32 master weights and
Adam moments alone are 12 PB, about 94 GiB on each of the largest cluster's 131,072 GPUs; the
integer arithmetic of the cost terms overflows a little past 1e18. A bound, not a measurement."""


HYBRID_BLOCKS = {"M": "Mamba-2", "*": "attention", "-": "MLP", "E": "MoE"}
"""The block kinds of a hybrid pattern (NemotronH's ``hybrid_override_pattern``, Megatron-Core's
``hybrid_override_pattern`` / ``hybrid_layer_pattern``, megatron/core/ssm/mamba_hybrid_layer_allocation.py
Symbols: MAMBA 'M', ATTENTION '*', MLP '-', MOE 'E'): one character per layer, each layer one
block (a pre-norm, one mixer or FFN, a residual add)."""


MAMBA_CONV_KERNEL = 4
"""Mamba-2's causal conv1d width where a model does not state it: Megatron-Core MambaMixer's d_conv
default and HF NemotronHConfig's conv_kernel default, 4."""

SsmStateDtype = Literal["bf16", "fp16", "fp32"]
"""Formats a Mamba-2 SSM state is kept in for serving (``ModelSpec.mamba_ssm_cache_dtype``, the
engines' defaults, ``plan serve --mamba-ssm-dtype``)."""

TORCH_DTYPE_NAMES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
"""torch's dtype names, as HF config.json writes them, -> the planner's (bfloat16 before float16,
which a text search for the names would otherwise find inside it)."""

MAMBA_CHUNK_SIZE = 128
"""Tokens per chunk of Mamba-2's SSD scan where a model does not state it: Megatron-Core
MambaMixer's chunk_size default, 128 (the NemotronH checkpoints' config.json chunk_size too)."""


@dataclass(frozen=True)
class LayerKind:
    """What one layer of a cost kind (``moe`` False: the dense layers, True: the MoE layers) is made
    of, as counts per layer: attention and Mamba-2 mixers, dense MLPs and MoE FFNs, and pre-norm +
    residual blocks. A transformer layer is one attention and one MLP or MoE FFN in two blocks; in
    a hybrid model (``ModelSpec.hybrid_override_pattern``) every layer is one block, so its MoE
    layers are one MoE FFN each and its dense kind is the mean of its other blocks (shares of
    attention, Mamba-2 and MLP summing to one): the cost terms are linear in these counts, so a
    stage of n such layers costs n x the mean (exact for the whole model; the per-stage split is
    ``pipeline.moe_layers_of``'s)."""

    attention: float
    mamba: float
    mlp: float
    moe: float
    blocks: float

    @property
    def launch_share(self) -> float:
        """The layer's kernel launches as a share of a transformer layer's, by the count of
        Megatron-Core's TE layer specs (stacks/megatron-core.yaml kernels_per_layer_eager, 16 at
        TP > 1 with SP): the attention half 9 (norm, all-gather, QKV GEMM, RoPE on q and k, fused
        attention, proj GEMM, reduce-scatter, bias-dropout-add), the MLP or MoE FFN half 7 (norm,
        all-gather, fc1, activation, fc2, reduce-scatter, bias-dropout-add; the MoE layer's routing
        is ``Stack.moe_layer_overhead_us``), a Mamba-2 block 13 (MambaLayer: norm, all-gather and
        in_proj in one TE module, causal_conv1d, the SSD scan's five kernels, the gated RMSNorm,
        out_proj, reduce-scatter, the residual add). 1 for a transformer layer of either kind. A
        count of module code, not a trace."""
        return (9.0 * self.attention + 13.0 * self.mamba + 7.0 * (self.mlp + self.moe)) / 16.0

    @property
    def row_parallel_outputs(self) -> float:
        """TP collectives per layer and direction: one per attention, Mamba-2 or MLP block, whose
        output projection is row-parallel (Megatron-Core MambaMixer's out_proj like attention's
        linear_proj); a MoE FFN's experts run under expert TP (``traffic``), not the layer's TP."""
        return self.attention + self.mamba + self.mlp


ROPE_SCALING_NUMBERS = (
    "factor",
    "low_freq_factor",
    "high_freq_factor",
    "original_max_position_embeddings",
    "beta_fast",
    "beta_slow",
    "mscale",
    "mscale_all_dim",
)
"""rope_scaling keys whose values are the scaling's numbers (HF's llama3 and yarn rope types;
transformers modeling_rope_utils): each must be finite and positive where stated."""


MAX_MTP_LAYERS = 64
"""Most multi-token-prediction layers a model may carry or a job train: DeepSeek-V3 trains one, and
a depth of 64 is far past any published; a bound, not a measurement (a model file's 5000 had been
priced at 20x the step)."""


class ModelSpec(Frozen):
    """Architecture of a decoder-only transformer (dense or MoE), or of a hybrid model whose
    layers are Mamba-2, attention, MLP or MoE blocks (``hybrid_override_pattern``).

    Symbols as in ARCHITECTURE 8.1: L = num_hidden_layers, h = hidden_size,
    a = num_attention_heads, k_v = num_key_value_heads, d_h = head_dim,
    f = intermediate_size, V = vocab_size.
    """

    # Catalog metadata (not HF keys).
    name: str = Field(min_length=1, description="Catalog name, e.g. llama3-70b")
    description: str = ""
    source: str = Field(description="Where the numbers come from (config.json URL, paper table)")
    notes: str = Field("", description="Caveats: approximations the cost model makes for this model")
    aliases: list[str] = Field(default_factory=list, description="Short names, e.g. llama70b")
    hf_repos: list[str] = Field(
        default_factory=list,
        description="Hugging Face repositories whose config.json this is (how a runs file's hf_id finds it)",
    )
    default_seq_len: PositiveInt | None = Field(None, description="Sequence length the model was trained at")
    default_global_batch_size: PositiveInt | None = Field(None, description="Published global batch, sequences")

    # Dense architecture (HF keys).
    model_type: str | None = None
    num_hidden_layers: PositiveInt
    hidden_size: PositiveInt
    num_attention_heads: PositiveInt
    num_key_value_heads: PositiveInt | None = Field(None, description="GQA groups; None means MHA")
    head_dim: PositiveInt | None = Field(None, description="None means hidden_size / num_attention_heads")
    intermediate_size: PositiveInt = Field(description="FFN width of dense layers")
    vocab_size: PositiveInt
    max_position_embeddings: PositiveInt
    rope_theta: PositiveFloat | None = Field(
        None,
        description="RoPE's base (HF config.json rope_theta; Llama 3 500000, Qwen3 and Mixtral 1000000; Megatron "
        "--rotary-base). Decides which model trains, not its cost: written by the Megatron export, not priced; "
        "None: unstated",
    )
    rope_scaling: dict[str, Any] | None = Field(
        None,
        description="RoPE's context extension as HF config.json states it (rope_type or type: llama3 with factor, "
        "low_freq_factor, high_freq_factor, original_max_position_embeddings; yarn with factor, beta_fast, "
        "beta_slow, mscale, mscale_all_dim). Not priced; the Megatron export writes what Megatron-LM's arguments "
        "can say and notes the rest",
    )
    tie_word_embeddings: bool = False
    hidden_act: str = "silu"
    attention_bias: bool = False
    mlp_bias: bool = False
    swiglu_limit: PositiveFloat | None = Field(
        None,
        description="The gated MLP clamps its gate to at most this and its up projection to +-this before the "
        "activation (HF GptOssConfig swiglu_limit, 7.0 for gpt-oss); None: no clamp",
    )
    gated_mlp: bool | None = Field(None, description="Non-HF. None: derived from hidden_act")
    norm_type: Literal["rmsnorm", "layernorm"] = Field("rmsnorm", description="Non-HF. layernorm has a bias")
    norm_eps: PositiveFloat | None = Field(
        None,
        description="The norms' epsilon (HF rms_norm_eps, layer_norm_eps, layer_norm_epsilon): DeepSeek-V3 and Qwen3 "
        "1e-6; None: not stated, Megatron-LM's default 1e-5 (--norm-epsilon), which Llama 2/3, Mistral, Mixtral "
        "and GPT-OSS also use. Not priced; the Megatron export writes it",
    )
    qk_norm: bool = Field(False, description="Non-HF. Per-head RMSNorm on q and k (Qwen3)")
    position_embedding_type: Literal["rope", "learned", "alibi", "none"] = Field(
        "rope",
        description="Non-HF. 'learned' adds max_position_embeddings x h parameters (GPT-2/3); 'none': no position "
        "embedding (NemotronH's attention blocks)",
    )

    # Sliding-window attention (HF keys: Mistral, Gemma 2/3, GPT-OSS).
    sliding_window: PositiveInt | None = Field(
        None, description="Keys a query of a sliding-window layer attends to (itself included); None: full attention"
    )
    layer_types: list[Literal["full_attention", "sliding_attention", "chunked_attention"]] | None = Field(
        None,
        description="Attention kind per layer (HF's layer_types); None with sliding_window set: every layer slides",
    )
    attention_chunk_size: PositiveInt | None = Field(
        None,
        description="Tokens per chunk of a chunked_attention layer, whose queries attend only the keys of their own "
        "chunk (HF Llama4TextConfig.attention_chunk_size, 8192); within one chunk the causal mask, beyond it one "
        "causal call per chunk (flops.chunked_keys; context parallelism across chunks is refused)",
    )
    attention_sinks: bool = Field(
        False,
        description="Non-HF. A learned logit per head that joins every query's softmax and takes no value "
        "(GPT-OSS: transformers GptOssAttention.sinks; Megatron-Core softmax_type 'learnable'): the attention "
        "kernel must run it (``Stack.sink_attention``)",
    )

    # Mixture of experts (HF keys, each spelling accepted).
    num_local_experts: PositiveInt | None = Field(None, description="Mixtral's name for routed experts")
    n_routed_experts: PositiveInt | None = Field(None, description="DeepSeek's name for routed experts")
    num_experts: PositiveInt | None = Field(None, description="Qwen-MoE's name for routed experts")
    num_experts_per_tok: PositiveInt | None = None
    moe_intermediate_size: PositiveInt | None = Field(None, description="Expert FFN width; None: intermediate_size")
    n_shared_experts: NonNegativeInt | None = Field(
        None, description="DeepSeek shared experts (width moe_intermediate_size)"
    )
    shared_expert_intermediate_size: PositiveInt | None = Field(None, description="Qwen2-MoE shared expert width")
    first_k_dense_replace: NonNegativeInt | None = Field(None, description="DeepSeek: the first k layers are dense")
    decoder_sparse_step: PositiveInt | None = Field(None, description="Qwen-MoE: layer i is MoE when (i+1) % step == 0")
    moe_latent_size: PositiveInt | None = Field(
        None,
        description="LatentMoE (Nemotron 3 Super, HF NemotronHConfig and Megatron-Core moe_latent_size): the routed "
        "experts take a projected latent of this width, fc1_latent_proj h -> latent before the dispatch and "
        "fc2_latent_proj latent -> h after the combine; router and shared experts read the hidden state",
    )
    n_group: PositiveInt | None = Field(
        None,
        description="DeepSeek group-limited routing: the routed experts fall into n_group contiguous groups "
        "(Megatron --moe-router-num-groups); None or 1: no limit",
    )
    topk_group: PositiveInt | None = Field(
        None,
        description="DeepSeek group-limited routing: a token's experts come from its topk_group best groups "
        "(Megatron --moe-router-group-topk; DeepSeek-V3: 4 of 8, at most 4 nodes)",
    )
    scoring_func: str = Field(
        "softmax",
        description="The router's score function (HF config.json scoring_func; DeepSeek-V3, Kimi K2, Llama 4 and "
        "NemotronH's MoE blocks 'sigmoid'; Megatron --moe-router-score-function). It decides which model is "
        "trained, not its cost: written by the Megatron export, not priced",
    )
    norm_topk_prob: bool | None = Field(
        None,
        description="Whether a token's top-k routing weights are renormalised to sum to 1 (HF config.json; Qwen3 "
        "and DeepSeek-V3 true, DeepSeek-V2 false); None: the family's default, renormalised (a softmax over the "
        "top-k logits, Mixtral's and GPT-OSS's routers). Not priced",
    )
    routed_scaling_factor: PositiveFloat | None = Field(
        None,
        description="Factor on the routed experts' weights (HF config.json; DeepSeek-V3 and Nemotron 3 Nano 2.5, "
        "Super 5.0; Megatron --moe-router-topk-scaling-factor); None: 1. Not priced",
    )
    router_aux_loss_coef: float | None = Field(
        None,
        ge=0,
        le=MAX_AUX_LOSS_COEF,
        allow_inf_nan=False,
        description="The load-balancing auxiliary loss's coefficient the model trained with (HF config.json; "
        "Mixtral-8x7B 0.02, Qwen3-MoE 0.001, gpt-oss 0.9; Megatron --moe-aux-loss-coeff, whose default 0 "
        "balances nothing); None: not stated. Written by the Megatron export, not priced",
    )
    router_expert_bias: bool = Field(
        False,
        description="Aux-loss-free load balancing: a per-expert bias added to the sigmoid scores for the top-k "
        "choice only (DeepSeek-V3 HF topk_method 'noaux_tc', e_score_correction_bias; NemotronH's MoE blocks; "
        "Megatron --moe-router-enable-expert-bias). A buffer, not a weight: not priced",
    )
    num_nextn_predict_layers: int = Field(
        0,
        ge=0,
        le=MAX_MTP_LAYERS,
        description="Multi-token-prediction (MTP) modules the model was trained with (DeepSeek-V3: 1); each is a "
        "decoder layer of the last layer's kind plus a 2h x h projection and its own LM head and loss",
    )

    # Hybrid Mamba-2 / attention / MLP / MoE models (NemotronH; HF NemotronHConfig keys).
    hybrid_override_pattern: str | None = Field(
        None,
        description="One character per layer: M Mamba-2, * attention, - MLP, E MoE (HYBRID_BLOCKS); None: every "
        "layer is attention followed by an MLP or MoE FFN",
    )
    mtp_hybrid_override_pattern: str | None = Field(
        None,
        description="The blocks of each MTP module of a hybrid model, in HYBRID_BLOCKS symbols (Megatron-Core "
        "--mtp-hybrid-override-pattern; Nemotron 3 Super: '*E', an attention and a MoE block)",
    )
    mamba_num_heads: PositiveInt | None = Field(None, description="Mamba-2 heads (HF NemotronHConfig)")
    mamba_head_dim: PositiveInt | None = Field(None, description="Mamba-2 head dim P; d_inner = heads x P")
    ssm_state_size: PositiveInt | None = Field(None, description="Mamba-2 state size N")
    mamba_n_groups: PositiveInt | None = Field(
        None, description="Mamba-2 B/C groups G (HF config.json n_groups; Megatron --mamba-num-groups)"
    )
    mamba_conv_kernel: PositiveInt | None = Field(
        None, description="Mamba-2 causal conv1d width (HF conv_kernel); None: MAMBA_CONV_KERNEL"
    )
    mamba_chunk_size: PositiveInt | None = Field(
        None, description="Tokens per chunk of Mamba-2's SSD scan (HF chunk_size); None: MAMBA_CHUNK_SIZE"
    )
    mamba_ssm_cache_dtype: SsmStateDtype | None = Field(
        None,
        description="The format serving engines keep the Mamba-2 SSM state in where the checkpoint states it (HF "
        "config.json mamba_ssm_cache_dtype, read by vLLM and TensorRT-LLM when not set on the command line; HF "
        "names float32/bfloat16/float16 accepted); None: the engine's default (plan serve)",
    )

    checkpoint_weights_dtype: Literal["fp8", "fp4"] | None = Field(
        None,
        description="The low-precision format the published checkpoint's weights ship in (HF config.json "
        "quantization_config: fp8, block- or tensor-scaled; fp4, MXFP4 or NVFP4); None: 16-bit. plan serve prices "
        "this format unless --weights-dtype says otherwise; training ignores it",
    )
    checkpoint_fp4_format: Literal["mxfp4", "nvfp4"] | None = Field(
        None,
        description="Which 4-bit format an fp4 checkpoint ships in (HF quantization_config quant_method 'mxfp4': "
        "the OCP MX format, an E8M0 scale per 32 values, 0.53125 bytes a weight; ModelOpt quant_algo 'NVFP4': an E4M3 "
        "scale per 16, 0.5625); None: not an fp4 checkpoint, or not stated (priced as NVFP4, what --weights-dtype fp4 "
        "quantizes to). plan serve prices the stated format's bytes where it serves the checkpoint's fp4, and refuses "
        "NVFP4 on TensorRT-LLM off Blackwell",
    )
    checkpoint_16bit_attention: bool = Field(
        False,
        description="The published checkpoint keeps its attention projections 16-bit beside its quantized "
        "weights (HF quantization_config modules_to_not_convert or ModelOpt exclude_modules naming the attention: "
        "gpt-oss's MXFP4 covers the experts alone); plan serve prices them so where it serves that format",
    )

    # Multi-head latent attention (DeepSeek-V2/V3).
    q_lora_rank: PositiveInt | None = None
    kv_lora_rank: PositiveInt | None = None
    qk_nope_head_dim: PositiveInt | None = None
    qk_rope_head_dim: PositiveInt | None = None
    v_head_dim: PositiveInt | None = None

    @field_validator("rope_scaling")
    @classmethod
    def _rope_factors(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        """The scaling's numbers that the Megatron export writes as arguments (--rope-scaling-factor,
        YaRN's factors): finite and positive where stated; another value would reach the launch line
        ('--rope-scaling-factor inf')."""
        for key in ROPE_SCALING_NUMBERS:
            number = (value or {}).get(key)
            if number is None:
                continue
            ok = isinstance(number, (int, float)) and not isinstance(number, bool) and math.isfinite(number)
            if not ok or number <= 0:
                raise ValueError(f"rope_scaling.{key} must be a finite number > 0, got {number!r}")
        if value:
            # transformers' rope_config_validation reads the kind from 'rope_type' (or the older 'type') and
            # refuses a scaling without one; the export writes it into the launch line's notes
            kind = value.get("rope_type", value.get("type"))
            if not isinstance(kind, str) or not kind.strip():
                raise ValueError(
                    f"rope_scaling needs its kind as text under 'rope_type' (or 'type'), e.g. llama3 or yarn; "
                    f"got {kind!r}"
                )
        return value

    @field_validator("mamba_ssm_cache_dtype", mode="before")
    @classmethod
    def _torch_dtype_names(cls, value: Any) -> Any:
        """HF config.json names the format as torch does ('float32'); the planner's names are short."""
        return TORCH_DTYPE_NAMES.get(value, value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _dimensions_in_range(self) -> ModelSpec:
        for name, value in self:
            if isinstance(value, int) and not isinstance(value, bool) and value > MAX_MODEL_DIMENSION:
                raise ValueError(f"{name} {value} is more than {MAX_MODEL_DIMENSION:,}, the largest dimension planned")
        return self

    @model_validator(mode="after")
    def _consistent(self) -> ModelSpec:
        if self.checkpoint_fp4_format is not None and self.checkpoint_weights_dtype != "fp4":
            raise ValueError(
                f"checkpoint_fp4_format {self.checkpoint_fp4_format} needs checkpoint_weights_dtype fp4 (it is "
                f"{self.checkpoint_weights_dtype or 'unset, 16-bit'})"
            )
        if self.checkpoint_16bit_attention and self.checkpoint_weights_dtype is None:
            raise ValueError(
                "checkpoint_16bit_attention: true needs checkpoint_weights_dtype (fp8 or fp4), the format beside "
                "which the attention stays 16-bit; a 16-bit checkpoint keeps everything 16-bit"
            )
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError(
                f"num_attention_heads {self.num_attention_heads} is not divisible by "
                f"num_key_value_heads {self.num_kv_heads}"
            )
        if self.head_dim is None and not self.is_mla and self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not divisible by num_attention_heads "
                f"{self.num_attention_heads}; give head_dim explicitly"
            )
        spellings = {
            k: v
            for k, v in (
                ("num_local_experts", self.num_local_experts),
                ("n_routed_experts", self.n_routed_experts),
                ("num_experts", self.num_experts),
            )
            if v is not None
        }
        if len(set(spellings.values())) > 1:
            raise ValueError(f"expert counts disagree: {spellings}")
        if self.hidden_act.lower() not in ACTIVATIONS:
            raise ValueError(f"hidden_act '{self.hidden_act}' is not one of {', '.join(sorted(ACTIVATIONS))}")
        if not spellings and self.num_experts_per_tok is not None:
            raise ValueError(
                "num_experts_per_tok without experts: give num_local_experts (or n_routed_experts, num_experts)"
            )
        if spellings and self.num_experts_per_tok is None:
            raise ValueError("num_experts_per_tok is required when the model has experts")
        if spellings and self.num_experts_per_tok > self.num_experts_total:  # type: ignore[operator]
            raise ValueError(
                f"num_experts_per_tok {self.num_experts_per_tok} exceeds the {self.num_experts_total} experts"
            )
        groups, per_token = self.routing_groups
        if groups > 1:
            experts = self.num_experts_total
            if not experts or experts % groups:
                raise ValueError(f"n_group {groups} must divide the {experts} routed experts")
            if per_token > groups or per_token * experts // groups < (self.num_experts_per_tok or 0):
                raise ValueError(
                    f"topk_group {per_token} must be at most n_group {groups} and its groups must hold the "
                    f"{self.num_experts_per_tok} experts a token takes"
                )
        mla = (self.kv_lora_rank, self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim)
        if any(x is not None for x in mla) and any(x is None for x in mla):
            raise ValueError("MLA needs kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim and v_head_dim together")
        if self.layer_types is not None and len(self.layer_types) != self.num_hidden_layers:
            raise ValueError(
                f"layer_types lists {len(self.layer_types)} layers, num_hidden_layers is {self.num_hidden_layers}"
            )
        if self.layer_types is not None and "sliding_attention" in self.layer_types and self.sliding_window is None:
            raise ValueError("layer_types names sliding_attention layers but sliding_window is not set")
        if self.num_chunked_layers and self.attention_chunk_size is None:
            raise ValueError("layer_types names chunked_attention layers but attention_chunk_size is not set")
        if self.moe_latent_size is not None and not self.is_moe:
            raise ValueError("moe_latent_size without experts: LatentMoE projects the routed experts' input")
        self._consistent_hybrid()
        if self.num_moe_layers == 0 and self.is_moe:
            raise ValueError("experts are declared but first_k_dense_replace/decoder_sparse_step leave no MoE layer")
        return self

    def _consistent_hybrid(self) -> None:
        pattern = self.hybrid_override_pattern
        mamba = (self.mamba_num_heads, self.mamba_head_dim, self.ssm_state_size, self.mamba_n_groups)
        if pattern is None:
            if self.mtp_hybrid_override_pattern is not None:
                raise ValueError("mtp_hybrid_override_pattern needs a hybrid_override_pattern")
            if any(x is not None for x in mamba):
                raise ValueError(
                    "mamba_* and ssm_state_size need a hybrid_override_pattern that places the Mamba layers"
                )
            return
        unknown = sorted(set(pattern) - set(HYBRID_BLOCKS))
        if unknown:
            allowed = ", ".join(f"'{k}' {v}" for k, v in HYBRID_BLOCKS.items())
            raise ValueError(f"hybrid_override_pattern has {', '.join(map(repr, unknown))}; allowed {allowed}")
        if len(pattern) != self.num_hidden_layers:
            raise ValueError(
                f"hybrid_override_pattern has {len(pattern)} layers, num_hidden_layers is {self.num_hidden_layers}"
            )
        if ("E" in pattern) != self.is_moe:
            raise ValueError("hybrid_override_pattern has MoE layers ('E') exactly when the model declares experts")
        if self.first_k_dense_replace or self.decoder_sparse_step or self.layer_types or self.is_mla:
            raise ValueError(
                "a hybrid_override_pattern places every layer: first_k_dense_replace, decoder_sparse_step, layer_types "
                "and MLA are not read with it"
            )
        mtp = self.mtp_hybrid_override_pattern
        if bool(self.num_nextn_predict_layers) != bool(mtp):
            raise ValueError(
                "a hybrid model's MTP modules (num_nextn_predict_layers) need mtp_hybrid_override_pattern, the blocks "
                "of each, and that pattern needs MTP modules"
            )
        if mtp and (set(mtp) - set(HYBRID_BLOCKS) or ("E" in mtp) != self.is_moe):
            raise ValueError(
                f"mtp_hybrid_override_pattern {mtp!r}: symbols of {', '.join(HYBRID_BLOCKS)}, with MoE blocks ('E') "
                "exactly when the model declares experts"
            )
        if "M" in pattern + (mtp or ""):
            if any(x is None for x in mamba):
                raise ValueError(
                    "Mamba layers ('M') need mamba_num_heads, mamba_head_dim, ssm_state_size and mamba_n_groups"
                )
            if self.mamba_num_heads % self.mamba_n_groups:  # type: ignore[operator]
                raise ValueError(
                    f"mamba_n_groups {self.mamba_n_groups} must divide mamba_num_heads {self.mamba_num_heads}"
                )

    # ---- derived architecture ---------------------------------------------------------------
    @model_validator(mode="after")
    def _size_in_range(self) -> ModelSpec:
        if self.num_hidden_layers > MAX_MODEL_LAYERS:
            raise ValueError(
                f"num_hidden_layers {self.num_hidden_layers} is more than {MAX_MODEL_LAYERS:,}, the most layers planned"
            )
        shape = (
            f"num_hidden_layers {self.num_hidden_layers}, hidden_size {self.hidden_size}, intermediate_size "
            f"{self.intermediate_size}, vocab_size {self.vocab_size}"
            + (f", {self.num_experts_total} experts" if self.num_experts_total else "")
        )
        try:  # counted once and kept (``Frozen.model_copy`` drops the cache where a copy changes the shape)
            total = self.parameter_counts.total
        except PlannerError:  # a count past a 64-bit integer
            total = math.inf
        if total > MAX_MODEL_PARAMETERS:
            size = "more than 9.2e18" if math.isinf(total) else f"{total:.3g}"
            raise ValueError(
                f"{shape} make {size} parameters, more than {MAX_MODEL_PARAMETERS:.0e}, the largest model planned"
            )
        return self

    @property
    def num_sliding_layers(self) -> int:
        """Layers with sliding-window attention."""
        if self.sliding_window is None:
            return 0
        if self.layer_types is None:
            return self.num_hidden_layers
        return sum(1 for kind in self.layer_types if kind == "sliding_attention")

    @property
    def num_chunked_layers(self) -> int:
        """Layers with chunked attention (Llama 4's RoPE layers): causal attention within each chunk of
        ``attention_chunk_size`` tokens."""
        return sum(1 for kind in self.layer_types or () if kind == "chunked_attention")

    @property
    def num_kv_heads(self) -> int:
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def head_dim_resolved(self) -> int:
        """d_h: explicit head_dim, else h / a (MLA: the q/k head dim, nope + rope)."""
        if self.is_mla:
            return self.qk_nope_head_dim + self.qk_rope_head_dim  # type: ignore[operator]
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def is_gated_mlp(self) -> bool:
        if self.gated_mlp is not None:
            return self.gated_mlp
        return self.hidden_act.lower() in GATED_ACTIVATIONS

    @property
    def num_experts_total(self) -> int:
        """Routed experts per MoE layer (0 for a dense model), whichever HF key spelled it."""
        return self.num_local_experts or self.n_routed_experts or self.num_experts or 0

    @property
    def routing_groups(self) -> tuple[int, int]:
        """(n_group, topk_group) of group-limited routing; (1, 1) without a limit (with one group, or
        none stated, topk_group limits nothing)."""
        groups = self.n_group or 1
        return (groups, self.topk_group or groups) if groups > 1 else (1, 1)

    @property
    def is_moe(self) -> bool:
        return self.num_experts_total > 0

    @property
    def expert_intermediate_size(self) -> int:
        return self.moe_intermediate_size or self.intermediate_size

    @property
    def expert_input_size(self) -> int:
        """Width the routed experts read and write, and the dispatch carries: ``moe_latent_size``
        under LatentMoE, else ``hidden_size``."""
        return self.moe_latent_size or self.hidden_size

    @property
    def shared_expert_width(self) -> int:
        """FFN width of a MoE layer's shared experts together (DeepSeek: n_shared_experts x the
        expert width; Qwen2-MoE: shared_expert_intermediate_size); 0 without."""
        return (self.n_shared_experts or 0) * self.expert_intermediate_size + (
            self.shared_expert_intermediate_size or 0
        )

    def is_moe_layer(self, index: int) -> bool:
        """HF's rule: DeepSeek skips the first k layers; Qwen-MoE uses every step-th layer; a hybrid
        pattern's 'E' layers."""
        if not self.is_moe:
            return False
        if self.hybrid_override_pattern is not None:
            return self.hybrid_override_pattern[index] == "E"
        if index < (self.first_k_dense_replace or 0):
            return False
        return (index + 1) % (self.decoder_sparse_step or 1) == 0

    @property
    def num_moe_layers(self) -> int:
        """How many layers ``is_moe_layer`` holds, in closed form: the multiples of the step among
        layer numbers k+1 .. L (a sum over the layers took seconds at a million layers)."""
        if not self.is_moe:
            return 0
        if self.hybrid_override_pattern is not None:
            return self.hybrid_override_pattern.count("E")
        step = self.decoder_sparse_step or 1
        return max(self.num_hidden_layers // step - (self.first_k_dense_replace or 0) // step, 0)

    @property
    def num_dense_layers(self) -> int:
        return self.num_hidden_layers - self.num_moe_layers

    @property
    def is_hybrid(self) -> bool:
        """Layers are single blocks placed by ``hybrid_override_pattern``."""
        return self.hybrid_override_pattern is not None

    def blocks_of(self, symbol: str) -> int:
        """Blocks of one ``HYBRID_BLOCKS`` kind: a hybrid pattern's count of the symbol; in a
        transformer every layer holds an attention block and its dense layers an MLP, its MoE
        layers a MoE FFN, and no layer a Mamba block."""
        if self.hybrid_override_pattern is None:
            return {"*": self.num_hidden_layers, "-": self.num_dense_layers, "E": self.num_moe_layers}.get(symbol, 0)
        return self.hybrid_override_pattern.count(symbol)

    @property
    def attention_layer_share(self) -> float:
        """Attention blocks per layer over the model: 1 in a transformer, n_attention / L in a hybrid."""
        return self.blocks_of("*") / self.num_hidden_layers

    def layer_kind(self, moe: bool) -> LayerKind:
        """What one layer of the dense (``moe`` False) or MoE kind holds (``LayerKind``)."""
        if self.hybrid_override_pattern is None:
            return LayerKind(attention=1.0, mamba=0.0, mlp=0.0 if moe else 1.0, moe=1.0 if moe else 0.0, blocks=2.0)
        if moe:
            return LayerKind(attention=0.0, mamba=0.0, mlp=0.0, moe=1.0, blocks=1.0)
        others = max(self.num_dense_layers, 1)
        return LayerKind(
            attention=self.blocks_of("*") / others,
            mamba=self.blocks_of("M") / others,
            mlp=self.blocks_of("-") / others,
            moe=0.0,
            blocks=1.0,
        )

    @property
    def mamba_conv_width(self) -> int:
        """The conv1d width: ``mamba_conv_kernel`` or ``MAMBA_CONV_KERNEL``."""
        return self.mamba_conv_kernel or MAMBA_CONV_KERNEL

    @property
    def mamba_chunk(self) -> int:
        """The SSD chunk: ``mamba_chunk_size`` or ``MAMBA_CHUNK_SIZE``."""
        return self.mamba_chunk_size or MAMBA_CHUNK_SIZE

    @property
    def mamba_inner_size(self) -> int:
        """d_inner = mamba_num_heads x mamba_head_dim (0 without Mamba layers)."""
        return (self.mamba_num_heads or 0) * (self.mamba_head_dim or 0)

    @property
    def mamba_groups_state(self) -> int:
        """G x N: the width of Mamba-2's B (and of its C) per token (0 without Mamba layers)."""
        return (self.mamba_n_groups or 0) * (self.ssm_state_size or 0)

    @property
    def mamba_conv_channels(self) -> int:
        """Channels of Mamba-2's causal conv1d, x, B and C: d_inner + 2 G N (0 without Mamba layers)."""
        return self.mamba_inner_size + 2 * self.mamba_groups_state

    @cached_property
    def parameter_counts(self) -> ParameterCounts:
        """Parameter counts (total, active per token, per layer kind, embedding, LM head)."""
        from planner.cost.params import count_parameters

        return count_parameters(self)
