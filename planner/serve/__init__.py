"""Serving planner: rank TP/PP/EP/attention-DP/replica layouts (and prefill/decode splits) for
LLM inference by output tokens/s per GPU among those that meet the latency targets.

Data flow (ARCHITECTURE section 9): ``engine`` (engines/*.yaml) and the catalog's model and
cluster -> ``kv`` (KV cache bytes per token) and ``memory`` (per-GPU budget, max concurrency) ->
``step`` (one engine iteration: weights and KV read from HBM, GEMM and attention FLOPs on a
roofline, TP/EP/PP communication, fitted per-iteration overhead) -> ``search`` (every layout
and batch as numpy columns, ranked) -> ``render`` (table) or JSON. ``runs`` and ``calibrate``
price published rows and fit the engine's per-architecture parameters.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from planner.schemas.hardware import ClusterSpec
    from planner.schemas.model import ModelSpec
    from planner.serve.schemas import ServeRanking


def serve(model: str | ModelSpec, cluster: str | ClusterSpec, **request: Any) -> ServeRanking:
    """Rank serving layouts: ``planner.serve("llama70b", "dgx-h100x1", input_len=2048,
    output_len=512, tpot_s=0.03)``; ``request`` holds ``ServeRequest`` fields."""
    from planner.catalog import load_cluster, load_model, validate_as
    from planner.serve.schemas import ServeRequest
    from planner.serve.search import serve_search

    req = validate_as(ServeRequest, request, "serve")
    return serve_search(load_model(model), load_cluster(cluster), req)


class _CallableModule(types.ModuleType):
    """``planner.serve`` is this package and the library function at once: importing a submodule
    (planner.serve.search) binds the package as the attribute ``planner.serve``, so the package
    itself answers calls by delegating to ``serve``."""

    def __call__(self, model: Any, cluster: Any, **request: Any) -> ServeRanking:
        return serve(model, cluster, **request)


sys.modules[__name__].__class__ = _CallableModule
