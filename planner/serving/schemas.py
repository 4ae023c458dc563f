"""What ``plan serve`` takes (``ServeRequest``) and answers (``ServeRanking`` of
``ServeCandidate``). Lengths in tokens, latencies in seconds, memory in bytes, throughput in
tokens/s; the CLI converts ms and GiB at the edge."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt, model_validator

from planner.schemas.base import Frozen
from planner.schemas.model import SsmStateDtype
from planner.serving.engine import ErrorMetric

WeightsDtype = Literal["bf16", "fp8", "fp4"]
KvDtype = Literal["bf16", "fp8"]
EngineName = Literal["vllm", "sglang", "trtllm", "trtllm-tensorrt"]
"""``engine.ENGINES`` as a type (a test holds them equal)."""


MIN_REQUEST_RATE = 1e-3
"""The least offered load ``plan serve`` prices, requests/s (one request in 17 minutes): below it
an engine idles, and 1e-300 requests/s had printed a table of hundreds of zeros and $4e301 per
million tokens. A judgement."""

MAX_CONCURRENCY = 2**24
"""The most requests in flight a plan may ask for (16,777,216: thousands of times the largest
batch an engine runs, which vLLM caps at max_num_seqs, 256-1,024 by default): a bound against
typos, not a measurement; 2**63 - 1 had been replayed into a TTFT of 1.4e20 ms."""


class ServeRequest(Frozen):
    """A serving question: the workload, the latency targets, the load and the formats."""

    input_len: PositiveInt = Field(2048, description="Prompt tokens per request")
    output_len: PositiveInt = Field(512, description="Generated tokens per request")
    ttft_s: PositiveFloat | None = Field(None, description="Target time to first token")
    tpot_s: PositiveFloat | None = Field(None, description="Target time per output token")
    request_rate: float | None = Field(
        None, ge=MIN_REQUEST_RATE, description="Offered load, requests/s over the cluster"
    )
    concurrency: int | None = Field(None, ge=1, le=MAX_CONCURRENCY, description="Requests in flight over the cluster")
    weights_dtype: WeightsDtype | None = Field(
        None,
        description="Weight format; None: the checkpoint's (ModelSpec.checkpoint_weights_dtype: fp8 DeepSeek-V3, "
        "fp4 gpt-oss), else bf16 (``serving.search.resolve_request``)",
    )
    kv_dtype: KvDtype = "bf16"
    mamba_ssm_dtype: SsmStateDtype | None = Field(
        None,
        description="A hybrid model's Mamba-2 SSM state format (vLLM --mamba-ssm-cache-dtype); None: the "
        "checkpoint's, else the engine's default",
    )
    engine: EngineName = "vllm"
    disaggregate: bool = False
    tp: PositiveInt | None = Field(None, description="Pin tensor parallelism")
    pp: PositiveInt | None = Field(None, description="Pin pipeline parallelism")
    ep: PositiveInt | None = Field(None, description="Pin expert parallelism")
    attention_dp: bool | None = Field(None, description="Pin attention data parallelism")
    top: PositiveInt = 10
    targets_at_band_end: bool = Field(
        False,
        description="Meet the TTFT/TPOT targets at the slow end of each candidate's band (where 90% of the published "
        "runs priced alike came in faster), not at the prediction: the search runs at the targets scaled by the "
        "band's near-side factor (ServeRanking.searched_targets_s)",
    )

    @model_validator(mode="after")
    def _one_load(self) -> ServeRequest:
        if self.request_rate is not None and self.concurrency is not None:
            raise ValueError("give request_rate or concurrency, not both")
        if self.input_len > 2**24 or self.output_len > 2**24:
            raise ValueError("input_len and output_len must be at most 16,777,216 tokens")
        return self


class MemoryBreakdown(Frozen):
    weights: float
    kv_cache: float
    activations: float
    runtime: float


class ServeCandidate(Frozen):
    """One ranked layout at the batch it runs."""

    config: dict[str, int | bool | dict[str, int | bool] | None] = Field(
        description="The layout: tp, pp, ep, attention_dp and replicas (the cluster's GPUs are replicas x tp x pp), "
        "and a disaggregated plan's prefill_decode_split"
    )
    batch_per_replica: float = Field(
        description="Sequences one replica runs at once, as priced (a replay's mean over its measured requests, so "
        "not always whole)"
    )
    ttft_s: float = Field(description="Time to first token, seconds (the request path through the server included)")
    tpot_s: float | None = Field(
        description="Mean time per output token after the first; None where a request has one output token"
    )
    output_tokens_per_s_per_gpu: float = Field(
        description="Output tokens per second over the whole cluster, per GPU (at a stated request rate, the "
        "offered load)"
    )
    output_tokens_per_s_per_gpu_interval: tuple[float, float] | None = Field(
        None,
        description="The central 80% of what published serving runs measured where the planner predicted this "
        "throughput (their cross-validated errors, ServeRanking.interval_basis); None at a stated request rate, "
        "where the throughput is the offered load, not a prediction",
    )
    ttft_s_interval: tuple[float, float] | None = Field(
        None,
        description="The central 80% of what published runs measured where the planner predicted this TTFT (the "
        "cross-validated errors of TensorRT-LLM's batch-1 and online-serving rows); None without enough rows",
    )
    tpot_s_interval: tuple[float, float] | None = Field(
        None,
        description="The central 80% of what published runs measured where the planner predicted this TPOT (as "
        "the TTFT's); None without enough rows or without a TPOT (one output token)",
    )
    output_tokens_per_s_per_user: float = Field(
        description="One user's decode rate, 1 / TPOT (with one output token, 1 / TTFT)"
    )
    max_concurrency: int = Field(
        description="Sequences the whole cluster's KV cache holds at once (every replica's), each at the context the "
        "engine reserves for a running sequence (serving.memory.reserved_context: prompt + all the output where it "
        "reserves at admission, prompt + half where it allocates as tokens come)"
    )
    memory_per_gpu_bytes: float = Field(description="Peak memory of one GPU (the memory_breakdown_bytes summed)")
    memory_breakdown_bytes: MemoryBreakdown = Field(description="One GPU's memory by kind")
    kv_cache_bytes_per_token: float = Field(
        description="KV cache bytes one token of context holds over the whole model (every layer, all GPUs of a "
        "replica together) in the KV format, averaged over a sequence of the request's length"
    )
    tpot_breakdown_s: dict[str, float] = Field(
        description="The steady-state round's seconds by term (GEMMs, attention, communication, overheads): "
        "they sum to steady_state_tpot_s where the candidate was replayed (the replay's iterations are priced "
        "whole, not by term), else to tpot_s"
    )
    cost_per_million_output_tokens_usd: float | None = Field(
        None,
        description="USD per million output tokens at the ranking's price_per_gpu_hour_usd (None without a price)",
    )
    meets_targets: bool = Field(description="Whether TTFT and TPOT meet the request's targets (true without targets)")
    replayed: bool = Field(
        False,
        description="TTFT, TPOT and batch are a replay of the offered load (serving.replay: Poisson arrivals at a "
        "request rate, a closed loop at a concurrency; without a load, a closed loop at the largest batch whose "
        "replay meets the targets (without targets, the largest that fits), or at the batch the engine ran where "
        "its token budget queued the rest; the middle half of the requests measured; a disaggregated plan at a "
        "request rate, each pool apart: serving.disagg.replayed_split); else the steady-state round's (a "
        "disaggregated plan without a load or at a concurrency)",
    )
    sustains_rate: bool | None = Field(
        None,
        description="Where replayed: whether the replica (a disaggregated plan: each pool's) keeps up with its "
        "share of the rate (its admission "
        "queue does not grow over the measured requests, serving.search.QUEUE_GROWTH_TOLERANCE); a layout that "
        "does not never meets the targets",
    )
    replicas_for_rate: PositiveInt | None = Field(
        None,
        description="At a request rate: the fewest replicas of this layout that keep up with it at the steady state "
        "(Little's law at the layout's best batch: serving.search.replicas_for_rate); the replay may need more",
    )
    steady_state_ttft_s: float | None = Field(
        None,
        description="Where replayed: the steady-state round's TTFT (a disaggregated split's: its prefill round, "
        "the prefill replica's M/D/1 queue wait, serving.disagg.queue_wait_s, the KV's move and the server's path)",
    )
    steady_state_tpot_s: float | None = Field(None, description="Where replayed: the steady-state round's TPOT")
    equivalent_layouts: list[str] = Field(
        default_factory=list,
        description="Other layouts priced exactly the same (e.g. EP without attention DP, which the model does not "
        "tell from expert TP): shown once, these listed",
    )
    why: str = Field("", description="The first candidate's: why it ranks first, against the others; empty for them")
    warnings: list[str] = Field(default_factory=list, description="What the numbers leave out, for this layout")


class ServeRanking(Frozen):
    model: str
    cluster: str
    engine: str
    num_gpus: int
    request: ServeRequest
    candidates: list[ServeCandidate]
    considered: int
    feasible: int
    unreplayed: int = Field(
        0,
        description="Without a load: layouts not replayed, since a bound on their throughput (their largest "
        "batch searched, over a round of decode tokens alone) is below the top-th found meeting the targets; "
        "a disaggregated plan at a request rate: decode layouts not replayed, since their TPOT (at least "
        "serving.disagg.REPLAYED_TPOT_FLOOR of the steady round's) cannot reach the top; whether they meet the "
        "targets is not known, so feasible counts the replayed ones",
    )
    reason: str = Field("", description="Why the ranking is empty, when it is")
    searched_targets_s: dict[ErrorMetric, float] = Field(
        default_factory=dict,
        description="With targets_at_band_end: the TTFT/TPOT targets (seconds) the search ran at, each the asked "
        "target times 1 + the 10th percentile error of its band's runs",
    )
    interval_basis: dict[ErrorMetric, str] = Field(
        default_factory=dict,
        description="Per interval (throughput, ttft, tpot): the published runs the candidates' intervals are read from",
    )
    mamba_ssm_dtype: SsmStateDtype | None = Field(
        None, description="A hybrid model's Mamba-2 SSM state format, as priced (None without Mamba layers)"
    )
    token_budget: PositiveInt | None = Field(
        None,
        description="The engine's tokens per iteration as priced: its default on the cluster's GPU "
        "(``EngineProfile.for_gpu``), which the exported launch command states",
    )
    price_per_gpu_hour_usd: PositiveFloat | None = Field(
        None,
        description="USD per GPU-hour the candidates' cost_per_million_output_tokens_usd is at: --price, else the "
        "profile's (None: no price)",
    )
    gpus_per_host: PositiveInt | None = Field(
        None,
        description="GPUs one host drives (ClusterSpec.gpus_per_host: the node, or an NVL72 rack's compute tray): "
        "a replica wider than one host is launched on each of its hosts (--export)",
    )
    request_path_s: NonNegativeFloat = Field(
        0.0,
        description="What every candidate's TTFT holds beside the engine's first token: a request's path through "
        "the engine's server (HTTP/gRPC, tokenizer, detokenizer, queue hand-off; ``FittedParameters.request_path_ms``, "
        "fitted to the rows measured through a server)",
    )
    warnings: list[str] = Field(default_factory=list)
