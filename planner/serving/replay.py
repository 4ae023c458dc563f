"""A serving load replayed iteration by iteration: a published online benchmark's (ARCHITECTURE
9.7), or the load a `plan serve --request-rate` / `--concurrency` asks (9.5).

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
             the replica gets its share of the rate and of the requests. At a concurrency, a
             closed loop instead: that many sent at once, each one finished sending the next.
  admission  first come, first served, while the running sequences stay within the replica's
             room (``memory.plan_memory``'s concurrency and the engine's max batch) and the
             iteration's prompt tokens within the engine's token budget
             (``max_num_batched_tokens``: vLLM's max_num_batched_tokens and TensorRT-LLM's
             max_num_tokens count decode and prompt tokens together), a budget for each of the
             pp micro-batches of an iteration (a round: every running sequence one token): under
             pipeline parallelism both engines schedule each micro-batch apart with the whole
             budget (vLLM V1's EngineCore.step_with_batch_queue schedules a batch whenever its
             queue of pp batches has room; TensorRT-LLM's PyExecutor._executor_loop_pp calls
             _schedule once per micro-batch); an engine without chunked prefill runs a prompt
             whole, one with it fills the room left (a prompt longer than the budget runs
             chunked in any engine, ``search.runs_chunked``).
  iteration  ``step.round_cost`` of the running sequences' decode tokens (at their mean context)
             and the admitted prompt tokens; a prompt's first token comes at the end of the
             iteration that finishes it, and each running sequence gets one token per iteration.
  metrics    mean TTFT over the requests; mean inter-token latency over every gap between a
             sequence's successive tokens (TensorRT-LLM's and vLLM's ITL); every request counts,
             as the clients count them, or a plan's middle half only (``replay``'s ``measured``);
             and the output tokens of the whole run over its duration, from the first request
             sent to the last token out, as trtllm-bench reports its throughput (total output
             tokens over the latest request end less the earliest request start,
             tensorrt_llm/bench/dataclasses/reporting.py StatsKeeper.generate_statistics_summary
             @02499765) and vLLM's benchmark_serving.py its output token throughput (over the
             benchmark duration).
"""

from __future__ import annotations

import functools
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from planner.serving.layout import Layouts
from planner.serving.memory import reserved_context
from planner.serving.search import prefill_chunk, runs_chunked
from planner.serving.step import RoundPricer, Setting, schedulers

REPLAY_SEEDS = (0, 1, 2, 3)
"""The arrival draws averaged (fixed, so a row prices the same every time). One draw of 500
requests is as noisy as the published run it stands for near capacity: 70B on 4 H100 at 32 req/s
(TensorRT-LLM's online table) gave a mean TTFT of 534-1,459 ms and at 16 req/s an inter-token
latency of 37-49 ms over seeds 0-4, 2-4% apart at 2-8 req/s; the mean of four is the expectation
within about a quarter of that spread."""

CONTEXT_BUCKET_TOKENS = 32
"""Decode contexts are priced to the nearest 32 tokens, so that iterations of the same batch and
prompt tokens reuse one price (the KV read moves by well under 1% within a bucket)."""


def busy_ranks(ranks: int, in_flight: int, replicas: float) -> int:
    """Of a replica's ``ranks`` schedulers (an engine's attention-DP ranks each scheduled apart),
    those a closed loop of ``in_flight`` requests over ``replicas`` replicas keeps busy:
    min(ranks, ceil(in_flight / replicas)), at least one."""
    return max(1, min(ranks, math.ceil(in_flight / replicas)))


@dataclass(frozen=True)
class Replayed:
    """What a replay measures over its measured requests (means of the arrival draws)."""

    ttft_s: float  # mean time to first token
    itl_s: float  # mean inter-token latency (NaN: no request generated a second token)
    running: float  # sequences in the replica's batch (decoding or prefilling), time-averaged
    queue_growth: float  # requests waiting to be admitted at the last measured arrival, less at the first
    # the replica's output tokens over the whole run (every request, measured or not), from its first
    # request sent to its last token out: what a benchmark of a fixed request count reports
    output_tokens_per_s: float = math.nan


