"""A published online-serving benchmark replayed iteration by iteration (ARCHITECTURE 9.7).

A benchmark client sends a fixed number of requests at a request rate and reports mean TTFT and
mean inter-token latency. Near and past the replica's capacity those means are set by queueing,
by whole prompts landing in some iterations and not others, and by the requests running out at
the end: what a steady-state round (``step.round_cost`` at the batch Little's law gives) cannot
say. The replay keeps the round's price and changes only the load:

  arrivals   Poisson at the row's rate (exponential gaps, the means averaged over four fixed
             draws, ``REPLAY_SEEDS``, so a row prices the same every time), as the benchmark
             clients draw them (vLLM benchmarks/
             benchmark_serving.py --request-rate: "Otherwise, we use Poisson process to synthesize
             the request arrival times"; an infinite rate sends every request at time 0);
             the replica gets its share of the rate and of the requests.
  admission  first come, first served, while the running sequences stay within the replica's
             room (``memory.plan_memory``'s concurrency and the engine's max batch) and the
             iteration's prompt tokens within the engine's token budget
             (``max_num_batched_tokens``: vLLM's max_num_batched_tokens and TensorRT-LLM's
             max_num_tokens count decode and prompt tokens together); an engine without chunked
             prefill runs a prompt whole (a longer one than the budget in budget-sized pieces, as
             ``search.prefill_chunk`` prices it), one with it fills the room left.
  iteration  ``step.round_cost`` of the running sequences' decode tokens (at their mean context)
             and the admitted prompt tokens; a prompt's first token comes at the end of the
             iteration that finishes it, and each running sequence gets one token per iteration.
  metrics    mean TTFT over the requests; mean inter-token latency over every gap between a
             sequence's successive tokens (TensorRT-LLM's and vLLM's ITL).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

import numpy as np

from planner.serving.layout import Layouts
from planner.serving.memory import reserved_context
from planner.serving.search import prefill_chunk
from planner.serving.step import Setting, round_cost

REPLAY_SEEDS = (0, 1, 2, 3)
"""The arrival draws averaged (fixed, so a row prices the same every time). One draw of 500
requests is as noisy as the published run it stands for near capacity: 70B on 4 H100 at 32 req/s
(TensorRT-LLM's online table) gave a mean TTFT of 534-1,459 ms and at 16 req/s an inter-token
latency of 37-49 ms over seeds 0-4, 2-4% apart at 2-8 req/s; the mean of four is the expectation
within about a quarter of that spread."""

CONTEXT_BUCKET_TOKENS = 32
"""Decode contexts are priced to the nearest 32 tokens, so that iterations of the same batch and
prompt tokens reuse one price (the KV read moves by well under 1% within a bucket)."""


def replay_latencies(
    s: Setting, lay: Layouts, input_len: int, output_len: int, rate_per_s: float, requests: int
) -> tuple[float, float]:
    """(mean TTFT s, mean inter-token latency s) of ``requests`` requests of ``input_len`` prompt
    and ``output_len`` output tokens sent at ``rate_per_s`` (inf: all at once) to the layout's
    replicas (layout row 0), each replica taking its share (see the module docstring)."""
    replicas = float(lay.replicas[0])
    n = max(1, round(requests / replicas))
    rate = rate_per_s / replicas
    mem = s.memory(lay, reserved_context(s.engine, input_len, output_len))
    room = max(1, min(int(mem.max_concurrency[0]), s.engine.max_batch_size))
    budget = s.engine.max_num_batched_tokens
    piece = prefill_chunk(s.engine, input_len)  # a chunked engine's is further cut to the room left
    one = lay.take(np.array([0]))
    prices: dict[tuple[int, int, int], float] = {}

    def iteration_s(decoding: int, prompt_tokens: int, context: float) -> float:
        bucket = round(context / CONTEXT_BUCKET_TOKENS)
        key = (decoding, prompt_tokens, bucket)
        if key not in prices:
            cost = round_cost(
                s,
                one,
                np.array([float(decoding)]),
                np.array([float(max(bucket, 1) * CONTEXT_BUCKET_TOKENS)]),
                np.array([float(prompt_tokens)]),
                input_len,
            )
            prices[key] = float(cost.total_s(s.params)[0])
        return prices[key]

    draws = (
        [np.zeros(n)]
        if math.isinf(rate)
        else [np.cumsum(np.random.default_rng(seed).exponential(1.0 / rate, n)) for seed in REPLAY_SEEDS]
    )
    means = [_replay(arrivals, n, room, budget, piece, s.engine.chunked_prefill, input_len, output_len, iteration_s)
             for arrivals in draws]  # fmt: skip
    return float(np.mean([m[0] for m in means])), float(np.mean([m[1] for m in means]))


def _replay(
    arrivals: np.ndarray,
    n: int,
    room: int,
    budget: int,
    piece: int,
    chunked: bool,
    input_len: int,
    output_len: int,
    iteration_s: Callable[[int, int, float], float],
) -> tuple[float, float]:
    """One draw of arrivals through the engine (``replay_latencies``): (mean TTFT, mean gap)."""
    waiting: deque[list[float]] = deque()  # [arrival s, prompt tokens left]
    prefilling: list[list[float]] = []  # admitted, prompt not finished: [arrival s, tokens left]
    running: list[list[float]] = []  # [tokens left to generate, time of the last token, generated]
    ttft: list[float] = []
    gap_sum, gaps, sent, finished, now = 0.0, 0, 0, 0, 0.0
    while finished < n:
        while sent < n and arrivals[sent] <= now:
            waiting.append([float(arrivals[sent]), float(input_len)])
            sent += 1
        if not (running or prefilling or waiting):
            now = float(arrivals[sent])
            continue
        left = budget - len(running)
        chunks: list[tuple[list[float], int]] = []
        for req in prefilling:  # prompts already started go first
            take = int(min(req[1], piece, left))
            if take > 0:
                chunks.append((req, take))
                left -= take
        while waiting and len(running) + len(prefilling) < room:
            req = waiting[0]
            take = int(min(req[1], piece, left) if chunked else (piece if piece <= left else 0))
            if take <= 0:
                break
            waiting.popleft()
            prefilling.append(req)
            chunks.append((req, take))
            left -= take
        context = input_len + (sum(r[2] for r in running) / len(running) if running else 0.0)
        now += iteration_s(len(running), sum(t for _, t in chunks), context)
        for r in running:
            gap_sum += now - r[1]
            gaps += 1
            r[0] -= 1
            r[1] = now
            r[2] += 1
        for req, take in chunks:
            req[1] -= take
        for req in [r for r in prefilling if r[1] <= 0]:
            prefilling.remove(req)
            ttft.append(now - req[0])
            if output_len > 1:
                running.append([float(output_len - 1), now, 1.0])
            else:
                finished += 1
        done = [r for r in running if r[0] <= 0]
        finished += len(done)
        running = [r for r in running if r[0] > 0]
    return float(np.mean(ttft)), (gap_sum / gaps if gaps else math.nan)
