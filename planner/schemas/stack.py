"""Software stacks: what the training framework decides that the mesh does not.

A stack (Megatron-Core, torchtitan/FSDP2, llm-foundry/Composer FSDP, DeepSpeed, Megatron-LM of
2021) picks the attention kernel, whether TP collectives overlap GEMMs, the format gradients are
reduced in, how the loss is computed, and how many kernels a layer launches (eager or under
torch.compile). The same mesh on the same GPUs runs at different
speeds under different stacks, so a stack is a named, sourced profile (``stacks/<name>.yaml``)
chosen with ``--stack``, as a cluster is chosen with ``--cluster``. Every value names its source
in ``sources`` (the framework's code or docs at a commit, or a measurement); values fitted by
``plan calibrate --from-runs`` say so and list the rows in ``calibration``.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, NonNegativeFloat, PositiveFloat, model_validator

from planner.schemas.base import Frozen
from planner.schemas.hardware import MIN_EFFICIENCY, RunCalibration, check_sources
from planner.schemas.parallel import Schedule

AttentionKernel = Literal["fa2", "fused", "sdpa"]
"""'fa2': FlashAttention-2 (the flash-attn 2 package); 'fused': the GPU's best fused kernel
(cuDNN fused attention / FA3 on Hopper, Transformer Engine's pick); 'sdpa': whatever PyTorch's
scaled_dot_product_attention picks on the GPU (``GPU.sdpa_kernel``: FA2 on Hopper, cuDNN on
Blackwell)."""

SinkAttention = Literal["fused", "unfused", "local"]
"""How a stack's attention takes a learned sink logit per head (``Stack.sink_attention``):
'fused', inside the GPU's fused kernel (cuDNN fused attention from 9.13.1, which Transformer
Engine's FusedAttention calls with softmax_type 'learnable'); 'unfused', with the scores through
HBM in Transformer Engine's UnfusedDotProductAttention (concatenate the sink column, softmax over
s + 1 keys, drop it); 'local', Megatron-Core's own DotProductAttention, whose softmax with an
offset leaves the fused kernel for an fp32 PyTorch path. Both unfused kinds are priced by
``cost.compute.unfused_softmax_forward_s`` (``SINK_BYTES_PER_SCORE``). Flash kernels
(FlashAttention-2/3 as the frameworks call them) take no sink."""

MoeDispatcher = Literal["alltoall", "allgather", "flex"]
"""How MoE tokens reach their experts across the expert-parallel group (Megatron-Core's
--moe-token-dispatcher-type; priced in ``cost.traffic.ep_dispatch``): 'alltoall', one all-to-all
per direction carrying every top-k copy of a token; 'allgather', every rank gathers all tokens of
the group and the combine reduce-scatters them back (Megatron's default); 'flex', DeepEP's or
HybridEP's kernels, which send a token once to each rank holding one of its experts, and across
nodes once per node, forwarded over NVLink there."""

PartialRecompute = Literal["block", "every_nth"]
"""How a stack recomputes only some layers of a chunk (``Stack.partial_recompute``)."""

ExportFormat = Literal["megatron", "torchtitan", "deepspeed"]


STACK_CEILINGS = {
    "_us": 1e6,
    "_bytes_per_logit": 1e4,
    "_bytes_per_element": 1e4,
    "kernels_per_layer_eager": 1e5,
    "kernels_per_layer_compiled": 1e5,
    "selective_recompute_kernels": 1e5,
    "attention_efficiency_scale": 2.0,
}
"""Upper bounds of a stack's numbers by the unit in their names: a fixed time of a second per
layer or expert (the fitted ones stay below 50 ms), 10 kB of HBM traffic per logit or element
(the stacks count 2-100), 100,000 kernels per layer (they count 16-48), an attention kernel at twice its
published rate (the fit keeps it within 0.3-1). Bounds against typos, not
measurements: 1e300 had priced a 300-digit step with numpy's overflow warning on stderr."""


class Stack(Frozen):
    """One training software stack and the defaults it runs with."""

    name: str
    description: str
    export_format: ExportFormat | None = Field(
        None, description="The `plan export` target that launches this stack (None: none does)"
    )
    attention_kernel: AttentionKernel
    sink_attention: SinkAttention | None = Field(
        description="How the stack runs attention with sinks (``ModelSpec.attention_sinks``, GPT-OSS): 'fused', "
        "the GPU's fused kernel takes the sink logit; 'unfused', the scores go through HBM with the sink column "
        "concatenated; 'local', Megatron-Core's own attention with an fp32 softmax; None: the stack trains no "
        "model with sinks"
    )
    tp_comm_overlap: bool = Field(description="TP collectives overlap the GEMMs around them by default")
    tp_overlap_hidden_fraction: float = Field(
        ge=0, le=1, description="Share of the TP collective time hidden behind GEMMs when tp_comm_overlap is on"
    )
    ep_overlap_hidden_fraction: float = Field(
        ge=0,
        le=1,
        description="Share of the expert-parallel dispatch/combine time hidden behind another micro-batch's compute "
        "when the job overlaps it (Megatron --overlap-moe-expert-parallel-comm); 0: the stack cannot",
    )
    moe_dispatchers: tuple[MoeDispatcher, ...] = Field(
        description="Token dispatchers the stack runs for expert parallelism (``JobSpec.moe_dispatcher``); "
        "empty: it trains no MoE models"
    )
    trains_mtp: bool = Field(
        description="Builds multi-token-prediction modules (``ModelSpec.num_nextn_predict_layers``, Megatron-Core's "
        "--mtp-num-layers); False: a model's MTP depth goes untrained (``cost.flops.mtp_layers`` 0) and a job "
        "asking for it is refused"
    )
    overlap_slowdown: float = Field(
        ge=0, le=1, description="Compute slows by this fraction while a collective runs beside it (shared SMs and HBM)"
    )
    grad_reduce_dtype: Literal["fp32", "bf16"] = Field(description="Format gradients are reduced (and kept) in")
    sharded_weights_are_master: bool = Field(
        description="Under ZeRO-3 a rank's shard of the parameters is the optimizer's full-precision master copy "
        "(FSDP keeps parameters in their own dtype and casts them to the compute dtype only when gathered), so no "
        "16-bit copy of the shard is kept beside it; else the 16-bit shard and the master copy both are"
    )
    cross_entropy_bytes_per_logit: PositiveFloat = Field(
        description="HBM bytes the loss moves per logit element, forward and backward together"
    )
    cross_entropy_fusion: Literal["te"] | None = Field(
        None,
        description="The fused loss the stack runs, which its loss figures count: 'te', Transformer Engine's "
        "Triton cross entropy on the bf16 logits (Megatron --cross-entropy-loss-fusion --cross-entropy-fusion-impl "
        "te, written by the export); None: the framework's own",
    )
    moe_permute_fusion: bool | None = Field(
        None,
        description="The stack permutes routed tokens with one fused kernel, a read and a write of them, as the "
        "cost counts (Megatron --moe-permute-fusion, written by the export); None: not a setting of the stack",
    )
    loss_bytes_per_logit: PositiveFloat = Field(
        description="Bytes per logit element (of the last stage's tokens x V/t) the loss holds at its peak: the "
        "head's output and every copy and gradient of it alive at the same time (``cost.memory.stage_memory``)"
    )
    compiled_cross_entropy_bytes_per_logit: PositiveFloat | None = Field(
        description="cross_entropy_bytes_per_logit where torch.compile covers the loss (``JobSpec.loss_compiled``); "
        "None: the stack never compiles its loss"
    )
    compiled_loss_bytes_per_logit: PositiveFloat | None = Field(
        description="loss_bytes_per_logit where torch.compile covers the loss; None: the stack never compiles it"
    )
    loss_parallel_cross_entropy_bytes_per_logit: PositiveFloat | None = Field(
        None,
        description="cross_entropy_bytes_per_logit of the eager loss under tensor parallelism where the stack runs "
        "it as DTensor's loss parallel (torchtitan: vocab-sharded logits through "
        "torch/distributed/tensor/parallel/loss.py's unfused log-softmax and NLL backward); None: the stack's TP "
        "loss is its plain one",
    )
    loss_parallel_loss_bytes_per_logit: PositiveFloat | None = Field(
        None,
        description="loss_bytes_per_logit of that eager loss-parallel path (None with the figure above)",
    )
    expert_bias_bytes_per_element: NonNegativeFloat | None = Field(
        None,
        description="HBM bytes per routed token copy and hidden element that adding the experts' output bias "
        "(``ModelSpec.mlp_bias``) costs outside the grouped GEMM, forward and backward together; 0: fused in "
        "the GEMM; None: not counted, 0",
    )
    routed_glu_bytes_per_element: PositiveFloat | None = Field(
        None,
        description="HBM bytes per routed token copy and expert-intermediate element of the gated MLP's "
        "activation scaled by the router's probabilities, forward and backward together (the stack's measured "
        "kernel); None: the count of ``compute.GLU_BYTES_PER_ELEMENT`` per pass",
    )
    glu_clamp_bytes_per_element: NonNegativeFloat | None = Field(
        None,
        description="HBM bytes per routed token copy and expert-intermediate element that clamping the gated "
        "MLP's gate and up halves (``ModelSpec.swiglu_limit``) costs outside the fused activation, forward and "
        "backward together; 0: inside it; None: not counted, 0",
    )
    kernels_per_layer_eager: PositiveFloat = Field(
        description="Kernels one transformer layer's forward launches without torch.compile"
    )
    kernels_per_layer_compiled: PositiveFloat = Field(
        description="Kernels one transformer layer's forward launches under torch.compile"
    )
    selective_recompute_kernels: NonNegativeFloat = Field(
        description="Kernels of one layer's eager forward that the stack's selective recompute launches again in "
        "backward (the attention core's for 'attention'; every op but the saved ones for 'alternate_matmuls'): "
        "each pays the per-kernel gap the fitted layer overhead prices"
    )
    compile: bool = Field(description="torch.compile on by default")
    fp8_all_gather_scalings: tuple[Literal["tensor", "row", "block"], ...] = Field(
        description="fp8 scalings under which TP all-gathers (input forward, output gradient backward, "
        "with sequence parallelism) move the quantised tensor instead of the 16-bit one "
        "(traffic.FP8_TP_GATHER_BYTES_PER_ELEMENT)"
    )
    fp8_non_tn_gemms: bool = Field(
        description="The stack's fp8 GEMMs take non-TN operand layouts where the architecture has them "
        "(``hardware.NON_TN_FP8_ARCHITECTURES``), so a per-tensor or row-scaled tensor is not copied "
        "transposed for the backward GEMMs there (``compute.FP8_TRANSPOSE_BYTES_PER_ELEMENT``)"
    )
    fp8_primary_weights: bool = Field(
        description="Under fp8 with a sharded optimizer (ZeRO >= 1) the model's linear weights are fp8 tensors, "
        "the optimizer's fp32 master copy the only high-precision one, and the data-parallel all-gather moves "
        "them in fp8 (Megatron-Core --fp8-param-gather); else they stay 16-bit"
    )
    fp8_weight_cache: bool = Field(
        description="Where the linear weights stay 16-bit under fp8, the stack keeps their fp8 copies (and the "
        "copy its backward GEMMs take) across a step's micro-batches (Transformer Engine's weight workspaces, "
        "is_first_microbatch); else it casts them per use into transient buffers"
    )
    fp8_saves_quantized_inputs: bool = Field(
        description="Under fp8, a linear layer keeps its fp8 input (1 byte/element) for the weight gradient "
        "instead of the 16-bit one (Transformer Engine does; torchao's Float8Linear keeps the 16-bit input)"
    )
    fp8_scalings: tuple[Literal["tensor", "row", "block"], ...] = Field(
        description="The fp8 scalings the stack trains with (``JobSpec.fp8_scaling``): per tensor, per row "
        "(torchao's rowwise) or per block (MXFP8, or DeepSeek-V3's tiles where the GPU has no MXFP8); empty: "
        "the stack trains no fp8"
    )
    adam_moments: tuple[Literal["fp32", "bf16"], ...] = Field(
        min_length=1,
        description="Formats the stack's Adam keeps its two moments in (``JobSpec.optimizer_state_bytes_per_param``: "
        "12 or 8 bytes per parameter with the fp32 master, ``ADAM_STATE_BYTES_PER_PARAM``)",
    )
    dropout: bool = Field(description="The stack's models have dropout layers (``JobSpec.dropout``)")
    causal_model_flops: bool = Field(
        description="The stack's own MFU and model TFLOP/s logs count a causal layer's attention scores over "
        "the half of the s x s square its mask keeps (Megatron-LM since mid-2025: num_floating_point_operations "
        "'/ 2  # causal mask'); false: over the full square (PaLM appendix B, torchtitan, Composer/llm-foundry). "
        "The planner's MFU, HFU and model TFLOP/s follow it (``cost.flops.model_flops_per_token``), so they read "
        "as the stack's log would"
    )
    fp4_cast_bytes_per_element: PositiveFloat | None = Field(
        None,
        description="HBM bytes per element of a linear's input and output gradient that NVFP4 quantisation "
        "moves, forward and backward together (amax passes, the row-wise copy fprop and dgrad read, the "
        "Hadamard-transformed column-wise copy wgrad reads, their scales); None: the stack trains no fp4",
    )
    selective_recompute: Literal["attention", "alternate_matmuls"] = Field(
        description="What selective recompute runs again in backward: 'attention', the attention core (Megatron's "
        "--recompute-granularity selective, Korthikanti et al. 2022); 'alternate_matmuls', torchtitan's per-op "
        "SAC (every second matmul and every op outside its save list: norms, activations, TP all-gathers)"
    )
    overlap_grad_reduce: bool = Field(description="Gradient reduction (and ZeRO/FSDP gathers) overlap compute")
    amp_through_sharding: bool = Field(
        description="The stack trains in 16 bits (and fp8) only through its sharded data parallelism's mixed-precision "
        "policy: a mesh with TP or PP and neither sharded data parallelism (zero_stage 2 or 3 over dp > 1) nor "
        "CP would train in fp32, which the planner does not price, so it is refused (torchtitan's "
        "maybe_enable_amp)"
    )
    moe_tp_needs_sequence_parallel: bool = Field(
        description="A MoE layer trains under tensor parallelism only with sequence parallelism (Megatron-Core's "
        "MoELayer.forward raises 'performance may degrade if MoE and tensor parallelism are enabled without also "
        "enabling sequence parallelism'), so a MoE mesh with tp > 1 and no SP is refused",
    )
    activation_offloading: bool = Field(
        description="The stack can move the activations of some layers to host memory during forward and back "
        "for backward (Megatron-Core --cpu-offloading --cpu-offloading-num-layers: ``ParallelConfig.offload_layers``)"
    )
    per_module_recompute: bool = Field(
        description="Selective recompute takes a list of modules to run again (Megatron --recompute-modules: "
        "core_attn, layernorm, mla_up_proj, moe_act, mlp, moe, shared_experts); else only the stack's own "
        "selective policy"
    )
    p2p_overlap: bool = Field(
        description="Pipeline sends and receives of the steady state run asynchronously behind the next "
        "chunk's compute in the schedules that allow it (``ScheduleShape.async_sends``: Megatron's "
        "--overlap-p2p-communication, on by default and forced off without interleaving); else every send "
        "on the critical path waits"
    )
    pipeline_layouts: bool = Field(
        description="The framework runs any split of layers over pipeline chunks (a Megatron layout string, "
        "torchtitan's module lists): the plan balances the last rank's layers against its LM head and MTP "
        "layers; otherwise it runs the even split"
    )
    default_zero_stage: int = Field(ge=0, le=3, description="Sharding the stack runs when none is asked for")
    zero_with_pipeline: int = Field(
        ge=0,
        le=3,
        description="Highest ZeRO stage the stack runs together with pipeline parallelism (pp > 1): Megatron's "
        "distributed optimizer (1) but not Megatron-FSDP, DeepSpeed's pipeline engine below ZeRO-2, FSDP2 with "
        "torch's pipelining up to 3",
    )
    pipeline_holds_fsdp_state: bool = Field(
        description="Whether, with pp > 1, the stack's pipeline runtime keeps an FSDP (ZeRO-2/3) stage's weights "
        "gathered and its gradients unsharded (accumulated in the reduce dtype) from the first backward to the "
        "step's end and reduces them once per step: torch.distributed.pipelining runs every backward but the "
        "last without gradient sync or reshard after backward (stage.py backward_maybe_with_nosync, "
        "perform_reduce_grad). Such a stage holds ZeRO-1's state, gathers once per step at ZeRO-2 and once per "
        "micro-batch's backward at ZeRO-3 (``mesh.pipeline_holds_fsdp_state``)",
    )
    bf16_pipeline_min_zero: int = Field(
        ge=0,
        le=1,
        description="Lowest ZeRO stage the stack runs a bf16 pipeline (pp > 1) at: DeepSpeed's engine trains one "
        "without ZeRO through its BF16_Optimizer, which shards the optimizer over dp as ZeRO-1 does (1); 0 where "
        "a pipeline without ZeRO keeps the optimizer whole on every rank",
    )
    zero_stages: tuple[Literal[0, 1, 2, 3], ...] = Field(
        min_length=1,
        description="ZeRO stages the stack runs at all (0 plain data parallelism, 1 sharded optimizer states, 2 "
        "and gradients, 3 and weights): the search ranks no other, and a mesh asking another is refused",
    )
    sequence_parallel: bool = Field(
        True,
        description="The stack shards along the sequence what tensor parallelism leaves replicated (norms, dropout, "
        "residuals: Megatron's --sequence-parallel, torchtitan's SequenceParallel); the search turns it on with "
        "tp > 1 where the stack has it, and a mesh asking it of a stack without it is refused",
    )
    parallelisms: tuple[Literal["tp", "pp", "cp", "ep"], ...] = Field(
        description="Model-parallel axes the stack runs beside data parallelism (tensor, pipeline, ring "
        "context and expert parallelism); a mesh above 1 on another axis is refused"
    )
    interleaved_min_pp: int | None = Field(
        ge=2,
        description="Fewest pipeline stages with which the stack interleaves virtual stages (the interleaved "
        "1F1B schedule); None: it runs no interleaved schedule",
    )
    tp_module_plan: Literal["megatron-core", "torchtitan"] = Field(
        description="Where tensor parallelism gathers a sequence-parallel input, beyond attention's and the MLP's "
        "column-parallel linears: 'megatron-core', MLA's down-projections duplicated on the rank's sequence "
        "shard and their up-projections gathering it, shared experts column- and row-parallel with their own "
        "gathers (quantised where the scaling's are); 'torchtitan', the attention block's input gathered for "
        "every projection, MLA's down-projections replicated on it, and the MoE block's input gathered in 16-bit "
        "at its boundary"
    )
    interleaved_group_size: bool = Field(
        False,
        description="The stack's interleaved schedule takes a micro-batch group size per virtual stage "
        "(Megatron-Core's microbatch_group_size_per_vp_stage), so its micro-batches need only number at least "
        "pp (``schedules.microbatch_group_size``); otherwise a multiple of pp",
    )
    pipeline_schedules: tuple[Schedule, ...] | None = Field(
        None,
        description="Pipeline schedules the framework runs with pp > 1 (a mesh with another is refused, as "
        "its export would be); None: any the planner prices (a stack file that states none). Lists "
        "interleaved-1f1b exactly when interleaved_min_pp is set",
    )
    partial_recompute: PartialRecompute | None = Field(
        description="How full recompute may cover only r layers of each model chunk "
        "(``ParallelConfig.recompute_layers``): 'block', any r (Megatron --recompute-method block "
        "--recompute-num-layers r, the first r); 'every_nth', every n-th layer, so r = floor(c/n) of a "
        "chunk's c (torchtitan's selective layer checkpointing); None: full recompute covers every layer"
    )
    even_layer_split: bool = Field(
        description="The framework needs the layers to divide evenly over pp*virtual_stages model chunks; "
        "else it runs uneven splits (``pipeline_layouts`` says whether it takes the plan's)"
    )
    layer_overhead_us: NonNegativeFloat | None = Field(
        None,
        description="Fitted: GPU time per transformer layer and forward pass beyond its work, run eagerly: "
        "launch gaps between its kernels, the framework's per-layer hooks (FSDP's per-unit pre/post hooks "
        "and collective launches); torch.compile scales it by its kernel count; None: not calibrated, 0",
    )
    moe_layer_overhead_us: NonNegativeFloat | None = Field(
        None,
        description="Fitted: extra fixed time per MoE layer and forward pass beyond its GEMMs and all-to-alls: "
        "the router's top-k and softmax, sorting and permuting tokens to experts and back (the per-expert "
        "cost is ``expert_gemm_overhead_us``); None: not calibrated, 0",
    )
    grouped_gemm_streams: int | None = Field(
        ge=1,
        description="How many local experts' GEMMs of a MoE layer run at once, sharing the SMs (Transformer "
        "Engine's grouped linear: one cuBLAS GEMM per expert on its compute streams); None: one grouped kernel "
        "over all local experts",
    )
    sp_regathers_input: bool = Field(
        description="Under sequence parallelism the column-parallel linears keep only the rank's shard of "
        "their input and all-gather it again in backward for the weight gradient"
    )
    tp_dtensor: bool = Field(
        description="Tensor-parallel layers run as DTensor (torch.distributed.tensor.parallel), whose per-op "
        "dispatch costs CPU time (``tp_layer_overhead_us``); else plain tensors with explicit collectives"
    )
    tp_layer_overhead_us: NonNegativeFloat | None = Field(
        None,
        description="Fitted: extra fixed time per layer and forward pass when the layer is tensor-parallel "
        "(tp > 1), beyond its GEMMs and collectives: the framework's per-op work for sharded tensors (torchtitan's "
        "DTensor dispatch and redistribution); torch.compile scales it by its kernel count; None: not calibrated, 0",
    )
    expert_gemm_overhead_us: NonNegativeFloat | None = Field(
        None,
        description="Fitted: extra fixed time per local expert, MoE layer and forward pass: the stack's grouped "
        "linear runs one GEMM (and, under fp8, one quantisation) per local expert, each with its own launch "
        "and tail; None: not calibrated, 0",
    )
    dropless_host_expert_us: NonNegativeFloat | None = Field(
        None,
        description="Fitted: host (CPU) time per local expert of one MoE layer's forward under dropless routing: "
        "the Python and launch work of the grouped linear's per-expert GEMMs and quantisation. Dropless routing "
        "waits on the GPU once per MoE layer for the tokens each expert received, so what of it exceeds the "
        "layer's GPU time is exposed; None: not calibrated, 0",
    )
    attention_efficiency_scale: float | None = Field(
        None,
        ge=MIN_EFFICIENCY,  # a mistyped 1e-300 had priced an 8e300 s step; the fit keeps it within 0.3-1
        description="Fitted: the attention kernel's throughput inside this stack's training steps relative to the "
        "GPU's published figure for it; None: not calibrated, 1",
    )
    calibration: RunCalibration | None = None
    sources: dict[str, str]

    @model_validator(mode="after")
    def _sources(self) -> Stack:
        # every value a stack sets, booleans and choices too, names the code that decides it
        skip = {"name", "description", "sources", "calibration", "export_format"}
        check_sources(self, self.sources, skip=skip, required=set(type(self).model_fields) - skip)
        return self

    @model_validator(mode="after")
    def _within_ceilings(self) -> Stack:
        for name in type(self).model_fields:
            value = getattr(self, name)
            ceiling = next((c for suffix, c in STACK_CEILINGS.items() if name.endswith(suffix)), None)
            if ceiling is not None and isinstance(value, float) and value > ceiling:
                raise ValueError(f"{name} {value:g}: at most {ceiling:g}")
        return self

    @property
    def attention_scale(self) -> float:
        return self.attention_efficiency_scale or 1.0

    @model_validator(mode="after")
    def _compiled_loss_pairs(self) -> Stack:
        if (self.compiled_cross_entropy_bytes_per_logit is None) != (self.compiled_loss_bytes_per_logit is None):
            raise ValueError(
                "compiled_cross_entropy_bytes_per_logit and compiled_loss_bytes_per_logit: set both (the stack "
                "compiles its loss) or neither"
            )
        if (self.loss_parallel_cross_entropy_bytes_per_logit is None) != (
            self.loss_parallel_loss_bytes_per_logit is None
        ):
            raise ValueError(
                "loss_parallel_cross_entropy_bytes_per_logit and loss_parallel_loss_bytes_per_logit: set both (the "
                "stack runs DTensor's loss parallel under TP) or neither"
            )
        return self

    @model_validator(mode="after")
    def _interleaving_listed(self) -> Stack:
        schedules = self.pipeline_schedules
        if schedules is not None and ("interleaved-1f1b" in schedules) != (self.interleaved_min_pp is not None):
            raise ValueError(
                f"pipeline_schedules {list(schedules)}: list interleaved-1f1b exactly when interleaved_min_pp is set "
                f"(it is {self.interleaved_min_pp})"
            )
        return self

    @model_validator(mode="after")
    def _unasked_stage_runs(self) -> Stack:
        for pp in (1, 2):
            if self.unasked_zero_stage(pp) not in self.zero_stages:
                raise ValueError(
                    f"zero_stages {list(self.zero_stages)} must include the stage the stack runs unasked "
                    f"({self.unasked_zero_stage(pp)}, from default_zero_stage and zero_with_pipeline)"
                )
        return self

    def unasked_zero_stage(self, pp: int) -> int:
        """The ZeRO stage the stack runs where none is asked for, on a mesh of ``pp`` stages:
        ``default_zero_stage``, at most ``zero_with_pipeline`` with a pipeline."""
        return self.default_zero_stage if pp == 1 else min(self.default_zero_stage, self.zero_with_pipeline)

    @property
    def compiles_model(self) -> bool:
        """torch.compile changes what this stack's layers launch (``kernels_per_layer_compiled``
        below ``kernels_per_layer_eager``); where the two agree the stack compiles no model
        (Megatron-Core) or the planner has no compiled figure for it (DeepSpeed's opt-in compile)."""
        return self.kernels_per_layer_compiled < self.kernels_per_layer_eager

    @property
    def compiles_loss(self) -> bool:
        """torch.compile can cover this stack's loss (its compiled figures are set)."""
        return self.compiled_loss_bytes_per_logit is not None

    def cross_entropy_bytes(self, compiled: bool, tp: np.ndarray) -> np.ndarray | float:
        """HBM bytes per logit the loss moves, compiled or eager; eager under ``tp`` > 1, the
        loss-parallel figure where the stack has one. A compiled loss is taken at its compiled
        figure under TP too (no measurement of the compiled loss-parallel path was found)."""
        if compiled and self.compiled_cross_entropy_bytes_per_logit is not None:
            return self.compiled_cross_entropy_bytes_per_logit
        return self._loss_parallel(
            tp, self.loss_parallel_cross_entropy_bytes_per_logit, self.cross_entropy_bytes_per_logit
        )

    def loss_bytes(self, compiled: bool, tp: np.ndarray) -> np.ndarray | float:
        """Bytes per logit the loss holds at its peak, compiled or eager (as ``cross_entropy_bytes``)."""
        if compiled and self.compiled_loss_bytes_per_logit is not None:
            return self.compiled_loss_bytes_per_logit
        return self._loss_parallel(tp, self.loss_parallel_loss_bytes_per_logit, self.loss_bytes_per_logit)

    @staticmethod
    def _loss_parallel(tp: np.ndarray, parallel: float | None, plain: float) -> np.ndarray | float:
        """``parallel`` where ``tp`` > 1 (the mesh columns) and the stack has a loss-parallel
        figure, else ``plain``."""
        return plain if parallel is None else np.where(tp > 1, parallel, plain)

    @property
    def moe_layer_overhead_s(self) -> float:
        return (self.moe_layer_overhead_us or 0.0) * 1e-6

    @property
    def expert_gemm_overhead_s(self) -> float:
        return (self.expert_gemm_overhead_us or 0.0) * 1e-6

    @property
    def dropless_host_expert_s(self) -> float:
        return (self.dropless_host_expert_us or 0.0) * 1e-6

    def layer_overhead_s(self, compiled: bool, tensor_parallel: bool = False) -> float:
        """Per-layer overhead of one forward pass: the fitted eager figure (plus the tensor-parallel
        one where the layer is sharded), scaled by the kernels a compiled layer launches relative
        to an eager one (gaps go with launches)."""
        ratio = self.kernels_per_layer_compiled / self.kernels_per_layer_eager if compiled else 1.0
        extra = (self.tp_layer_overhead_us or 0.0) if tensor_parallel and self.tp_dtensor else 0.0
        return ((self.layer_overhead_us or 0.0) + extra) * 1e-6 * ratio
