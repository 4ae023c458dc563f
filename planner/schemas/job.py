"""JobSpec: what is being trained, independent of the mesh."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, PositiveFloat, PositiveInt, field_validator, model_validator

from planner.errors import PlannerError
from planner.schemas.base import Frozen
from planner.schemas.hardware import BYTES_PER_ELEMENT
from planner.schemas.model import MAX_MTP_LAYERS
from planner.schemas.stack import MoeDispatcher, Stack

if TYPE_CHECKING:
    from planner.schemas.model import ModelSpec
    from planner.schemas.stack import AttentionKernel

ADAM_STATE_BYTES_PER_PARAM = {"fp32": 12.0, "bf16": 8.0}
"""Adam's state per parameter by the format of its two moments: the fp32 master weight (4) and
m and v at 4 bytes each, or at 2 with Megatron's precision-aware optimizer
(--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16, Transformer
Engine's FusedAdam; Megatron-Bridge's DeepSeek-V3 and Qwen3 recipes run it)."""

MASTER_WEIGHT_BYTES_PER_PARAM = 4.0
"""The fp32 master weight inside ``ADAM_STATE_BYTES_PER_PARAM``: with fp32 working weights
(``JobSpec.weight_dtype``) the weights are the master, and the optimizer keeps its moments alone
(Megatron-LM's FP32Optimizer without --bf16/--fp16; torch AMP's fp32 parameters under autocast)."""

DEFAULT_OPTIMIZER_STATE_BYTES_PER_PARAM = ADAM_STATE_BYTES_PER_PARAM["fp32"]
"""Mixed-precision Adam: fp32 master weight (4) + fp32 first moment (4) + fp32 second moment (4).
Rajbhandari et al. 2020, 'ZeRO: Memory Optimizations Toward Training Trillion Parameter Models',
section 3.1 (K = 12). The bf16 weight and gradient are counted separately."""

NATURAL_ROUTING_IMBALANCE = 1.15
"""Estimate: routed tokens on the busiest expert-parallel rank over the mean, per MoE layer and
micro-batch, in dropless training with natural routing (no forced balance). No training
measurement at the rank level is published; the bracket is: per expert, max/mean over a whole
validation set is 1.04 with DeepSeek's auxiliary-loss-free balancing and 1.52-1.72 with an
auxiliary loss of weight 1e-3 (Wang et al. 2024, arXiv:2408.15664, Table 2: MaxVio_global 0.04
and 0.52/0.72 for 3B/1B models, 64 experts top-6), per batch worse than global (ibid., section 4);
a rank holding several experts averages its hot and cold ones (a per-expert 1.5-1.7 is about
1.1-1.25 per rank with four or more experts per rank, if hot experts are not co-located: a
sampling argument, not a measurement); the one published per-rank figure is from serving, median
1.069 over 16 EP ranks without rebalancing (vLLM pull request 50647, Kimi K3). Megatron's
--moe-router-force-load-balancing, which every published Megatron-Bridge benchmark uses, is 1
("for benchmarking purposes only", megatron/core/transformer/moe/README.md)."""


RecomputeModule = Literal["core_attn", "layernorm", "mla_up_proj", "moe_act", "mlp", "moe", "shared_experts"]
"""Megatron-Core's selective-recompute modules (TransformerConfig.recompute_modules, megatron/core/
transformer/transformer_config.py; --recompute-modules): what each frees and runs again is
``cost.recompute.MODULES``."""


MAX_SEQ_LEN = 2**24
"""Longest sequence a job may train on, 16,777,216 tokens (the longest published contexts are
about 10M); with ``MAX_BATCH_SEQUENCES`` a bound that keeps a mistyped size from overflowing the
cost terms' integer arithmetic, not a measurement."""


MAX_BATCH_SEQUENCES = 2**24
"""Most sequences in one global batch, 16,777,216 (published batches are 1K-64K sequences)."""


