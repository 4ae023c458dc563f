"""One transformer layer's shard, forward and backward, as a replayable term priced with the step's
own compute model (torch-free: ``planner.validate.layer`` runs it).

The prediction is ``planner.cost.step.training_s`` of ``planner.cost.compute.layer_forward_s``
(GEMMs, attention core, element-wise traffic) for one layer of the plan's worst stage and one
micro-batch: the same functions that price a step, on the replay's hardware profile. One term per
layer kind the stage holds (dense, MoE), called m x (layers of that kind) times per step. The
layer's GEMMs stay in the report as their own terms but leave the replay time per step, which
counts the layer instead (``TermSpec.in_step_sum``).

On GPU the shard runs in the job's 16-bit format (fp8 as bf16), as priced. On CPU it runs fp32
(no 16-bit matmul units), priced at the profile's fp32 rate for the GEMMs and the attention core
alike (``pricing_cluster``); its element-wise traffic is still counted at the 16-bit sizes the
model assumes, so the CPU prediction undercounts that part, a small share of a layer (the CPU
replay exists to exercise the code path and its tests, not to calibrate a GPU).
"""

from __future__ import annotations

from planner.cost.compute import (
    attention_core_forward_s,
    layer_forward_s,
    selective_recompute_forward_s,
    unfused_softmax_forward_s,
)
from planner.cost.pipeline import num_microbatches, with_recompute_every
from planner.cost.recompute import is_default
from planner.cost.step import slowest_rank, training_s
from planner.errors import PlannerError
from planner.mesh import MeshArrays
from planner.schemas.hardware import ClusterSpec
from planner.schemas.job import JobSpec
from planner.schemas.model import ModelSpec
from planner.schemas.parallel import ParallelConfig
from planner.validate.gemms import replay_dtype, self_term, stage_layer_kinds
from planner.validate.schemas import LayerShard, TermSpec

GPU_FORMATS = ("bf16", "fp16")
"""The formats the compute model prices attention (always bf16) and the GEMMs (the job's) in."""


def pricing_cluster(cluster: ClusterSpec, dtype: str) -> ClusterSpec:
    """``cluster`` as the compute model should see it for a replay in ``dtype``: at burst clocks
    (a replay runs for seconds, like the benchmarks the profile's efficiencies come from, not
    for hours at the power cap: no ``sustained_tensor_fraction``); for fp32 (CPU), every 16-bit
    peak set to the fp32 rate, since the model prices the matmuls in 16-bit and the replay runs
    them in fp32."""
    burst = with_gpu(cluster, sustained_tensor_fraction=None)
    if dtype in GPU_FORMATS:
        return burst
    gpu = cluster.gpu
    peaks = dict(gpu.peak_tflops) | {f: gpu.peak_tflops[dtype] for f in GPU_FORMATS}  # type: ignore[index]
    return with_gpu(burst, peak_tflops=peaks)


def with_gpu(cluster: ClusterSpec, **gpu_fields: object) -> ClusterSpec:
    """``cluster`` with some of its GPU's fields replaced (no validation: calibration may try an
    efficiency above 1 on its way to the fit)."""
    gpu = cluster.gpu.model_copy(update=gpu_fields)
    return cluster.model_copy(update={"profile": cluster.profile.model_copy(update={"gpu": gpu})})


def predict_layer_s(shard: LayerShard, cluster: ClusterSpec, dtype: str) -> float:
    """Predicted seconds of one forward + backward (+ recompute) of ``shard`` on ``cluster``'s GPU
    in ``dtype`` (module docstring)."""
    mesh = MeshArrays.from_configs([shard.plan])
    priced = pricing_cluster(cluster, dtype)
    # the replay runs the local experts' GEMMs one after another (planner.validate.layer), not on
    # the stack's concurrent streams: priced the same way
    serial = shard.job.software.model_copy(update={"grouped_gemm_streams": 1})
    job = shard.job.model_copy(update={"dtype": dtype if dtype in GPU_FORMATS else "bf16", "stack": serial})
    forward = layer_forward_s(shard.model, priced, job, mesh, shard.moe)
    softmax = unfused_softmax_forward_s(shard.model, priced, job, mesh)
    core = attention_core_forward_s(shard.model, priced, job, mesh) + softmax
    recomputed = attention_core_forward_s(shard.model, priced, job, mesh, recompute=True) + softmax
    selective = selective_recompute_forward_s(shard.model, priced, job, mesh, shard.moe)
    return float(training_s(forward, core, recomputed, mesh, 1, selective)[0])


def layer_terms(
    model: ModelSpec, job: JobSpec, plan: ParallelConfig, replay_cluster: ClusterSpec, on_gpu: bool
) -> list[TermSpec]:
    """One term per layer kind on the plan's worst stage (module docstring)."""
    if plan.recompute == "selective" and not is_default(job):
        raise PlannerError(
            f"recompute_modules {', '.join(job.recompute_modules or ())}: the layer replay recomputes the attention "
            "core only (core_attn); the others are priced, not replayed: validate without --recompute-modules"
        )
    m = float(num_microbatches(job.batch_size, MeshArrays.from_configs([plan]))[0])
    dtype = replay_dtype(job, on_gpu)
    terms = []
    rank = slowest_rank(model, replay_cluster, job, plan)
    split = recompute_split(model, job, plan, rank.layers)
    for is_moe, count in stage_layer_kinds(model, rank):
        for suffix, shard_plan, share in split:
            shard = LayerShard(model=model, job=job, plan=shard_plan, moe=is_moe)
            predicted = predict_layer_s(shard, replay_cluster, dtype)
            name = f"layer.{'moe' if is_moe else 'dense'}{suffix}"
            terms.append(self_term(name, "layer", dtype, m * count * share, predicted, layer=shard))
    return terms


def recompute_split(
    model: ModelSpec, job: JobSpec, plan: ParallelConfig, layers: int
) -> list[tuple[str, ParallelConfig, float]]:
    """A plan that fully recomputes only some layers (``recompute_layers``) replays two shards, one
    recomputed and one not, each for its share of the ``layers`` of the rank the step waits for
    (the stack's every-n-th stride where it has one, ``pipeline.with_recompute_every``); any
    other plan one shard."""
    if plan.recompute_layers is None:
        return [("", plan, 1.0)]
    pm = with_recompute_every(model, job, MeshArrays.from_configs([plan]))
    share = float(pm.recomputed_share(layers)[0])
    recomputed = plan.model_copy(update={"recompute_layers": None})
    kept = plan.model_copy(update={"recompute": "none", "recompute_layers": None})
    return [(".recomputed", recomputed, share), ("", kept, 1.0 - share)]


def counted_once(terms: list[TermSpec]) -> list[TermSpec]:
    """``terms`` with the layer GEMMs taken out of the replay time per step when a layer shard
    term (which contains them) is there; the LM head, outside every layer, stays counted."""
    if not any(t.op == "layer" for t in terms):
        return terms
    return [
        t.model_copy(update={"in_step_sum": False}) if t.op == "gemm" and t.name != "gemm.lm_head" else t for t in terms
    ]
