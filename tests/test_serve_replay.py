"""The online-benchmark replay (planner/serving/replay.py): at a trickle it is the steady-state
round's price, past capacity the requests queue, and a rate row that states its request count is
priced by it (runs.predict)."""

from __future__ import annotations

import numpy as np
import pytest

from planner.catalog import load_cluster, load_model
from planner.serving.engine import load_engine
from planner.serving.layout import Layouts
from planner.serving.replay import replay_latencies
from planner.serving.step import Setting, round_cost


def _setting(engine: str = "trtllm") -> tuple[Setting, Layouts]:
    e = load_engine(engine)
    s = Setting(load_model("llama3-8b"), load_cluster("dgx-h100x1"), e, "bf16", "bf16", e.parameters("hopper"))
    return s, Layouts.of(1, 1, 1, False, 8)


def test_a_trickle_of_requests_prices_each_alone() -> None:
    """At one request every 10,000 s per replica each request runs alone: its TTFT is one prefill
    iteration of its prompt, its tokens come one decode round of one sequence apart."""
    s, lay = _setting()
    ttft, itl = replay_latencies(s, lay, 512, 64, 8 * 1e-4, 8 * 20)
    one = lay.take(np.array([0]))
    prefill = round_cost(s, one, np.zeros(1), np.zeros(1), np.array([512.0]), 512).total_s(s.params)[0]
    assert ttft == pytest.approx(float(prefill), rel=1e-9)
    first = round_cost(s, one, np.ones(1), np.array([512.0 + 32]), np.zeros(1), 512).total_s(s.params)[0]
    last = round_cost(s, one, np.ones(1), np.array([512.0 + 64]), np.zeros(1), 512).total_s(s.params)[0]
    assert float(first) <= itl <= float(last)


def test_past_capacity_the_requests_queue() -> None:
    """Every request sent at once: the mean TTFT is the wait for half the queue to be admitted,
    so twice the requests wait about twice as long; tokens come slower than at a trickle, every
    iteration carrying a full batch and prompt tokens, and never more prompt tokens than the budget."""
    s, lay = _setting()
    few, itl_few = replay_latencies(s, lay, 1024, 128, float("inf"), 8 * 2000)
    many, itl_many = replay_latencies(s, lay, 1024, 128, float("inf"), 8 * 4000)
    _, itl_trickle = replay_latencies(s, lay, 1024, 128, 8 * 0.01, 8 * 20)
    assert 1.7 < many / few < 2.3
    assert itl_few > 3 * itl_trickle and itl_many == pytest.approx(itl_few, rel=0.1)
    # a rate above capacity queues as well, less than all at once
    rate, _ = replay_latencies(s, lay, 1024, 128, 8 * 40.0, 8 * 2000)
    assert rate < few


def test_chunked_prefill_splits_a_prompt_longer_than_the_budget() -> None:
    """A 20K prompt on an 8K budget takes three iterations, chunked (vLLM) or in budget-sized
    pieces (TensorRT-LLM without chunking, as search.prefill_chunk prices it)."""
    for engine in ("vllm", "trtllm"):
        s, lay = _setting(engine)
        ttft, _ = replay_latencies(s, lay, 20480, 8, 8 * 0.001, 8 * 3)
        one = lay.take(np.array([0]))
        piece = round_cost(s, one, np.zeros(1), np.zeros(1), np.array([8192.0]), 20480).total_s(s.params)[0]
        assert 2.4 * float(piece) < ttft < 3.0 * float(piece)
