"""Pipeline parallelism: layers per stage, micro-batches in flight, bubble (DESIGN 4.6).

Bubble fractions, p stages, m micro-batches, v virtual stages per rank:
  GPipe and 1F1B:     (p-1)/(m+p-1)          Huang et al. 2019; Narayanan et al. 2021 section 2.2.1
  interleaved 1F1B:   (p-1)/(v*m+p-1)        Narayanan et al. 2021 section 2.2.2
  ZB-H1:              (p-1)/(3m+p-1)         Qi et al. 2024, 'Zero Bubble Pipeline Parallelism',
                      section 3: with the backward split into input-gradient B and weight-gradient
                      W and T_F = T_B = T_W, ZB-H1's bubble is (p-1)(T_F+T_B-T_W) = a third of
                      1F1B's (p-1)(T_F+T_B+T_W), at 1F1B's activation memory.
Expressed as idle slots of one micro-batch's forward+backward: p-1, (p-1)/v and (p-1)/3.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from planner.mesh import GPIPE, INTERLEAVED, ZB_H1, MeshArrays
from planner.schemas.model import ModelSpec


def batch_unit(mesh: MeshArrays, interleaved_rule: bool = True) -> np.ndarray:
    """Sequences a global batch must be a multiple of: d * b, times p for interleaved 1F1B
    (Megatron-LM's interleaved schedule needs the micro-batch count divisible by p)."""
    unit = mesh.dp * mesh.micro_batch_size
    return np.where(interleaved_rule & (mesh.schedule == INTERLEAVED), unit * mesh.pp, unit)


def mesh_batch_size(batch_size: int, mesh: MeshArrays, interleaved_rule: bool = True) -> np.ndarray:
    """The global batch each mesh runs: the asked B when the mesh's unit divides it, else the
    next multiple, ceil(B / unit) * unit. The feasibility rules bound the growth by the job's
    ``max_batch_growth`` (none by default), so unless growth is allowed this is B."""
    return round_up(batch_size, batch_unit(mesh, interleaved_rule))


def round_up(batch_size: int, unit: Any) -> Any:
    """The smallest multiple of ``unit`` (an int or an array) that is >= ``batch_size``."""
    return -(-batch_size // unit) * unit


def num_microbatches(mesh_batch: np.ndarray, mesh: MeshArrays) -> np.ndarray:
    """m = B / (d * b): micro-batches each pipeline processes per step, B the mesh's batch."""
    return mesh_batch // (mesh.dp * mesh.micro_batch_size)


def bubble_slots(mesh: MeshArrays) -> np.ndarray:
    """Idle time of a step in units of one micro-batch's forward+backward on a stage."""
    p1 = (mesh.pp - 1).astype(float)
    return np.where(
        mesh.schedule == INTERLEAVED, p1 / mesh.virtual_stages, np.where(mesh.schedule == ZB_H1, p1 / 3.0, p1)
    )


def bubble_fraction(m: np.ndarray, mesh: MeshArrays) -> np.ndarray:
    """Idle share of the step: bubble / (m + bubble); equals (p-1)/(m+p-1) for 1F1B."""
    slots = bubble_slots(mesh)
    return slots / (m + slots)


def layers_per_chunk(num_layers: int, chunks: Any) -> Any:
    """Layers of the busiest model chunk when ``num_layers`` are split over ``chunks`` = p*v
    chunks: ceil(L / (p*v)) (an int or an array, as ``chunks``)."""
    return -(-num_layers // chunks)


def layers_on_worst_stage(model: ModelSpec, mesh: MeshArrays) -> np.ndarray:
    """Layers on the most loaded pipeline rank: ceil(L / (p*v)) per chunk, v chunks.

    When L does not divide evenly the extra layers go to some stages (Megatron-LM's
    --decoder-first/last-pipeline-num-layers give the user that choice); the worst rank holds
    the rounded-up share, which is what sets the step time and peak memory. A mesh with an
    explicit layout (``ParallelConfig.pipeline_layout``) prices its busiest rank's layers.
    """
    even = layers_per_chunk(model.num_hidden_layers, mesh.pp * mesh.virtual_stages) * mesh.virtual_stages
    return np.where(mesh.layout_layers > 0, mesh.layout_layers, even)


def moe_layers_on_worst_stage(model: ModelSpec, layers: np.ndarray) -> np.ndarray:
    """MoE layers on that rank, taking the worst case that all its layers are MoE when the
    model has that many (dense-first layers such as DeepSeek's first 3 sit on stage 0)."""
    return np.minimum(layers, model.num_moe_layers)


def microbatches_in_flight(m: np.ndarray, mesh: MeshArrays, first: bool = True) -> np.ndarray:
    """Micro-batches' worth of a stage's activations held at its peak (DESIGN 4.2).

    First stage: GPipe keeps all m; 1F1B and ZB-H1 keep min(p, m) (stage i keeps p - i);
    interleaved 1F1B keeps p * (1 + (p-1)/(p*v)) (Korthikanti et al. 2022 section 4.2.3).
    Last stage: GPipe m, 1F1B 1, interleaved ((v-1)*p + 1)/v: Megatron-LM's warm-up runs
    (v-1)*p + 1 model chunks of 1/v of the stage each before the first backward.
    With p = 1 every schedule is plain gradient accumulation: one micro-batch at a time.
    """
    p = mesh.pp.astype(float)
    v = mesh.virtual_stages
    if first:
        interleaved = p * (1.0 + (p - 1.0) / (p * v))
        plain = np.minimum(p, m)
    else:
        interleaved = ((v - 1) * p + 1.0) / v
        plain = np.ones_like(p)
    held = np.where(
        mesh.schedule == GPIPE, m, np.where(mesh.schedule == INTERLEAVED, np.minimum(interleaved, m), plain)
    )
    return np.where(mesh.pp == 1, 1.0, held)


def chunk_layer_counts(num_layers: int, pp: int, virtual_stages: int) -> list[int]:
    """Transformer layers in each of the p*v model chunks, in model order (chunk c runs on
    pipeline rank c mod p, as in Megatron-LM and torchtitan's looped schedules).

    With L = q*(p*v) + r the r extra layers go to the chunks in the middle, so the first chunk
    (which also runs the embedding) and the last (LM head and loss) get the smaller count: what
    Megatron-LM's --account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split
    aim at.
    """
    chunks = pp * virtual_stages
    base, extra = divmod(num_layers, chunks)
    order = sorted(range(chunks), key=lambda c: (c in (0, chunks - 1), abs(c - (chunks - 1) / 2)))
    sizes = [base] * chunks
    for c in order[:extra]:
        sizes[c] += 1
    return sizes


def stage_layer_counts(num_layers: int, pp: int, virtual_stages: int) -> list[int]:
    """Transformer layers on each pipeline rank: the sum of its chunks' ``chunk_layer_counts``.
    The busiest rank never holds more than ceil(L/(p*v))*v layers, the count the cost engine
    prices (``layers_on_worst_stage``)."""
    sizes = chunk_layer_counts(num_layers, pp, virtual_stages)
    return [sum(sizes[c] for c in range(rank, len(sizes), pp)) for rank in range(pp)]
