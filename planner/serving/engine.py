"""Serving-engine profiles (engines/<name>.yaml): what vLLM, SGLang and TensorRT-LLM decide that
the layout does not (memory fraction, KV block size, token budget, attention-DP support, the
small all-reduce they run), each value with its source, and the parameters fitted per GPU
architecture by ``plan serve-calibrate`` with the rows used (mirrors ``schemas/stack.py``)."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt, model_validator

from planner.errors import PlannerError
from planner.schemas.base import Frozen
from planner.schemas.hardware import GPU, check_sources
from planner.schemas.model import SsmStateDtype

ENGINES = ("vllm", "sglang", "trtllm", "trtllm-tensorrt")
"""The engine profiles (engines/<name>.yaml): vLLM, SGLang, and TensorRT-LLM's two runtimes, the
PyTorch backend (``trtllm``, its default since 1.0) and the TensorRT-engine runtime
(``trtllm-tensorrt``), whose kernels and executors differ, so each has its own fit."""


class FittedParameters(Frozen):
    """Parameters of one engine on one GPU architecture, fitted to published rows
    (``planner.serving.calibrate``); defaults are what an uncalibrated engine assumes (1, 1, 0)."""

    decode_hbm_fraction: float = Field(
        1.0,
        gt=0,
        le=1.5,
        description="HBM bandwidth decode GEMMs reach reading weights (and the element-wise passes over the "
        "activations reach), vs the profile's STREAM rate",
    )
    kv_read_fraction: float = Field(
        1.0, gt=0, le=1.5, description="HBM bandwidth decode attention reaches reading the paged KV cache, vs STREAM"
    )
    compute_fraction: float = Field(
        1.0,
        gt=0,
        le=1.5,
        description="Weight GEMMs' (and decode attention's FLOP side) throughput in serving, as a fraction of the "
        "profile's GEMM figures; a prompt's attention runs at the profile's measured kernel figure",
    )
    expert_gemm_fraction: float = Field(
        1.0,
        gt=0,
        le=1.5,
        description=(
            "Routed-expert grouped GEMMs (many small GEMMs, one per expert) vs dense GEMMs of the same FLOPs and "
            "weight bytes: it divides both sides of their roofline, the compute and the weight reads (decode)"
        ),
    )
    tp_comm_fraction: float = Field(
        1.0,
        gt=0,
        le=1.5,
        description=(
            "Speed the TP all-reduces reach, vs the collective model's price (step.tp_all_reduce_s): "
            "the decode step's 4-25 MiB all-reduces, where Azure's nccl-tests on 8 H100 measured 0.61-0.76 "
            "of that price (ARCHITECTURE 9.7)"
        ),
    )
    block_overhead_us: NonNegativeFloat = Field(
        0.0,
        description=(
            "Fixed time per block (an attention, MLP, MoE or Mamba mixer with its norm and residual; a "
            "transformer layer has two) and engine iteration outside the priced kernels' work: launches and "
            "the gaps between a block's kernels, its small element-wise kernels (ARCHITECTURE 9.7)"
        ),
    )
    sequence_overhead_us: NonNegativeFloat = Field(
        0.0,
        description=(
            "Host time per running sequence per iteration (scheduling, sampling, detokenisation), on each "
            "scheduler: an engine that schedules every attention-DP rank apart pays it for the rank's sequences"
        ),
    )
    routed_copy_ns: NonNegativeFloat = Field(
        0.0,
        description=(
            "Time per routed token copy (a token x each of its top-k experts) a rank's MoE layer sorts, outside "
            "the expert GEMMs and the counted traffic: the sort of every copy into expert order and the expert "
            "maps, which the engines run over all the tokens a rank holds, its local experts' or not "
            "(step.routed_copies, ARCHITECTURE 9.7)"
        ),
    )
    request_path_ms: NonNegativeFloat = Field(
        0.0,
        description=(
            "Time a request's first token spends outside the engine's iterations when it is served through a "
            "server: the HTTP/gRPC request and the streamed response, the tokenizer and detokenizer (Triton's "
            "ensemble runs them as Python-backend models around the engine), the hand-off to the executor's "
            "queue. It adds to the TTFT a client measures, not to the engine's batch or throughput "
            "(``request_path_s``; fitted to the rows measured through a server, calibrate.fit_request_path)"
        ),
    )

    @property
    def request_path_s(self) -> float:
        """``request_path_ms`` in seconds: what a client's TTFT adds to the engine's first token."""
        return self.request_path_ms * 1e-3

    @classmethod
    def mean(cls, fits: list[FittedParameters]) -> FittedParameters:
        """The field-by-field mean of ``fits`` (defaults where there are none): what an architecture
        without rows of its own borrows from the fitted ones."""
        if not fits:
            return cls()
        return cls(**{f: sum(getattr(v, f) for v in fits) / len(fits) for f in cls.model_fields})


ModelFeature = Literal["mla", "hybrid_mamba", "attention_sinks", "chunked_attention"]
"""Model features an engine may build no model with (``EngineProfile.unbuilt_model_features``):
multi-head latent attention (DeepSeek-V2/V3), attention interleaved with Mamba-2 layers
(Nemotron-H), learned attention sinks (gpt-oss), chunked local attention (Llama 4); each is
read from the model by ``search.MODEL_FEATURES``."""

ErrorMetric = Literal["throughput", "ttft", "tpot"]
"""What a serving error bar is for: output tokens/s per GPU, time to first token, time per output token."""

THROUGHPUT_METRICS = ("output_tokens_per_s_per_gpu", "total_tokens_per_s_per_gpu")
"""The published throughput metrics of inference_runs.yaml (what the fit and its error bar read)."""


def error_metric(published: str) -> ErrorMetric:
    """The error bar a published metric of a runs row checks: 'throughput' for tokens/s per GPU,
    'ttft' for ``ttft_s``, 'tpot' for ``tpot_s``."""
    if published in THROUGHPUT_METRICS:
        return "throughput"
    if published == "ttft_s":
        return "ttft"
    if published == "tpot_s":
        return "tpot"
    raise ValueError(f"no error bar for the metric {published!r}")


class EngineCalibration(Frozen):
    """What the fit wrote: command, runs file, rows used per architecture, each held-out group's
    cross-validated MAPE, and the errors the error bars read (``cv_error_pct`` for throughput,
    ``latency_error_pct`` for TTFT and TPOT), keyed ``<architecture>`` for dense models and
    ``<architecture>+moe`` for MoE models."""

    command: str
    runs_file: str
    rows: dict[str, list[str]] = Field(default_factory=dict)
    request_path_rows: list[str] = Field(
        default_factory=list,
        description="The TTFT rows measured through this engine's server that ``request_path_ms`` was fitted to "
        "(one value for every architecture); empty: borrowed from the engines that have such rows "
        "(``calibrate.fit_request_path``)",
    )
    cv_mape_pct: dict[str, float] = Field(default_factory=dict)
    cv_error_pct: dict[str, list[float]] = Field(
        default_factory=dict,
        description="Per GPU architecture (``<architecture>+moe`` for MoE models): the cross-validated errors "
        "(percent, predicted vs published output tokens/s per GPU, each row priced by the fit without its group) of "
        "the throughput rows: the serving error bar",
    )
    latency_error_pct: dict[Literal["ttft", "tpot"], dict[str, list[float]]] = Field(
        default_factory=dict,
        description="Per latency (ttft, tpot) and GPU architecture (``+moe`` as above): the cross-validated errors "
        "(percent, predicted vs published, each row priced by the fit without its group) of the rows that publish "
        "it: their error bars. A TTFT's fitted part is the request path (``FittedParameters.request_path_ms``); no "
        "fit sees a TPOT",
    )


class SmallGpuDefaults(Frozen):
    """The batch limits an engine defaults to on a smaller GPU (vLLM's ``get_batch_defaults``)."""

    below_memory_gib: PositiveFloat = Field(description="GPUs with less memory than this take these defaults")
    names: list[str] = Field(
        default_factory=list,
        description="Lower-case substrings of a GPU's name that take them whatever its memory (vLLM: 'a100')",
    )
    max_num_batched_tokens: PositiveInt
    max_batch_size: PositiveInt


class EngineProfile(Frozen):
    """One serving engine and the defaults it runs with."""

    name: str
    description: str
    attention_dp: bool = Field(description="Runs attention data-parallel across the TP ranks (MoE models)")
    scheduler_per_attention_dp_rank: bool = Field(
        description="Under attention DP each rank schedules its own requests, with its own max batch and token "
        "budget (the replay then runs one rank at 1/tp of the replica's load); False: one scheduler for the "
        "replica, whose max batch is the replica's"
    )
    moe_token_exchange: Literal["all_gather", "all_to_all_over_mnnvl"] = Field(
        "all_gather",
        description="How an attention-DP group exchanges MoE tokens: 'all_gather', the group's tokens gathered "
        "to every rank and the experts' outputs reduce-scattered; 'all_to_all_over_mnnvl', all-to-alls where EP "
        "exceeds top-k over multi-node NVLink, else the all-gather (step.ep_exchange_s)",
    )
    lm_head_tp_under_attention_dp: bool = Field(
        description="Under attention DP, the LM head stays vocab-parallel over the group (each rank holds 1/tp of "
        "it); False: every rank holds it whole, as it holds the embedding"
    )
    chunked_prefill: bool = Field(description="Splits prompts into chunks mixed with decode by default")
    max_num_batched_tokens: PositiveInt = Field(description="Token budget of one iteration (prefill chunk)")
    max_batch_size: PositiveInt = Field(description="Most sequences one engine instance runs at once by default")
    small_gpu_defaults: SmallGpuDefaults | None = Field(
        None,
        description="Smaller batch limits the engine defaults to on smaller GPUs (``for_gpu``); None: the same "
        "everywhere",
    )
    fp8_context_attention: Literal["never", "fp8_kv", "fp8_kv_and_weights"] = Field(
        "never",
        description="When the prompt's (context-phase) attention runs an FP8 FMHA, its GEMMs on e4m3 Q, K and V "
        "(``GPU.attention_efficiency_at`` fp8): 'fp8_kv', over any fp8 KV cache; 'fp8_kv_and_weights', over an "
        "fp8 KV cache with fp8 or fp4 weights; 'never', 16-bit whatever the cache",
    )
    kv_block_tokens: PositiveInt = Field(description="Tokens per KV cache page: a sequence's KV is rounded up to it")
    kv_reservation: Literal["full", "on_demand"] = Field(
        description="'full': a request holds KV for prompt + all output from admission; 'on_demand': as generated"
    )
    chunked_kv: Literal["chunk", "full"] = Field(
        "full",
        description="KV a chunked-attention layer (Llama 4) keeps: 'chunk', at most one attention chunk; 'full', "
        "the whole context as a full-attention layer (an upper bound where the engine's behaviour is not sourced)",
    )
    mamba_state: Literal["shared_pages", "slots"] = Field(
        "slots",
        description="Where a hybrid model's Mamba-2 state lives: 'shared_pages', in the KV cache's block pool at one "
        "page size, the attention block grown to hold a Mamba state (vLLM v1); 'slots', one state per running "
        "sequence beside the paged KV cache",
    )
    mamba_ssm_dtype: SsmStateDtype = Field(
        "bf16", description="The Mamba-2 SSM state's format where neither the request nor the checkpoint states one"
    )
    expert_parallel: Literal["all_ranks", "divisor"] = Field(
        "divisor",
        description="Expert-parallel sizes a replica may run: 'all_ranks', EP over every rank of the replica or "
        "none (ep 1 or tp: vLLM's --enable-expert-parallel has no size of its own); 'divisor', any divisor of tp "
        "and of the experts, the other tp/ep ranks splitting each expert",
    )
    gpu_architectures: list[str] | None = Field(
        None, description="GPU architectures the engine runs on (the profiles' `architecture`); None: any"
    )
    format_architectures: dict[Literal["fp8", "fp4"], list[str]] | None = Field(
        None,
        description="Per weight or KV format below 16 bits, the GPU architectures the engine runs it on (a plan "
        "of it elsewhere is refused); a format not named, or None: every architecture, weight-only where the GPU "
        "has no tensor cores for it",
    )
    nvfp4_architectures: list[str] | None = Field(
        None,
        description="The GPU architectures the engine runs NVFP4 weights on (fp4 of a model whose checkpoint is not "
        "MXFP4, ``ModelSpec.checkpoint_fp4_format``; a plan of it elsewhere is refused); None: every architecture, "
        "weight-only where the GPU has no FP4 tensor cores",
    )
    gpu_memory_fraction: float = Field(gt=0, le=1)
    gpu_memory_fraction_by_tp: dict[PositiveInt, Annotated[float, Field(gt=0, le=1)]] | None = Field(
        None,
        description="The fraction at a TP size of at least each key, where the engine's default depends on it "
        "(SGLang's mem_fraction_static); below the smallest key, gpu_memory_fraction",
    )
    memory_fraction_of: Literal["total", "free", "static"] = Field(
        description="'total': the fraction bounds weights+activations+KV; 'free': KV gets it of what is left; "
        "'static': it bounds weights+KV of the memory free at start, the activations taking the rest"
    )
    runtime_reserve_gib: NonNegativeFloat = Field(description="CUDA graphs and runtime buffers beyond the profile's")
    custom_all_reduce: bool = Field(description="Has a one-shot NVLink all-reduce for small messages")
    custom_all_reduce_latency_us: PositiveFloat | None = None
    calibrated_like: str | None = Field(
        None,
        description="An engine whose fit stands in for this one where it has too few rows of its own; "
        "the source says why",
    )
    unbuilt_model_features: list[ModelFeature] | None = Field(
        None,
        description="Model features the engine builds no model with: a plan of such a model is refused by name; "
        "None: it builds every model the planner prices",
    )
    latency_errors_like: str | None = Field(
        None,
        description="An engine whose TTFT and TPOT errors stand in for this one's where none of its own rows "
        "publishes them (the band's basis says so); the source says why",
    )
    fitted: dict[str, FittedParameters] = Field(
        default_factory=dict, description="Per GPU architecture (hopper, blackwell, ...): fitted parameters"
    )
    calibration: EngineCalibration | None = None
    sources: dict[str, str]

    @model_validator(mode="after")
    def _sourced(self) -> EngineProfile:
        check_sources(
            self,
            self.sources,
            skip={"sources", "name", "description", "fitted", "calibration"},
            required={"calibrated_like", "latency_errors_like", "moe_token_exchange", "fp8_context_attention"},
        )
        if self.fitted and self.calibration is None:
            raise ValueError("fitted parameters need a calibration block naming the rows they were fitted on")
        return self

    def published_errors(self, metric: ErrorMetric, architecture: str, moe: bool = False) -> tuple[list[float], str]:
        """Errors (percent, predicted vs published) of this engine's runs that match a plan's
        ``metric`` on ``architecture`` for a dense or MoE model (``moe``), cross-validated (of a
        TTFT only the request path is fitted, of a TPOT nothing). The first of these with
        ``error_bar.MIN_INTERVAL_ROWS``: the architecture's runs of that kind, its runs of either
        kind, other architectures' runs of that kind, theirs of either kind. An engine with no fit
        of its own reads its ``calibrated_like`` engine's, whose parameters it runs with; one none of
        whose rows publishes a TTFT or TPOT reads its ``latency_errors_like`` engine's for them, and
        says so once, with each reason along the way. Returns (errors, what they are); none where too
        few rows match."""
        errors, basis, reasons = self._own_errors(metric, architecture, moe)
        if errors and reasons:
            return errors, f"{basis} standing in for {self.name}'s ({', and '.join(reasons)})"
        return errors, basis

    def _own_errors(self, metric: ErrorMetric, architecture: str, moe: bool) -> tuple[list[float], str, list[str]]:
        """``published_errors`` of the engine whose rows stand in, and why each engine on the way
        reads another's: (errors, their basis, reasons from this engine on)."""
        from planner.error_bar import MIN_INTERVAL_ROWS, split_key

        if not self.fitted and self.calibrated_like:
            errors, basis, reasons = load_engine(self.calibrated_like)._own_errors(metric, architecture, moe)
            return errors, basis, [f"a floor: {self.name} has no fit of its own", *reasons]
        cal = self.calibration
        by_key = (cal.cv_error_pct if metric == "throughput" else cal.latency_error_pct.get(metric, {})) if cal else {}
        if metric != "throughput" and not by_key and self.latency_errors_like:
            errors, basis, reasons = load_engine(self.latency_errors_like)._own_errors(metric, architecture, moe)
            return errors, basis, [f"no {self.name} row publishes {metric.upper()}", *reasons]
        runs = f"cross-validated {self.name} runs" if metric == "throughput" else f"{self.name} {metric.upper()} runs"
        kind = "MoE" if moe else "dense"

        def of(only_here: bool, same_kind: bool) -> dict[str, list[float]]:
            return {
                key: errs
                for key, errs in by_key.items()
                if (not only_here or split_key(key)[0] == architecture) and (not same_kind or split_key(key)[1] == moe)
            }

        for only_here in (True, False):
            for same_kind, what in ((True, f" of {kind} models"), (False, "")):
                matched = of(only_here, same_kind)
                errors = [e for errs in matched.values() for e in errs]
                if len(errors) < MIN_INTERVAL_ROWS:
                    continue
                if only_here:
                    return errors, f"{len(errors)} {runs}{what} on {architecture}", []
                counts: dict[str, int] = {}
                for key, errs in matched.items():
                    counts[split_key(key)[0]] = counts.get(split_key(key)[0], 0) + len(errs)
                counts.setdefault(architecture, 0)
                where = ", ".join(f"{arch} {n}" for arch, n in sorted(counts.items(), key=lambda kv: -kv[1]))
                return errors, f"{len(errors)} {runs}{what} on every GPU architecture ({where})", []
        return [], f"no {runs}", []

    def memory_fraction(self, tp: np.ndarray) -> np.ndarray:
        """The fraction of memory (``memory_fraction_of``) the engine takes at each of ``tp``: its
        ``gpu_memory_fraction``, or where ``gpu_memory_fraction_by_tp`` says so, the value of the
        largest key at most tp."""
        tp = np.asarray(tp, dtype=float)
        out = np.full(tp.shape, self.gpu_memory_fraction)
        for least, fraction in sorted((self.gpu_memory_fraction_by_tp or {}).items()):
            out = np.where(tp >= least, fraction, out)
        return out

    def for_gpu(self, gpu: GPU) -> EngineProfile:
        """This engine as it starts on ``gpu``: its ``small_gpu_defaults`` where the GPU has less memory
        than their bound or a name they list (vLLM caps an A100 80GB at 256 sequences and 2,048 tokens an
        iteration, where an H100 gets 1,024 and 8,192)."""
        small = self.small_gpu_defaults
        name = gpu.name.lower()
        if small is None or (
            gpu.hbm_capacity_gib >= small.below_memory_gib and not any(n in name for n in small.names)
        ):
            return self
        return self.model_copy(
            update={"max_batch_size": small.max_batch_size, "max_num_batched_tokens": small.max_num_batched_tokens}
        )

    def parameters(self, architecture: str | None) -> FittedParameters:
        """Fitted parameters for the architecture; the mean of the fitted ones elsewhere (an
        architecture without rows borrows the others', and says so in warnings); an engine with no
        fit of its own uses its ``calibrated_like`` engine's; else defaults."""
        if architecture in self.fitted:
            return self.fitted[architecture]  # type: ignore[index]
        if not self.fitted and self.calibrated_like:
            return load_engine(self.calibrated_like).parameters(architecture)
        return FittedParameters.mean(list((self.fitted or {}).values()))


def engines_dir() -> Path:
    from planner.catalog import catalog_dir

    return catalog_dir("engines")


@cache
def load_engine(name: str) -> EngineProfile:
    """An engine profile by name (``ENGINES``)."""
    from planner.catalog import read_yaml
    from planner.errors import validate_as

    key = str(name).lower()
    if key not in ENGINES:
        raise PlannerError(f"engine: unknown engine '{name}'; allowed: {', '.join(ENGINES)}")
    path = engines_dir() / f"{key}.yaml"
    return validate_as(EngineProfile, read_yaml(path), str(path))