def replay(
    s: Setting,
    lay: Layouts,
    input_len: int,
    output_len: int,
    rate_per_s: float,
    requests: int,
    measured: tuple[float, float] = (0.0, 1.0),
    draws: int = len(REPLAY_SEEDS),
    concurrency: int | None = None,
    prices: dict[tuple[int, int], np.ndarray] | None = None,
    prompt_done: bool = False,
) -> Replayed:
    """The mean TTFT and inter-token latency (``Replayed``) of ``requests`` requests of
    ``input_len`` prompt and ``output_len`` output tokens sent at ``rate_per_s`` (inf: all at once)
    to the layout's replicas (layout row 0), each replica taking its share (see the module
    docstring), measuring only the requests whose place in the arrival order falls in
    ``measured`` (fractions of a replica's requests: the default, every request, as the benchmark
    clients do; (0.25, 0.75) leaves out the ramp up and the drain, for a load sustained
    indefinitely), averaged over the first ``draws`` of the arrival draws (``REPLAY_SEEDS``). With
    ``concurrency`` (the whole layout's, each replica taking ceil(concurrency / replicas)) the load
    is a closed loop instead of ``rate_per_s``: that many requests are sent at once and each one
    finished sends the next, as ``vllm bench serve --max-concurrency`` does at an unbounded rate (a
    semaphore around its requests); the one draw is deterministic. ``prices``: iteration prices
    already computed for this setting and layout at the same input and output lengths (filled in
    here), so that replays of one layout at several loads price each iteration once. With
    ``prompt_done`` the replica is a disaggregated decode pool's (``disagg.replayed_split``): each
    request arrives with its prompt's KV cache already computed elsewhere and joins the next
    iteration as one more decode token (its first token at that iteration's end, then one an
    iteration), up to the replica's room, no token budget applying."""
    # an engine that schedules each attention-DP rank apart runs one rank here, at its share of the
    # replica's load, its own max batch and token budget; every active rank alike, the replica's round
    # has ``active`` times the rank's sequences and prompt tokens. A closed loop of fewer requests a
    # replica than it has ranks keeps only that many busy: concurrency 1 on 8 ranks had priced 8
    # prompts at once (a lone 32K prompt of Qwen3-30B-A3B at TP 8 replayed slower than at TP 1, a review)
    ranks = int(schedulers(s, lay)[0])
    active = ranks if concurrency is None else busy_ranks(ranks, concurrency, float(lay.replicas[0]))
    replicas = float(lay.replicas[0]) * active
    n = max(1, round(requests / replicas))
    first = min(n - 1, int(measured[0] * n))
    last = min(n, max(first + 1, math.ceil(measured[1] * n)))
    rate = rate_per_s / replicas
    mem = s.memory(lay, reserved_context(s.engine, input_len, output_len))
    room = max(1, min(int(mem.max_concurrency[0]) // ranks, s.engine.max_batch_size))
    budget = s.engine.max_num_batched_tokens * int(lay.pp[0])  # each micro-batch its own (module docstring)
    piece = prefill_chunk(s.engine, input_len)  # a chunked engine's is further cut to the room left
    chunked = runs_chunked(s.engine, input_len)
    if prompt_done:  # a whole prompt's worth of budget for every sequence the room holds: no budget binds
        budget, piece, chunked = (room + 1) * input_len, input_len, False
    # one layout's rounds at every load: the layout's own terms (links, weight bytes, shares) worked out once
    pricer = RoundPricer(s, lay.take(np.zeros(1, dtype=int)))
    decoding_counts = np.arange(room + 1, dtype=float) * active
    rows: dict[tuple[int, int], np.ndarray] = {} if prices is None else prices

    def iteration_s(decoding: int, prompt_tokens: int, context: float) -> float:
        """The price of an iteration. The first at a (prompt tokens, context bucket) not priced ahead
        (``replay``'s ``all_at_once``) prices every decode count from 0 to the room in one vectorised ``round_cost``
        call, which later ones read: the same prices as one call per iteration (each column is that
        call's arithmetic), the replay 3x faster (70B TP8 on one DGX H100, 500 requests at 8 req/s:
        0.78 -> 0.24 s)."""
        bucket = round(context / CONTEXT_BUCKET_TOKENS)
        row = rows.get((prompt_tokens, bucket))
        if row is None or math.isnan(row[decoding]):
            cost = pricer.cost(
                decoding_counts,
                np.full(room + 1, float(max(bucket, 1) * CONTEXT_BUCKET_TOKENS)),
                np.full(room + 1, float(prompt_tokens * active)),
                input_len,
            )
            row = rows[(prompt_tokens, bucket)] = cost.total_s(s.params)
        return float(row[decoding])

    def all_at_once(arrivals: list[float]) -> tuple[float, float, float, float, float]:
        """A run of ``arrivals`` all sent at once (a closed loop's or an infinite rate's): which
        iterations it takes depends on token counts alone, not on their prices (no arrival waits on
        the clock), so one run at a stand-in price lists them (``_Trace``), every iteration not yet
        priced is priced in one ``round_cost`` call, and the run's figures are the trace's at those
        prices: the same figures as a run at them (to float rounding), in one pass of the loop
        instead of two (Qwen3-30B-A3B on one DGX H100 at a 50 ms TPOT, the whole plan 1.11 -> 0.86 s
        of CPU). At capacity the prompt tokens an iteration takes are the budget the running
        sequences leave, a different count nearly every iteration, and one call per (prompt tokens,
        context bucket) had cost 0.3 s a replay (2,014 sequences of 2K/512: 400 calls), 0.03 s so."""
        trace = _Trace()
        replace(engine, iteration_s=trace.note).run(list(arrivals), n, first, last, trace)
        keys = list(dict.fromkeys(trace.keys))
        todo = [k for k in keys if k[1:] not in rows or math.isnan(rows[k[1:]][k[0]])]
        if todo:
            decoding, prompt_tokens, bucket = (np.array(column, dtype=float) for column in zip(*todo, strict=True))
            cost = pricer.cost(
                decoding * active,
                np.maximum(bucket, 1.0) * CONTEXT_BUCKET_TOKENS,
                prompt_tokens * active,
                input_len,
            )
            for (d, tokens, b), price in zip(todo, cost.total_s(s.params), strict=True):
                rows.setdefault((tokens, b), np.full(room + 1, math.nan))[d] = price
        return trace.figures(np.array([rows[(p, b)][d] for d, p, b in trace.keys]))

    engine = _Engine(room, budget, piece, chunked, input_len, output_len, iteration_s, not prompt_done)
    if concurrency is not None or math.isinf(rate):
        sent = [0.0] * (n if concurrency is None else min(n, math.ceil(concurrency / replicas)))
        runs = [all_at_once(sent)]
    else:
        gaps = (np.random.default_rng(seed).exponential(1.0 / rate, n) for seed in REPLAY_SEEDS[:draws])
        runs = [engine.run(np.cumsum(g).tolist(), n, first, last) for g in gaps]
    ttft, itl, running, growth, duration = (float(np.mean(column)) for column in zip(*runs, strict=True))
    tokens_per_s = n * output_len * active / duration if duration > 0 else math.nan
    # the replica's, every active rank alike
    return Replayed(ttft, itl, running * active, growth * active, tokens_per_s)


@dataclass
class _Trace:
    """A run of requests all sent at once, as ``_Engine.run`` steps through it at a stand-in price
    (``note``): per iteration its price key (running sequences, prompt tokens, context bucket), the
    decode-only iterations it stands for, the batch and the measured running sequences; per measured
    request the iterations after which it arrived (-1: at the start) and got its first token; at the
    first and last measured arrivals the iteration and the queue. ``figures`` gives the run's figures
    at real prices: its clock is the running sum of steps x price."""

    keys: list[tuple[int, int, int]] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    in_batch: list[int] = field(default_factory=list)
    measured_running: list[int] = field(default_factory=list)
    first_tokens: list[tuple[int, int]] = field(default_factory=list)  # (arrived after, first token after)
    marks: list[tuple[int, float]] = field(default_factory=lambda: [(-1, 0.0), (-1, 0.0)])

    def note(self, decoding: int, prompt_tokens: int, context: float) -> float:
        self.keys.append((decoding, prompt_tokens, round(context / CONTEXT_BUCKET_TOKENS)))
        return 1.0

    @property
    def done(self) -> int:
        """The iterations stepped so far, less one: the last one's place (-1 before the first)."""
        return len(self.keys) - 1

    def figures(self, prices: np.ndarray) -> tuple[float, float, float, float, float]:
        """``_Engine.run``'s (mean TTFT, mean gap, time-mean batch, queue growth, duration) at
        ``prices`` (one a key of ``keys``, in order)."""
        steps = np.asarray(self.steps, dtype=float)
        dt = steps * prices
        clock = np.concatenate([[0.0], np.cumsum(dt)])  # clock[j + 1]: the time after iteration j
        batch_s = np.concatenate([[0.0], np.cumsum(np.asarray(self.in_batch) * dt)])
        measured = np.asarray(self.measured_running, dtype=float)
        arrived, first = (np.asarray(column, dtype=int) + 1 for column in zip(*self.first_tokens, strict=True))
        ttft = float(np.mean(clock[first] - clock[arrived]))
        gaps = float(np.sum(measured * steps))
        gap = float(np.sum(measured * dt)) / gaps if gaps else math.nan
        (j0, q0), (j1, q1) = self.marks
        t0, t1 = clock[j0 + 1], clock[j1 + 1]
        batch = (batch_s[j1 + 1] - batch_s[j0 + 1]) / (t1 - t0) if t1 > t0 else batch_s[-1] / clock[-1]
        return ttft, gap, float(batch), q1 - q0, float(clock[-1])


@dataclass(frozen=True)
class _Engine:
    """One replica's admission and iteration rules (the module docstring)."""

    room: int
    budget: int
    piece: int
    chunked: bool
    input_len: int
    output_len: int
    iteration_s: Callable[[int, int, float], float]
    prompts_priced: bool = True  # False: a decode pool's, whose admitted requests decode in their first iteration
    alone_shortcut: bool = True  # book lone requests with ``alone`` (False: step through them)

    def _decode_run(
        self,
        it: int,
        running: int,
        joined_sum: int,
        context: float,
        price: float,
        now: float,
        leaving: dict[int, list[int]],
        arrival: float | None,
    ) -> int:
        """How many decode-only iterations from iteration ``it`` run at one price: up to and including
        the first after which a sequence leaves, the next ``arrival`` has come (on the clock of
        ``now``; None: no more), or the next iteration's mean context is in another bucket
        (``CONTEXT_BUCKET_TOKENS``; the context grows by one token an iteration)."""
        steps = min(leaving) - it + 1 if leaving else math.inf
        if arrival is not None:
            steps = min(steps, max(1, math.ceil((arrival - now) / price)))
        bucket = round(context / CONTEXT_BUCKET_TOKENS)

        def crosses(k: int) -> bool:  # after the k-th iteration of the run, the next one's bucket differs
            following = self.input_len + ((it + k) * running - joined_sum) / running
            return round(following / CONTEXT_BUCKET_TOKENS) != bucket

        k = max(1, int((bucket + 0.5) * CONTEXT_BUCKET_TOKENS - context))
        while k > 1 and crosses(k - 1):
            k -= 1
        while not crosses(k):
            k += 1
        return int(min(steps, k))

    @functools.cached_property
    def alone(self) -> tuple[float, float]:
        """(TTFT, sum of the inter-token gaps) of a request that runs alone, from an idle engine to its
        last token: the iteration loop's own figures for one request. ``run`` books a request that
        arrives to an idle engine and is done before the next arrival with these, where the loop
        would step through its prefill and every decode context bucket again (at a trickle, 4 x
        1,600 requests on each of 24 layouts: 70B on 16 DGX H100 at 0.05 req/s, 14 s -> 6.8 s)."""
        ttft_s, gap_s, _, _, _ = replace(self, alone_shortcut=False).run([0.0], 1, 0, 1)
        return ttft_s, (gap_s * (self.output_len - 1) if self.output_len > 1 else 0.0)

    def run(
        self, arrivals: list[float], n: int, first: int, last: int, trace: _Trace | None = None
    ) -> tuple[float, float, float, float, float]:
        """One draw of ``n`` requests through the engine: (mean TTFT, mean gap, time-mean batch,
        queue growth, duration) of the requests ``first`` to ``last`` - 1, the batch over the span from the
        first one's arrival to the last one's (over the whole run where they all arrive at once),
        the growth of the queue waiting for admission over that span (a replica that does not keep
        up with the rate queues ever more: rate minus capacity times the span). ``arrivals`` holds
        every arrival time, or fewer: a closed loop, where each request finished sends the next.

        Every running sequence gets a token each iteration, so the running ones are kept as
        counts, not one by one: a sequence whose prompt finishes at the end of iteration k
        decodes in iterations k + 1 to k + output_len - 1 (its gaps are those iterations' times,
        its generated count in iteration j is j - k) and leaves at the end of the last; the
        work per iteration is then the prompts', not the batch's. With ``trace`` (a run of arrivals all
        sent at once, at ``trace.note``'s stand-in price) the run notes what ``_Trace.figures`` prices."""
        closed = len(arrivals) < n
        after = [-1] * len(arrivals)  # per request sent, the iteration after which it arrived (traced)
        # the clock restarts at each arrival to an idle engine (``base``, absolute): at a trickle the
        # arrivals reach 1e15 s, where a double no longer resolves a millisecond between tokens
        base = 0.0
        waiting: deque[list[float]] = deque()  # [arrival s since base, prompt tokens left, index]
        prefilling: list[list[float]] = []  # admitted, prompt not finished: [arrival s, tokens left, index]
        leaving: dict[int, list[int]] = {}  # iteration -> [sequences, of them measured] that leave after it
        running = measured_running = joined_sum = 0  # sum over running of the iteration each joined
        ttft: list[float] = []
        gap_sum, gaps, sent, finished, now, it = 0.0, 0, 0, 0, 0.0, 0
        whole_s = 0.0  # the batch's integral over time, so far
        marks = [(0.0, 0.0, 0.0), (0.0, 0.0, 0.0)]  # (time, integral, waiting) at the first and last measured arrival
        while finished < n:
            while sent < len(arrivals) and arrivals[sent] - base <= now:
                waiting.append([float(arrivals[sent] - base), float(self.input_len), float(sent)])
                sent += 1
                for end, index in enumerate((first, last - 1)):
                    if sent - 1 == index:
                        marks[end] = (base + now, whole_s, float(len(waiting)))
                        if trace is not None:
                            trace.marks[end] = (trace.done, float(len(waiting)))
            if not (running or prefilling or waiting):  # idle until the next arrival (an open loop's)
                base, now = float(arrivals[sent]), 0.0
                if (
                    self.alone_shortcut
                    and not closed
                    and (sent + 1 == len(arrivals) or arrivals[sent + 1] - base >= sum(self.alone))
                ):
                    # it runs alone from arrival to its last token, as every such request does
                    for end, index in enumerate((first, last - 1)):
                        if sent == index:
                            marks[end] = (base, whole_s, 1.0)
                    if first <= sent < last:
                        ttft.append(self.alone[0])
                        gap_sum += self.alone[1]
                        gaps += self.output_len - 1
                    whole_s += sum(self.alone)
                    sent, finished, now = sent + 1, finished + 1, sum(self.alone)
                continue
            it += 1
            left = self.budget - running
            chunks: list[tuple[list[float], int]] = []
            for req in prefilling:  # prompts already started go first
                take = int(min(req[1], self.piece, left))
                if take > 0:
                    chunks.append((req, take))
                    left -= take
            while waiting and running + len(prefilling) < self.room:
                req = waiting[0]
                take = int(min(req[1], self.piece, left) if self.chunked else (self.piece if self.piece <= left else 0))
                if take <= 0:
                    break
                waiting.popleft()
                prefilling.append(req)
                chunks.append((req, take))
                left -= take
            context = self.input_len + ((it * running - joined_sum) / running if running else 0.0)
            price = (
                self.iteration_s(running, sum(t for _, t in chunks), context)
                if self.prompts_priced
                else self.iteration_s(running + len(chunks), 0, context)  # the admitted decode their first token
            )
            in_batch = running + len(prefilling)
            # decode-only iterations repeat at one price until an arrival, a departure or the next
            # context bucket: run them here at once, as many as the loop would run one by one
            steps = 1
            if not chunks and running > 0:
                arrival = arrivals[sent] - base if sent < len(arrivals) else None
                steps = self._decode_run(it, running, joined_sum, context, price, now, leaving, arrival)
            if trace is not None:
                trace.steps.append(steps)
                trace.in_batch.append(in_batch)
                trace.measured_running.append(measured_running)
            now += steps * price
            whole_s += in_batch * steps * price
            gap_sum += measured_running * steps * price
            gaps += measured_running * steps
            it += steps - 1
            for req, take in chunks:
                req[1] -= take
            for req in [r for r in prefilling if r[1] <= 0]:
                prefilling.remove(req)
                measured = first <= req[2] < last
                if measured:
                    ttft.append(now - req[0])
                    if trace is not None:
                        trace.first_tokens.append((after[int(req[2])], trace.done))
                if self.output_len > 1:
                    out = leaving.setdefault(it + self.output_len - 1, [0, 0])
                    out[0] += 1
                    out[1] += measured
                    running += 1
                    measured_running += measured
                    joined_sum += it
                else:
                    finished += 1
                    if closed and len(arrivals) < n:
                        arrivals.append(base + now)
                        after.append(trace.done if trace is not None else -1)
            if it in leaving:
                count, of_measured = leaving.pop(it)
                finished += count
                running -= count
                measured_running -= of_measured
                joined_sum -= count * (it - self.output_len + 1)
                if closed:
                    more = min(count, n - len(arrivals))
                    arrivals.extend([base + now] * more)
                    after.extend([trace.done if trace is not None else -1] * more)
        (t0, w0, q0), (t1, w1, q1) = marks
        batch = (w1 - w0) / (t1 - t0) if t1 > t0 else whole_s / (base + now)  # all sent at once: the run's
        duration = base + now - (float(arrivals[0]) if arrivals else 0.0)  # first sent to last token out
        return float(np.mean(ttft)), (gap_sum / gaps if gaps else math.nan), batch, q1 - q0, duration
