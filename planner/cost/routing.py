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


def moe_load_factor(job: JobSpec, mesh: MeshArrays) -> np.ndarray:
    """Routed tokens the busiest expert-parallel rank processes and receives, over an even share
    (columns over meshes): the capacity factor under token drop, else the job's dropless load
    imbalance where experts are spread over ep > 1 ranks, else 1."""
    if job.moe_capacity_factor is not None:
        return np.full(len(mesh), job.moe_capacity_factor)
    return np.where(mesh.ep > 1, job.moe_dropless_imbalance, 1.0)
