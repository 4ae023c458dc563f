"""Selective recompute by module, as Megatron-Core runs it (``--recompute-granularity selective
--recompute-modules``), declared once: for each module, the activations it frees and the forward
work it runs again in backward. Memory (``cost.memory``), time (``cost.compute``), hardware FLOPs
(``cost.flops``) and the expert-parallel all-to-alls (``cost.traffic``) read this table.

Source: Megatron-Core TransformerConfig.recompute_modules (megatron/core/transformer/
transformer_config.py): "core_attn": recompute the core attention part of the transformer layer;
"moe_act": the MoE MLP activation function; "layernorm": the input_layernorm and
pre_mlp_layernorm; "mla_up_proj": the MLA up projection and RoPE applying parts; "mlp": the
dense MLP submodule; "moe": the MoE layer; "shared_experts": the shared experts in the MoE layer.
"moe_act", "layernorm" and "mla_up_proj" use output-discarding checkpointing (the output is freed
once its consumer has run, and recomputed before that consumer's backward); the others checkpoint
the whole submodule, keeping only its input. Default ["core_attn"].

Activation parts (``memory.ActivationParts``) a module frees:
  core_attn       the attention core's saved state (scores and masks without flash attention)
  layernorm       the two norms' outputs (the inputs of the QKV and first MLP linears)
  mla_up_proj     MLA's up-projected Q, K and V and the normalised latents the up-projections read
                  (the latents before their norms, which the checkpoint keeps, and the rope key stay)
  moe_act         the routed experts' activation output (the second expert linear's input), and the
                  clamped copy of its input a clamp outside the fused activation makes
  mlp             a dense layer's MLP activations (its input, the norm output, stays)
  moe             everything of the MoE layer but its input: the router's scores, routed inputs,
                  activations, the shared experts
  shared_experts  the shared experts' activations
A module that does not apply to a layer (mla_up_proj without MLA, the MoE ones in a dense layer,
mlp in a MoE layer) frees nothing there and runs nothing again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

from planner.schemas.job import JobSpec, RecomputeModule
from planner.schemas.model import ModelSpec

MODULE_NAMES: tuple[str, ...] = get_args(RecomputeModule)

DEFAULT_MODULES: tuple[str, ...] = ("core_attn",)
"""Megatron-Core's default recompute_modules (TransformerConfig: default ["core_attn"]); the
planner's 'selective' recompute before modules were a knob (Korthikanti et al. 2022)."""


@dataclass(frozen=True)
class Module:
    """What one recompute module frees (``memory.ActivationParts`` fields) and runs again:
    ``gemms`` by ``compute.layer_gemms`` name, the attention ``core``, element-wise ``ops`` by
    ``compute.LayerForward.elementwise`` part, and the MoE ``dispatch`` (its all-to-alls)."""

    frees: tuple[str, ...]
    gemms: tuple[str, ...] = ()
    core: bool = False
    ops: tuple[str, ...] = ()
    dispatch: bool = False
    needs: str | None = None  # the model feature without which it has nothing to recompute


MODULES: dict[str, Module] = {
    "core_attn": Module(frees=("core",), core=True),
    "layernorm": Module(frees=("norm_outputs",), ops=("norms",)),
    "mla_up_proj": Module(frees=("qkv", "mla_normed"), gemms=("attn.q_b", "attn.kv_b"), ops=("rope",), needs="mla"),
    "moe_act": Module(frees=("routed_product", "routed_clamped"), ops=("routed_activation",), needs="moe"),
    "mlp": Module(frees=("dense_mlp",), gemms=("mlp.in", "mlp.out"), ops=("dense_activation",), needs="dense"),
    "moe": Module(
        frees=("router", "routed_input", "routed_activation", "routed_product", "routed_clamped", "shared", "latent"),
        gemms=(
            "moe.router",
            "moe.latent_down",
            "moe.expert_in",
            "moe.expert_out",
            "moe.latent_up",
            "moe.shared_in",
            "moe.shared_out",
        ),
        ops=("routed_activation", "shared_activation", "permute", "expert_bias"),
        dispatch=True,
        needs="moe",
    ),
    "shared_experts": Module(
        frees=("shared",), gemms=("moe.shared_in", "moe.shared_out"), ops=("shared_activation",), needs="shared"
    ),
}
"""Declared once; ``MODULE_NAMES`` (the schema's Literal) and this table must list the same
modules (tests check)."""


CHEAP_MODULES: tuple[str, ...] = ("core_attn", "mla_up_proj", "moe_act", "layernorm")
"""The attention core and the output-discarding modules (Megatron: moe_act, layernorm and
mla_up_proj discard their outputs and run little again): what a mesh that does not fit is told
to try first (``pricing.module_recompute_hint``), of those the model has."""


def applicable(model: ModelSpec, names: tuple[str, ...]) -> tuple[str, ...]:
    """``names`` less the modules that find nothing to recompute in ``model``."""
    return tuple(n for n in names if MODULES[n].needs is None or has(model, MODULES[n].needs))


def cheap_set_to_try(model: ModelSpec, job: JobSpec) -> tuple[str, ...] | None:
    """The cheap modules the model has (``CHEAP_MODULES``), where the job names no modules, its
    stack takes a list (``Stack.per_module_recompute``) and they differ from the default: what the
    search tries beside the default for selective meshes and what a mesh that does not fit is told
    to try; None where there is nothing to try."""
    if job.recompute_modules is not None or not job.software.per_module_recompute:
        return None
    cheap = applicable(model, CHEAP_MODULES)
    return None if cheap == DEFAULT_MODULES else cheap


def is_default(job: JobSpec) -> bool:
    """Whether selective recompute under ``job`` runs Megatron's default modules."""
    return selected(job) == DEFAULT_MODULES


def selected(job: JobSpec) -> tuple[str, ...]:
    """The modules a selective-recompute mesh of ``job`` runs again: the job's, else the default."""
    return job.recompute_modules or DEFAULT_MODULES


def freed_parts(job: JobSpec) -> set[str]:
    """Activation parts selective recompute frees under ``job``."""
    return {part for name in selected(job) for part in MODULES[name].frees}


def recomputed_gemms(job: JobSpec) -> set[str]:
    return {g for name in selected(job) for g in MODULES[name].gemms}


def recomputed_ops(job: JobSpec) -> set[str]:
    return {op for name in selected(job) for op in MODULES[name].ops}


def recomputes_core(job: JobSpec) -> bool:
    return any(MODULES[name].core for name in selected(job))


def recomputes_dispatch(job: JobSpec) -> bool:
    return any(MODULES[name].dispatch for name in selected(job))


def has(model: ModelSpec, feature: str) -> bool:
    """Whether ``model`` has what a module recomputes: MLA, MoE layers, shared experts, dense MLPs."""
    return {
        "mla": model.is_mla,
        "moe": model.is_moe,
        "shared": model.is_moe and model.shared_expert_width > 0,
        "dense": model.num_dense_layers > 0,
    }[feature]


def inapplicable(model: ModelSpec, job: JobSpec) -> list[str]:
    """The job's recompute modules that find nothing to recompute in ``model``, each with why."""
    what = {"mla": "MLA attention", "moe": "MoE layers", "shared": "shared experts", "dense": "dense MLP layers"}
    names = job.recompute_modules or ()
    kept = applicable(model, names)
    return [f"{name} (needs {what[MODULES[name].needs]})" for name in names if name not in kept]  # type: ignore[index]