MIN_MOE_CAPACITY_FACTOR = 0.1
"""The smallest token-drop capacity factor a job may state: at 0.1 every expert takes a tenth of
its even share and nine routed tokens in ten are dropped, far below the 1.0-2.0 that runs use
(GShard and Switch: 1.0-2.0; Megatron-LM's examples --moe-expert-capacity-factor 1.0); below it the
model is priced as training almost no expert (drop:1e-300 had priced an MFU of 164%). A bound, not
a measurement."""

MAX_MOE_ROUTING_RATIO = 1024.0
"""The largest capacity factor or load imbalance a job may state: a capacity factor means nothing
past experts / top-k (every token on one expert) and an imbalance nothing past the expert-parallel
size (every routed token on one rank), both at most the experts of the largest MoE models (a few
hundred). A bound that keeps a mistyped ratio from overflowing the memory and time counts, not a
measurement."""


MAX_TRAINING_TOKENS = 1e16
"""The largest token budget planned: 10 quadrillion tokens, about 280x the largest published
pretraining corpus (Qwen3 Technical Report, arXiv:2505.09388: 36 trillion tokens). A bound on
sense, not a measurement: beyond it the days and dollars run to 20 digits and mean nothing."""


class JobSpec(Frozen):
    """A training job: global batch, sequence length, precision, optimizer state, token budget.

    The global batch is in sequences; ``global_batch_tokens`` is accepted instead and converted
    (it must be a multiple of ``seq_len``). ``dtype`` is the compute format of the matmuls (fp8
    keeps bf16 weights and activations between layers, as Transformer Engine does).
    """

    global_batch_size: PositiveInt | None = Field(
        None,
        le=MAX_BATCH_SEQUENCES,
        description="Global batch in sequences per optimizer step (unset: the model card's, else 4 Mi tokens)",
    )
    global_batch_tokens: PositiveInt | None = Field(
        None,
        le=MAX_BATCH_SEQUENCES * MAX_SEQ_LEN,
        description="Global batch in tokens (instead of sequences; a multiple of seq_len)",
    )
    seq_len: PositiveInt = Field(
        le=MAX_SEQ_LEN,
        description="Sequence length (unset: the model card's, else 4096 or the model's context if shorter)",
    )
    dtype: Literal["bf16", "fp16", "fp8", "fp4"] = Field(
        "bf16",
        description="Matmul precision (fp8 and fp4 keep bf16 weights and activations between layers; fp4 is "
        "NVFP4, data-centre Blackwell only: E2M1 with an E4M3 scale per 16 elements, Transformer Engine's "
        "NVFP4BlockScaling recipe or torchao's NVFP4 training)",
    )
    bf16_last_layers: int = Field(
        0,
        ge=0,
        description="Transformer layers at the end of the model whose linears stay in bf16 under fp8 or fp4 "
        "(Megatron --first-last-layers-bf16 --num-layers-at-end-in-bf16 N; torchtitan's NVFP4 recipe keeps the "
        "last 15%)",
    )
    fp8_scaling: Literal["tensor", "row", "block"] = Field(
        "tensor",
        description="fp8 scaling granularity: per tensor (Transformer Engine current/delayed scaling, torchao "
        "tensorwise), per row (torchao rowwise: row-scaled GEMM kernels), per block (MXFP8, DeepSeek's tiles)",
    )
    weight_dtype: Literal["bf16", "fp16", "fp32"] = Field("bf16", description="Format of the working weights")
    gradient_dtype: Literal["bf16", "fp16", "fp32"] | None = Field(
        None,
        description="Format gradients are kept and reduced in: Megatron-LM's default keeps an fp32 main_grad, "
        "--grad-reduce-in-bf16 (as the Megatron-Bridge recipes run) bf16; unset: the stack's grad_reduce_dtype "
        "(`plan show stack`), whose 16-bit reduce runs in fp16 under fp16 training",
    )
    stack: str | Stack = Field(
        "megatron-core",
        description="Software stack (default megatron-core; see `plan list stacks`): kernels, overlap, gradient "
        "format. A name, a YAML path or a loaded Stack",
    )
    tp_comm_overlap: bool | None = Field(
        None,
        description="Overlap TP collectives with GEMMs (Megatron --tp-comm-overlap, torchtitan async TP); "
        "unset: the stack's",
    )
    ep_comm_overlap: bool = Field(
        False,
        description="Overlap expert-parallel dispatch/combine with another micro-batch's compute (Megatron "
        "--overlap-moe-expert-parallel-comm; interleaved pipeline or pp 1, no full recompute)",
    )
    moe_dispatcher: MoeDispatcher = Field(
        "alltoall",
        description="MoE token dispatcher (Megatron --moe-token-dispatcher-type; flex is DeepEP/HybridEP), among "
        "those the stack runs",
    )
    moe_capacity_factor: float | None = Field(
        None,
        ge=MIN_MOE_CAPACITY_FACTOR,
        le=MAX_MOE_ROUTING_RATIO,
        description="Token drop with padding to capacity (Megatron --moe-expert-capacity-factor c "
        "--moe-pad-expert-input-to-capacity): every expert runs c x its even share of the routed tokens, the "
        "overflow is dropped; None: dropless",
    )
    moe_load_imbalance: float | None = Field(
        None,
        ge=1,
        le=MAX_MOE_ROUTING_RATIO,
        description="Dropless routing: routed tokens on the busiest expert-parallel rank over the mean (it sets "
        "the MoE layer's time); 1: force-balanced, as benchmarks run; None: NATURAL_ROUTING_IMBALANCE",
    )
    mtp_layers: int | None = Field(
        None,
        ge=0,
        le=MAX_MTP_LAYERS,
        description="Multi-token-prediction layers trained (Megatron --mtp-num-layers), priced on the last "
        "pipeline stage with their LM head passes; unset: the model's num_nextn_predict_layers "
        "(DeepSeek-V3: 1), 0: none",
    )
    recompute_modules: tuple[RecomputeModule, ...] | None = Field(
        None,
        description="What selective recompute runs again (Megatron --recompute-granularity selective "
        "--recompute-modules): core_attn (the attention core), layernorm (the two norms' outputs), mla_up_proj "
        "(MLA's up-projections and RoPE), moe_act (the experts' activation), mlp (the dense MLP), moe (the whole "
        "MoE layer, dispatch included), shared_experts; a mesh that sets recompute 'selective' uses them. None: "
        "the stack's own selective policy (Megatron's default core_attn)",
    )
    compile: bool | None = Field(None, description="torch.compile; unset: the stack's")
    compile_loss: bool | None = Field(
        None,
        description="torch.compile covers the loss too (torchtitan's compile.components 'loss', its default since "
        "April 2025); unset: with compile, where the stack compiles its loss",
    )
    optimizer_state_bytes_per_param: float = Field(
        DEFAULT_OPTIMIZER_STATE_BYTES_PER_PARAM,
        ge=0,
        description="Optimizer state per parameter: 12 for Adam with an fp32 master weight and fp32 moments, 8 with "
        "bf16 moments (``ADAM_STATE_BYTES_PER_PARAM``; --adam-moments)",
    )
    training_tokens: PositiveFloat | None = Field(
        None, ge=1, le=MAX_TRAINING_TOKENS, description="Token budget, for time-to-train (1 to 1e16)"
    )
    flash_attention: bool = Field(
        True, description="Fused attention that stores no s x s scores in HBM (Dao et al. 2022)"
    )
    dropout: bool = Field(False, description="Dropout in attention and MLP (GPT-3 era); modern LLMs train without")
    memory_headroom: float = Field(
        0.0,
        ge=0,
        le=0.5,
        description=(
            "Share (at most half) of each GPU's memory kept free beyond the profile's reserve: a mesh fits only "
            "if its predicted peak is at most (1 - headroom) x the GPU's memory "
            "(``cost.memory.usable_memory_bytes``); cost.memory.MEMORY_UNDERCOUNT is the largest under-count "
            "measured against published peaks"
        ),
    )
    max_batch_growth: float = Field(
        0.0,
        ge=0,
        le=10,
        description=(
            "How far the global batch may grow, as a fraction (0.05 = 5%), to become a multiple of "
            "dp*micro_batch_size (times pp for interleaved 1F1B on a stack without micro-batch groups; on "
            "Megatron-Core at least pp micro-batches, and a multiple of pp where that fits better); 0 keeps it "
            "exact; at most 10 (an 11x "
            "batch is another job, a judgement)"
        ),
    )

    @model_validator(mode="after")
    def _compile_needs_the_stack(self) -> JobSpec:
        # --compile on megatron-core had been accepted and shown as 'compiled', priced as eager
        if self.compile and not self.software.compiles_model:
            raise ValueError(
                f"compile: stack '{self.software.name}' has no compiled layer figures (its kernels_per_layer_compiled "
                "equals kernels_per_layer_eager: the stack file says why); leave it unset or false"
            )
        return self

    @model_validator(mode="after")
    def _fp8_scaling_needs_fp8(self) -> JobSpec:
        # the CLI refused --fp8-scaling without --dtype fp8, the library ignored it (a review, 2026-12-07)
        if "fp8_scaling" in self.model_fields_set and self.fp8_scaling != "tensor" and self.dtype != "fp8":
            raise ValueError(
                f"fp8_scaling '{self.fp8_scaling}': scales fp8 matmuls only; set dtype 'fp8' (the job: {self.dtype})"
            )
        return self

    @model_validator(mode="after")
    def _compiled_loss_needs_compile(self) -> JobSpec:
        if self.compile_loss and not (self.compiled and self.software.compiles_loss):
            raise ValueError(
                f"compile_loss: stack '{self.software.name}' "
                + ("compiles no loss" if not self.software.compiles_loss else "compiles the loss only with compile")
                + "; leave it unset or false"
            )
        return self

    @model_validator(mode="after")
    def _fp4_needs_the_stack(self) -> JobSpec:
        if self.dtype == "fp4" and self.software.fp4_cast_bytes_per_element is None:
            from planner.catalog import list_stacks

            runs = [s.name for s in list_stacks() if s.fp4_cast_bytes_per_element is not None]
            raise ValueError(
                f"dtype 'fp4': stack {self.software.name} trains no NVFP4 (stacks that do: {', '.join(runs)})"
            )
        return self

    @model_validator(mode="after")
    def _formats_the_stack_runs(self) -> JobSpec:
        """fp8 scaling, Adam's moments and dropout as the stack has them (``Stack.fp8_scalings``,
        ``adam_moments``, ``dropout``): a plan had priced them, and only its export said the stack
        cannot run them (or, for dropout, exported a job without it)."""
        stack = self.software
        if self.dtype == "fp8" and not stack.fp8_scalings:
            from planner.catalog import list_stacks

            runs = [s.name for s in list_stacks() if s.fp8_scalings]
            raise ValueError(f"dtype 'fp8': stack {stack.name} trains no fp8 (stacks that do: {', '.join(runs)})")
        if self.dtype == "fp8" and self.fp8_scaling not in stack.fp8_scalings:
            raise ValueError(
                f"fp8_scaling '{self.fp8_scaling}' (--fp8-scaling): stack {stack.name} scales fp8 per "
                f"{' or '.join(stack.fp8_scalings)}"
            )
        moments = next(
            (k for k, v in ADAM_STATE_BYTES_PER_PARAM.items() if v == self.optimizer_state_bytes_per_param), None
        )
        if moments is None:
            # Adam's state is one of its formats' sizes; another (0 or 3 bytes) had been priced as given and
            # let meshes fit that cannot run (a review, 2026-12-07)
            sizes = ", ".join(f"{v:g} ({k} moments)" for k, v in ADAM_STATE_BYTES_PER_PARAM.items())
            raise ValueError(
                f"optimizer_state_bytes_per_param {self.optimizer_state_bytes_per_param:g}: Adam with an fp32 master "
                f"weight keeps {sizes} bytes per parameter (--adam-moments fp32|bf16)"
            )
        if moments not in stack.adam_moments:
            raise ValueError(
                f"Adam moments in {moments} (--adam-moments, optimizer_state_bytes_per_param "
                f"{self.optimizer_state_bytes_per_param:g}): stack {stack.name} keeps them in "
                + " or ".join(stack.adam_moments)
            )
        if self.dropout and not stack.dropout:
            raise ValueError(f"dropout (--dropout): stack {stack.name}'s models have no dropout layers")
        return self

    @model_validator(mode="after")
    def _bf16_layers_need_low_precision(self) -> JobSpec:
        if self.bf16_last_layers and not self.low_precision:
            raise ValueError(
                f"bf16_last_layers {self.bf16_last_layers} (--bf16-last-layers) keeps layers out of fp8/fp4, but dtype "
                f"is '{self.dtype}' (--dtype fp8 or fp4)"
            )
        return self

    @model_validator(mode="after")
    def _tp_overlap_needs_the_stack(self) -> JobSpec:
        if self.tp_comm_overlap and self.software.tp_overlap_hidden_fraction == 0:
            from planner.catalog import list_stacks

            can = [s.name for s in list_stacks() if s.tp_overlap_hidden_fraction > 0]
            raise ValueError(
                f"tp_comm_overlap (--tp-comm-overlap): stack {self.software.name} cannot overlap tensor-parallel "
                f"collectives (its tp_overlap_hidden_fraction is 0); stacks that can: {', '.join(can)}"
            )
        return self

    @model_validator(mode="after")
    def _ep_overlap_needs_the_stack(self) -> JobSpec:
        if self.ep_comm_overlap and self.software.ep_overlap_hidden_fraction == 0:
            raise ValueError(
                f"ep_comm_overlap: stack {self.software.name} cannot overlap expert-parallel communication "
                "(its ep_overlap_hidden_fraction is 0); megatron-core can (--overlap-moe-expert-parallel-comm)"
            )
        return self

    @model_validator(mode="after")
    def _recompute_modules_the_stack_runs(self) -> JobSpec:
        modules = self.recompute_modules
        if modules is None:
            return self
        if not modules or len(set(modules)) != len(modules):
            raise ValueError(f"recompute_modules {list(modules)}: give each module once, at least one")
        if not self.software.per_module_recompute:
            raise ValueError(
                f"recompute_modules: stack {self.software.name} takes no list of modules to recompute (its "
                f"selective recompute is its own policy); megatron-core does (--recompute-modules)"
            )
        return self

    @model_validator(mode="after")
    def _dispatcher_the_stack_runs(self) -> JobSpec:
        allowed = self.software.moe_dispatchers
        if self.moe_dispatcher != "alltoall" and self.moe_dispatcher not in allowed:
            raise ValueError(
                f"moe_dispatcher '{self.moe_dispatcher}': stack {self.software.name} runs "
                f"{', '.join(allowed) or 'no MoE dispatcher'}; megatron-core runs alltoall, allgather and flex"
            )
        if self.moe_capacity_factor is not None and self.moe_load_imbalance is not None:
            # each names a routing: the capacity factor pads every expert to c x its share and drops the
            # rest, so no rank runs more, and the dropless imbalance would go unpriced (a review,
            # 2026-12-07: both were taken, the imbalance echoed in the job and never priced)
            raise ValueError(
                f"moe_load_imbalance {self.moe_load_imbalance:g} with moe_capacity_factor "
                f"{self.moe_capacity_factor:g}: the first prices dropless routing, the second token drop, where every "
                "expert runs the capacity factor's share; give one"
            )
        if self.moe_dispatcher == "flex" and self.moe_capacity_factor is not None:
            # megatron/core/transformer/transformer_config.py __post_init__: "Flex token dispatcher with
            # deepep backend does not support moe_pad_expert_input_to_capacity"
            raise ValueError(
                "moe_dispatcher 'flex' with token drop (moe_capacity_factor): Megatron's flex dispatcher does not pad "
                "experts to capacity; drop tokens with alltoall or allgather, or route dropless"
            )
        return self

    @model_validator(mode="before")
    @classmethod
    def _batch_in_sequences(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        # a whole float (4194304.0) is the int the fields take it for (pydantic's lax int), so the two
        # batch forms derive each other from it too: it had left the batch in sequences unset (a review,
        # 2026-12-07: planner.estimate(..., global_batch_tokens=4194304.0) failed an assertion)
        seqs, tokens, seq_len = (
            int(v) if isinstance(v, float) and v.is_integer() else v
            for v in (data.get("global_batch_size"), data.get("global_batch_tokens"), data.get("seq_len"))
        )
        if seqs is None and tokens is None:
            if set(data) - set(cls.model_fields):  # a misspelt key (global_batch_sise): pydantic names it
                return data
            raise ValueError("give global_batch_size (sequences) or global_batch_tokens")
        if tokens is not None and isinstance(tokens, int) and isinstance(seq_len, int) and seq_len > 0:
            if tokens % seq_len:
                raise ValueError(f"global_batch_tokens {tokens} is not a multiple of seq_len {seq_len}")
            if seqs is not None and seqs * seq_len != tokens:
                raise ValueError(f"global_batch_size {seqs} x seq_len {seq_len} != global_batch_tokens {tokens}")
            if tokens // seq_len > MAX_BATCH_SEQUENCES:  # named as given, not as the sequences it makes
                raise ValueError(
                    f"global_batch_tokens {tokens} is {tokens // seq_len:,} sequences of {seq_len} tokens, more than "
                    f"the {MAX_BATCH_SEQUENCES:,} of one global batch planned at most"
                )
            data = {**data, "global_batch_size": tokens // seq_len}
        elif tokens is None and isinstance(seqs, int) and seqs > 0 and isinstance(seq_len, int) and seq_len > 0:
            # tokens given but no whole number (nan, text, 262144.5) stay for the field's check to refuse:
            # they had been replaced by seqs x seq_len without a word (a review)
            data = {**data, "global_batch_tokens": seqs * seq_len}
        return data

    @property
    def moe_dropless_imbalance(self) -> float:
        """The busiest expert-parallel rank's routed tokens over the mean under dropless routing:
        the job's, or ``NATURAL_ROUTING_IMBALANCE`` (``cost.routing.moe_load_factor`` applies it)."""
        return NATURAL_ROUTING_IMBALANCE if self.moe_load_imbalance is None else self.moe_load_imbalance

    @property
    def batch_size(self) -> int:
        """Global batch in sequences (always set after validation)."""
        assert self.global_batch_size is not None
        return self.global_batch_size

    @property
    def max_batch_size(self) -> int:
        """The largest global batch a mesh may run: floor(B * (1 + max_batch_growth))."""
        return int(self.batch_size * (1.0 + self.max_batch_growth) + 1e-9)

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.seq_len

    @property
    def low_precision(self) -> bool:
        """The linears' GEMMs run in an 8- or 4-bit format (fp8, fp4), on 16-bit weights and
        activations: what quantises, keeps the LM head in bf16 and may keep layers in bf16."""
        return self.dtype in ("fp8", "fp4")

    def in_bf16(self) -> JobSpec:
        """This job with every GEMM in bf16 (no layers set apart): how its bf16 LM head and bf16
        last layers are priced."""
        return self.model_copy(update={"dtype": "bf16", "bf16_last_layers": 0})

    @property
    def weight_bytes_per_param(self) -> float:
        return BYTES_PER_ELEMENT[self.weight_dtype]

    @property
    def weights_are_master(self) -> bool:
        """fp32 working weights are the optimizer's master copy (``MASTER_WEIGHT_BYTES_PER_PARAM``)."""
        return self.weight_dtype == "fp32"

    @property
    def optimizer_bytes_beside_weights_per_param(self) -> float:
        """Optimizer state held beside the working weights: ``optimizer_state_bytes_per_param``, less
        the master weight where the weights are it (fp32 weights had counted it twice: Llama-3-70B at
        tp 8 pp 2 dp 8, 18.1 GB of weights beside 6.8 of state, 2.3 GB per GPU over; a review,
        2026-12-08)."""
        master = MASTER_WEIGHT_BYTES_PER_PARAM if self.weights_are_master else 0.0
        return self.optimizer_state_bytes_per_param - master

    @field_validator("stack")
    @classmethod
    def _known_stack(cls, value: str | Stack) -> str | Stack:
        if isinstance(value, str):
            from planner.catalog import load_stack

            load_stack(value)  # an unknown name fails here, with the list
        return value

    @property
    def software(self) -> Stack:
        """The stack, loaded by name from the catalog when given as one."""
        if isinstance(self.stack, Stack):
            return self.stack
        from planner.catalog import load_stack

        return load_stack(self.stack)

    @property
    def stack_name(self) -> str:
        return self.software.name

    @property
    def gradient_format(self) -> str:
        """Format gradients are reduced in: ``gradient_dtype`` where set, else the stack's, whose
        16-bit reduce ('bf16') runs in fp16 under fp16 training: Megatron-LM's grad buffer is in
        the parameters' dtype unless --accumulate-allreduce-grads-in-fp32 (megatron/training/
        arguments.py: only --bf16 turns fp32 accumulation on, and reads --grad-reduce-in-bf16),
        DeepSpeed's communication_data_type defaults to fp16 with fp16 enabled (runtime/engine.py
        communication_data_type). The bytes are the same; the name had read bf16 for an fp16 run."""
        if self.gradient_dtype:
            return self.gradient_dtype
        stack = self.software.grad_reduce_dtype
        return "fp16" if stack == "bf16" and self.dtype == "fp16" else stack

    @property
    def gradient_bytes_per_param(self) -> float:
        return BYTES_PER_ELEMENT[self.gradient_format]

    @property
    def tp_overlap(self) -> bool:
        """TP collectives overlap GEMMs: ``tp_comm_overlap`` where set, else the stack's default."""
        return self.software.tp_comm_overlap if self.tp_comm_overlap is None else self.tp_comm_overlap

    @property
    def compiled(self) -> bool:
        return self.software.compile if self.compile is None else self.compile

    @property
    def loss_compiled(self) -> bool:
        """torch.compile covers the loss: ``compile_loss`` where set, else with compile where the stack
        compiles its loss."""
        if self.compile_loss is not None:
            return self.compile_loss
        return self.compiled and self.software.compiles_loss

    @property
    def attention_kernel(self) -> AttentionKernel:
        return self.software.attention_kernel

    @property
    def activation_bytes_per_element(self) -> int:
        """Activations between layers are 16-bit in mixed precision, fp8 included."""
        return 2


def check_positions(model: ModelSpec, job: JobSpec) -> None:
    """Refuse a sequence longer than a model with learned absolute positions has positions: its
    position embedding is a table of ``max_position_embeddings`` rows, one per position (GPT-2's
    wpe, Megatron-LM's learned_absolute), so a token past the last row has none to look up (the
    embedding lookup fails) and the model could not train as priced. RoPE and ALiBi compute the
    position from the index, with no table: they run longer sequences (how well is the
    checkpoint's matter), and the Megatron export raises --max-position-embeddings to the sequence
    (``export.megatron.max_positions``). Checked where a job is made for a model: the CLI's
    ``job_spec``, the library's ``planner.plan``/``estimate``/``plan_capacity``, the Megatron export."""
    if model.position_embedding_type == "learned" and job.seq_len > model.max_position_embeddings:
        raise PlannerError(
            f"--seq-len {job.seq_len}: {model.name}'s learned absolute positions stop at max_position_embeddings "
            f"{model.max_position_embeddings}: give --seq-len {model.max_position_embeddings} or less"
        )
