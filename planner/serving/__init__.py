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

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from planner.schemas.hardware import ClusterSpec
    from planner.schemas.model import ModelSpec
    from planner.serving.schemas import ServeRanking


def serve(model: str | ModelSpec, cluster: str | ClusterSpec, **request: Any) -> ServeRanking:
    """Rank serving layouts: ``serve("llama70b", "dgx-h100x1", input_len=2048, output_len=512,
    tpot_s=0.03)``; ``request`` holds ``ServeRequest`` fields. The library's ``planner.serve``."""
    from planner.catalog import load_cluster, load_model
    from planner.errors import validate_as
    from planner.serving.schemas import ServeRequest
    from planner.serving.search import serve_search

    req = validate_as(ServeRequest, request, "serve")
    return serve_search(load_model(model), load_cluster(cluster), req)
