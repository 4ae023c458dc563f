"""Serving layouts as numpy columns: one replica is tp x pp GPUs; ep splits a MoE layer's experts
over ep of its tp ranks (the rest tensor-split each expert, TensorRT-LLM's moe_tp x moe_ep = tp);
attention DP runs attention data-parallel over the tp ranks (each holds whole sequences);
replicas copy the replica over the cluster."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Layouts:
    """Columns of equal length: tp, pp, ep, attention_dp (bool), replicas."""

    tp: np.ndarray
    pp: np.ndarray
    ep: np.ndarray
    attention_dp: np.ndarray
    replicas: np.ndarray

    @classmethod
    def of(
        cls, tp: object, pp: object = 1, ep: object = 1, attention_dp: object = False, replicas: object = 1
    ) -> Layouts:
        cols = np.broadcast_arrays(
            np.asarray(tp, dtype=float),
            np.asarray(pp, dtype=float),
            np.asarray(ep, dtype=float),
            np.asarray(attention_dp, dtype=bool),
            np.asarray(replicas, dtype=float),
        )
        tp_, pp_, ep_, adp_, rep_ = (np.atleast_1d(c).copy() for c in cols)
        return cls(tp_, pp_, ep_, adp_, rep_)

    @property
    def gpus_per_replica(self) -> np.ndarray:
        return self.tp * self.pp

    @property
    def num_gpus(self) -> np.ndarray:
        return self.tp * self.pp * self.replicas

    def __len__(self) -> int:
        return len(self.tp)

    def take(self, index: np.ndarray) -> Layouts:
        return Layouts(self.tp[index], self.pp[index], self.ep[index], self.attention_dp[index], self.replicas[index])

    def text(self, i: int) -> str:
        """Row ``i`` as ``layout_text`` names it."""
        return layout_text(
            int(self.replicas[i]), int(self.tp[i]), int(self.pp[i]), int(self.ep[i]), bool(self.attention_dp[i])
        )


def layout_text(replicas: int, tp: int, pp: int, ep: int = 1, attention_dp: bool = False) -> str:
    """A layout as the table, the plot and the equivalents name it: '2x tp4 pp1 ep4 adp'."""
    return f"{replicas}x tp{tp} pp{pp}" + (f" ep{ep}" if ep != 1 else "") + (" adp" if attention_dp else "")
