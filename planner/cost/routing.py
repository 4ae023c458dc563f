"""How MoE tokens spread over the expert-parallel ranks: the busiest rank's share.

A MoE layer waits for its busiest expert-parallel rank: the all-to-all for the rank receiving the
most routed tokens, the expert GEMMs for the rank holding the most. Token drop padded to capacity
(Megatron --moe-expert-capacity-factor c --moe-pad-expert-input-to-capacity) gives every expert
exactly c times its even share, whatever the router does; dropless routing gives the busiest rank
the job's load imbalance times the mean, and a rank that holds every expert (ep = 1) the mean.
"""

from __future__ import annotations

import numpy as np

from planner.mesh import MeshArrays
from planner.schemas.job import JobSpec
from planner.schemas.model import ModelSpec


def most_imbalance(model: ModelSpec, ep: np.ndarray) -> np.ndarray:
    """The most routed tokens the busiest of ``ep`` ranks can get over the mean under dropless
    routing: a token's top-k experts are distinct, so a rank holding E / ep of them takes at most
    min(E / ep, k) of its k copies, ep x min(E / ep, k) / k times its even share (Mixtral at ep 8:
    one expert a rank, top-2, at most 4). A review (2026-12-07) priced --moe-routing imbalance:1024
    on that mesh at 20,537 s a step."""
    k = float(model.num_experts_per_tok or 1)
    ep = np.asarray(ep, dtype=float)
    return ep * np.minimum(model.num_experts_total / ep, k) / k


def moe_load_factor(job: JobSpec, mesh: MeshArrays, model: ModelSpec) -> np.ndarray:
    """Routed tokens the busiest expert-parallel rank processes and receives, over an even share
    (columns over meshes): the capacity factor under token drop, else the job's dropless load
    imbalance where experts are spread over ep > 1 ranks, at most what the busiest rank can get
    (``most_imbalance``), else 1."""
    if job.moe_capacity_factor is not None:
        return np.full(len(mesh), job.moe_capacity_factor)
    return np.where(mesh.ep > 1, np.minimum(job.moe_dropless_imbalance, most_imbalance(model, mesh.ep)), 1.0)
