"""The online-benchmark replay (planner/serving/replay.py): at a trickle it is the steady-state
round's price, past capacity the requests queue, and a rate row that states its request count is
priced by it (runs.predict)."""

from __future__ import annotations

import numpy as np
import pytest

from planner.catalog import load_cluster, load_model
from planner.serving.engine import load_engine
from planner.serving.layout import Layouts
from planner.serving.replay import replay
from planner.serving.step import Setting, round_cost


def replay_latencies(*args: object) -> tuple[float, float]:
    """(mean TTFT, mean inter-token latency) of a replay of every request, as runs.predict reads it."""
    r = replay(*args)  # type: ignore[arg-type]
    return r.ttft_s, r.itl_s


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
    assert float(first) * (1 - 1e-12) <= itl <= float(last) * (1 + 1e-12)  # to rounding


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


def test_the_measured_window_and_the_load_sustained() -> None:
    """The middle half of the requests at a trickle is each request alone, as the whole run; the
    time-averaged batch is Little's law (rate x time in the engine); a replica past its capacity
    queues ever more, one within it does not."""
    s, lay = _setting()
    whole = replay(s, lay, 512, 64, 8 * 1e-4, 8 * 40)
    middle = replay(s, lay, 512, 64, 8 * 1e-4, 8 * 40, (0.25, 0.75))
    assert middle.ttft_s == pytest.approx(whole.ttft_s, rel=1e-9) and middle.itl_s == pytest.approx(whole.itl_s)
    assert whole.queue_growth == 0.0
    rate = 8 * 2.0  # 2 req/s per replica, far below its capacity
    r = replay(s, lay, 512, 64, rate, 8 * 800, (0.25, 0.75))
    little = rate / 8 * (r.ttft_s + 63 * r.itl_s)
    assert r.running == pytest.approx(little, rel=0.1) and abs(r.queue_growth) < 5
    over = replay(s, lay, 1024, 128, 8 * 400.0, 8 * 800, (0.25, 0.75), draws=1)
    assert over.queue_growth > 0.3 * 400 and over.ttft_s > 10 * r.ttft_s


def test_a_plan_at_a_request_rate_is_replayed() -> None:
    """At 8 req/s of 2K prompts, 70B's layouts on one DGX H100 are priced by the replay of Poisson
    arrivals: whole prompts land in some iterations and stall every running sequence's next token.
    The steady-state round prices the same rounds on the mean (``step.steady_round``: its prompts in
    whole pieces, as many a round as random arrivals bring), at the batch Little's law gives from
    its own estimate, so the two agree to within a third; the plan's figures are the replay's."""
    import planner

    r = planner.serve("llama3-70b", "dgx-h100x1", input_len=2048, output_len=256, request_rate=8.0, top=20)
    assert r.candidates and all(c.replayed and c.sustains_rate for c in r.candidates)
    best = r.candidates[0]
    assert best.steady_state_tpot_s is not None and best.tpot_s != best.steady_state_tpot_s
    # the steady round at the batch of the grid its screen chose (Little's law over its own estimate, a
    # batch at or above the replay's): 2 x TP4 61.2 ms against 61.6 replayed, TP4 x PP2 123.0 against
    # 119.1 (at the fit before each published run was replayed as it ran, 2026-12-07: 82.7 against 64.4
    # and 123.4 against 120.2; 170 before the steady round's pieces bunched as Poisson arrivals bunch them)
    for c in r.candidates:
        assert c.steady_state_tpot_s is not None and 0.98 < c.steady_state_tpot_s / c.tpot_s < 1.35
    assert best.output_tokens_per_s_per_user == pytest.approx(1.0 / best.tpot_s)
    tpots = [c.tpot_s for c in r.candidates]
    assert tpots == sorted(tpots)  # at a fixed rate the lowest TPOT wins
    # and the why line gives the margin over the next, to weigh against the band
    gap = 100 * (tpots[1] / tpots[0] - 1)
    assert f"the next's {tpots[1] * 1e3:.1f} ms is {gap:.1f}% slower: weigh the gap against the TPOT band" in best.why


def _optimistic_steady_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """The steady-state screen at half its TPOT and TTFT: an estimate that lets through layouts the
    replay of the same load finds short (until the steady round took its prompts in whole pieces,
    2026-12-07, it was that optimistic for 70B at 16.86 req/s of 1K / 512 on one DGX H100)."""
    from dataclasses import replace

    import planner.serving.search as search

    real = search.price_colocated

    def optimistic(*args, **kwargs):  # type: ignore[no-untyped-def]
        p = real(*args, **kwargs)
        return replace(p, tpot_s=p.tpot_s / 2, engine_ttft_s=p.engine_ttft_s / 2)

    monkeypatch.setattr(search, "price_colocated", optimistic)


def test_a_layout_the_replay_finds_short_of_the_rate_meets_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The replay is the gate of a rate plan: a layout the steady state lets through is replayed, and
    where its admission queue grows it does not sustain the rate and meets no target. The steady round
    now agrees with the replay (at most 14 req/s of 1K / 512 for 70B on one DGX H100 at the steady
    state, and every layout it lets through keeps up replayed), so an estimate at half its price
    stands in for an optimistic one: at 16.86 req/s the layouts it lets through fall behind replayed,
    at 10 some keep up.
    (Until 2026-12-07 the steady round itself let two layouts through at 16.86 that the replay found
    short; DeepSeek-V3 on two DGX H200 had been this test's case, short in the replay only because the
    replay capped a whole attention-DP replica at one engine's batch, where vLLM schedules each
    rank apart.)"""
    from planner.catalog import load_cluster, load_model
    from planner.serving.schemas import ServeRequest
    from planner.serving.search import _colocated_candidates, enumerate_layouts, setting_for

    model, cluster = load_model("llama3-70b"), load_cluster("dgx-h100x1")

    def candidates(rate: float) -> list:
        req = ServeRequest(input_len=1024, output_len=512, request_rate=rate, weights_dtype="bf16")
        s = setting_for(model, cluster, req)
        return _colocated_candidates(s, enumerate_layouts(model, cluster, s.engine, req), req)[0]

    assert candidates(16.86) == []  # the steady state as priced lets none through
    for c in candidates(13.0):
        assert c.replayed and c.sustains_rate and c.meets_targets
    _optimistic_steady_state(monkeypatch)
    short = candidates(16.86)
    assert len(short) >= 2 and all(c.replayed and not c.sustains_rate and not c.meets_targets for c in short)
    at_10 = candidates(10.0)
    kept = [c for c in at_10 if c.sustains_rate]
    assert kept and all(c.replayed and c.meets_targets for c in kept)
    # those short of the rate wait longer for their first token than those that keep up
    assert min(c.ttft_s for c in short) > 3 * max(c.ttft_s for c in kept)


def test_no_layout_sustaining_the_rate_says_the_replay_is_why(cli, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the layouts the steady state lets through all fall behind replayed, the error says the
    replay is why (with the steady state at half its price, ``_optimistic_steady_state``: 16.86
    req/s of 1K / 512 for 70B on one DGX H100); as priced, the error names the most the steady state
    sustains."""
    args = ("serve", "--model", "llama3-70b", "--cluster", "dgx-h100x1", "--input-len", "1024",
            "--output-len", "512", "--request-rate", "16.86")  # fmt: skip
    r = cli(*args)
    assert r.code == 2 and r.out == "" and "exceeds what any layout sustains at the steady state: at most" in r.err
    _optimistic_steady_state(monkeypatch)
    r = cli(*args)
    assert r.code == 2 and r.out == ""  # no candidate: one error line, as scripts need
    assert "no layout keeps up with it when its arrivals are replayed (" in r.err
    assert "did at the steady-state estimate" in r.err
    monkeypatch.undo()
    # DeepSeek-V3 at 25 req/s on two DGX H200: vLLM schedules each attention-DP rank apart and keeps up
    # (at 30 until 2026-12-07; its steady round, a pipeline's lone prompts passing the stages in turn,
    # now sustains at most 28.7)
    ds = cli("serve", "--model", "deepseek-v3", "--cluster", "dgx-h200x2", "--input-len", "1024", "--output-len",
             "1024", "--request-rate", "25")  # fmt: skip
    assert ds.code == 0, ds.err


def _without_path(c, path_s: float, output_len: int) -> float:  # type: ignore[no-untyped-def]
    """The share of an engine's closed loop (``c``, its TTFT with the server's path) that clients
    holding their slots through that path complete: cycle / (cycle + path), the cycle the engine's."""
    cycle_s = c.ttft_s - path_s + (output_len - 1) * c.tpot_s
    return cycle_s / (cycle_s + path_s)


def test_a_plan_at_a_concurrency_is_a_closed_loop_replay() -> None:
    """64 in flight on one DGX H100: each layout is replayed with its share in flight, each
    finished request sending the next; its throughput is Little's law over the printed figures
    (a client's cycle: its TTFT, the server's request path included, then the output's tokens;
    until 2026-12-07 the path had been left out of the cycle), and where the share
    exceeds a replica's KV room (4 replicas of 16 on room for 8) the wait in the queue is in its
    TTFT."""
    import planner

    r = planner.serve("llama3-70b", "dgx-h100x1", input_len=2048, output_len=256, concurrency=64, top=20)
    assert all(c.replayed and c.sustains_rate is None for c in r.candidates)
    for c in r.candidates:
        replicas = int(c.config["replicas"])
        per_gpu = 64 // replicas * replicas * 256 / (c.ttft_s + 255 * c.tpot_s) / 8
        assert c.output_tokens_per_s_per_gpu == pytest.approx(per_gpu)
    rates = [c.output_tokens_per_s_per_gpu for c in r.candidates]
    assert rates == sorted(rates, reverse=True)
    crowded = [c for c in r.candidates if c.max_concurrency < 64]
    roomy = [c for c in r.candidates if c.max_concurrency >= 64]
    assert crowded and roomy and min(c.ttft_s for c in crowded) > 5 * max(c.ttft_s for c in roomy)


def test_a_latency_target_is_met_on_the_replay_not_the_steady_state() -> None:
    """A 30 ms TPOT target for 70B at ISL 2048 / OSL 512 on one DGX H100 (vLLM): the plan runs the
    largest batch of the grid whose replay meets it, 2 x TP4 at 24 per replica (16 with the fit on
    the steady state's ratio to the waves, sessions 55-57, 24 before it and since the fit takes each
    published run's replay, 2026-12-07), and its figures are that replay's: the same as asking for
    48 in flight on that layout, while 64 in flight (32 per replica, the next batch of the grid)
    misses the target. (Until the steady round took its prompts in whole pieces,
    2026-12-07, the steady state met the target at 48 a replica, 29.0 ms, where the replay, the
    whole 2K prompts landing in single iterations, gave about 37.)"""
    import planner

    kw = {"input_len": 2048, "output_len": 512, "tp": 4, "pp": 1}
    r = planner.serve("llama3-70b", "dgx-h100x1", tpot_s=0.030, **kw)
    (c,) = [c for c in r.candidates if c.config["replicas"] == 2]
    assert c.replayed and c.meets_targets and c.tpot_s <= 0.030
    # the steady state's batch-24 round, 28.7 ms replayed
    assert c.steady_state_tpot_s == pytest.approx(0.0293, abs=5e-4)
    assert c.batch_per_replica == pytest.approx(24.0)
    at = planner.serve("llama3-70b", "dgx-h100x1", concurrency=48, **kw)
    (same,) = [x for x in at.candidates if x.config["replicas"] == 2]
    assert (c.tpot_s, c.ttft_s) == pytest.approx((same.tpot_s, same.ttft_s), rel=1e-12)
    # 48 clients hold their slots through the server's path too: that much fewer requests a second
    assert same.output_tokens_per_s_per_gpu == pytest.approx(
        c.output_tokens_per_s_per_gpu * _without_path(c, at.request_path_s, 512), rel=1e-9
    )
    above = planner.serve("llama3-70b", "dgx-h100x1", concurrency=64, **kw)
    (more,) = [x for x in above.candidates if x.config["replicas"] == 2]
    assert more.tpot_s > 0.030
    full = planner.serve("llama3-70b", "dgx-h100x1", **kw)  # without a target: the replay at capacity
    (top,) = [x for x in full.candidates if x.config["replicas"] == 2]
    assert top.replayed and top.meets_targets and top.batch_per_replica > 200


def test_without_a_target_the_maximum_throughput_is_the_replay_at_capacity() -> None:
    """Without a target a layout runs its largest batch, priced by the replay (what a concurrency of
    that batch replays): 2 x TP1 x PP4 of 70B on one DGX H100 at 2K / 512 comes out at 435 tokens/s
    per GPU (450 before the fit took each published run's replay, 2026-12-07), near the price of
    the offline benchmark's waves the published throughput rows are fitted with (``runs._waves``).
    Its steady round prices random arrivals, a piece or two a round, each pass of a lone prompt
    through the 4 stages in turn (``step.steady_round``); the closed loop's
    requests of one length finish and are replaced together, so their prompts fill the micro-batches
    side by side, and the replay comes out about 1.6 times the steady state. (Until 2026-12-07 the steady
    round shared the prompts over every round and micro-batch, so a pipeline's prompts hid under its
    decode's weight reads: 642 tokens/s per GPU, ranked second, TP1 x PP8 first at 644, replayed 535.)"""
    import planner
    from planner.serving.runs import _waves
    from planner.serving.schemas import ServeRequest
    from planner.serving.search import resolve_request, setting_for

    kw = {"input_len": 2048, "output_len": 512, "tp": 1, "pp": 4}
    (c,) = [x for x in planner.serve("llama3-70b", "dgx-h100x1", **kw).candidates if x.config["replicas"] == 2]
    assert c.replayed and c.output_tokens_per_s_per_gpu == pytest.approx(435, rel=0.03)
    batch = 200  # the KV room per replica, which the closed loop keeps in flight
    at = planner.serve("llama3-70b", "dgx-h100x1", concurrency=2 * batch, **kw)
    (same,) = [x for x in at.candidates if x.config["replicas"] == 2]
    assert same.output_tokens_per_s_per_gpu == pytest.approx(
        c.output_tokens_per_s_per_gpu * _without_path(c, at.request_path_s, 512), rel=1e-9
    )
    model, cluster = load_model("llama3-70b"), load_cluster("dgx-h100x1")
    s = setting_for(model, cluster, resolve_request(model, ServeRequest(**kw)))
    cost, tokens = _waves(s, Layouts.of(1, 4, 1, False, 2), batch, 4 * batch, 2048, 512)
    waves = tokens / float(cost.total_s(s.params)[0]) / 4
    assert c.output_tokens_per_s_per_gpu == pytest.approx(waves, rel=0.06)
    steady = c.steady_state_tpot_s
    assert steady is not None and batch / steady / 4 < 0.7 * c.output_tokens_per_s_per_gpu  # 270 against 437


def test_a_rate_so_low_the_clock_reaches_1e15_s_prices_a_trickle() -> None:
    """At 1e-12 req/s the arrivals lie about 1e12 s apart and reach 1e15 s, where a double resolves
    only 0.125 s; the replay's clock restarts at each arrival to an idle engine, so each request
    is priced alone, as at any trickle (the gaps came out 0 before, and TPOT a division by 0)."""
    s, lay = _setting()
    fast = replay_latencies(s, lay, 512, 64, 8 * 1e-4, 8 * 20)
    slow = replay_latencies(s, lay, 512, 64, 8 * 1e-12, 8 * 20)
    assert slow == pytest.approx(fast, rel=1e-12)


def test_a_concurrency_far_beyond_the_room_only_queues() -> None:
    """70B on one DGX H100, TP4 x PP2 (KV room for 601): 1,200 in flight are replayed whole; at 5,000
    the engine is as saturated, so its throughput is the same and each extra request waits its
    turn at the rate the engine completes them (before, Little's law over a replay of only the
    first 1,600 made the throughput grow with N: 1,644 tokens/s per GPU at 5,000, against a
    ceiling of about 540)."""
    import planner

    kw = {"input_len": 2048, "output_len": 512, "tp": 4, "pp": 2}
    (whole,) = planner.serve("llama3-70b", "dgx-h100x1", concurrency=1200, **kw).candidates
    (queued,) = planner.serve("llama3-70b", "dgx-h100x1", concurrency=5000, **kw).candidates
    assert queued.output_tokens_per_s_per_gpu == pytest.approx(whole.output_tokens_per_s_per_gpu, rel=1e-4)
    completions_per_s = whole.output_tokens_per_s_per_gpu * 8 / 512
    assert queued.ttft_s - whole.ttft_s == pytest.approx((5000 - 1200) / completions_per_s, rel=1e-3)
    assert whole.output_tokens_per_s_per_gpu == pytest.approx(544.7, abs=0.5)


@pytest.mark.parametrize(("chunked", "osl"), [(True, 64), (False, 64), (True, 1)])
def test_requests_booked_alone_match_stepping_through_them(chunked: bool, osl: int) -> None:
    """``_Engine.alone`` books a request that arrives to an idle engine and is done before the next
    arrival without stepping through its iterations; at a rate where some requests run alone and
    others overlap, every figure equals the iteration loop's (a synthetic price: 5 ms, plus 0.1 ms
    a decoding sequence and 20 us a prompt token, and the context's 1 us a token)."""
    from planner.serving.replay import _Engine

    def price(decoding: int, prompt_tokens: int, context: float) -> float:
        return 5e-3 + 1e-4 * decoding + 2e-5 * prompt_tokens + 1e-6 * round(context / 32) * 32

    stepped = _Engine(16, 2048, 1024 if chunked else 512, chunked, 512, osl, price, alone_shortcut=False)
    booked = _Engine(16, 2048, 1024 if chunked else 512, chunked, 512, osl, price)
    alone_s = sum(booked.alone)
    assert booked.alone[0] == pytest.approx(5e-3 + 2e-5 * 512 + 1e-6 * 512, rel=1e-12)  # one prefill
    arrivals = np.cumsum(np.random.default_rng(0).exponential(alone_s, 400)).tolist()
    gaps = np.diff(arrivals)
    assert 0.2 < np.mean(gaps >= alone_s) < 0.6  # some alone, some overlapping
    for window in ((0, 400), (100, 300)):
        want = stepped.run(list(arrivals), 400, *window)
        got = booked.run(list(arrivals), 400, *window)
        assert got == pytest.approx(want, rel=1e-9, nan_ok=True)


def test_an_attention_dp_replica_is_replayed_one_rank_at_a_time_where_each_schedules_apart() -> None:
    """vLLM runs an engine per attention-DP rank, each with its own max batch and token budget: the
    replay of DeepSeek-V3 at TP 4 x PP 2 with attention DP and 2,000 sequences in flight had capped
    the replica at one engine's 1,024 and one 8,192-token budget (a TTFT of a minute against the
    steady state's quarter of a second); SGLang's one scheduler keeps the replica's cap."""
    import planner

    r = planner.serve("deepseek-v3", "dgx-h200", tp=4, pp=2, attention_dp=True, concurrency=2000, top=1)
    best = r.candidates[0]
    assert best.replayed and best.batch_per_replica > 1024 and best.ttft_s < 10.0
    one = planner.serve("deepseek-v3", "dgx-h200", tp=4, pp=2, attention_dp=True, concurrency=2000, top=1,
                        engine="sglang").candidates[0]  # fmt: skip
    assert one.max_concurrency <= 1024


@pytest.mark.parametrize(
    "request_kwargs",
    [
        {"tpot_s": 0.03},  # targets without a load: the closed-loop replay at each layout's batch
        {"request_rate": 4.0},  # Poisson arrivals
        {"concurrency": 64},  # a closed loop, Little's law over the replay
        {"disaggregate": True, "tpot_s": 0.03},  # prefill and decode pools, not replayed
        {"disaggregate": True, "request_rate": 2.0},  # each pool replayed (disagg.replayed_split)
    ],
)
def test_every_ttft_plan_serve_gives_holds_the_server_path_once(monkeypatch, request_kwargs) -> None:
    """The request path (``FittedParameters.request_path_ms``) is a client's: plan serve adds it once
    to every TTFT, steady state, replayed, at a concurrency or disaggregated, and to nothing else (a
    request on it holds no slot of the engine: the same batch and TPOT without it). A throughput
    changes with it only at a concurrency, whose clients hold their slots through it (the loop's
    cycle is longer by it)."""
    import planner
    from planner.serving.engine import EngineProfile

    shipped = EngineProfile.parameters

    def without_path(self: EngineProfile, architecture: str | None):  # type: ignore[no-untyped-def]
        return shipped(self, architecture).model_copy(update={"request_path_ms": 0.0})

    args = ("llama3-70b", "dgx-h100x1")
    kwargs = {"input_len": 2048, "output_len": 256, "top": 20} | request_kwargs
    served = planner.serve(*args, **kwargs)
    path_s = served.request_path_s
    assert path_s == pytest.approx(6.927e-3, rel=1e-3)  # the shipped fit (engines/trtllm.yaml, borrowed by vllm)
    monkeypatch.setattr(EngineProfile, "parameters", without_path)
    engine = planner.serve(*args, **kwargs)
    assert engine.request_path_s == 0.0 and len(served.candidates) == len(engine.candidates) > 0
    for c, e in zip(served.candidates, engine.candidates, strict=True):
        assert c.config == e.config
        assert c.ttft_s - e.ttft_s == pytest.approx(path_s, rel=1e-9)
        if c.steady_state_ttft_s is not None:
            assert c.steady_state_ttft_s - e.steady_state_ttft_s == pytest.approx(path_s, rel=1e-9)  # type: ignore[operator]
        assert (c.tpot_s, c.batch_per_replica) == (e.tpot_s, e.batch_per_replica)
        if "concurrency" in request_kwargs:
            share = _without_path(c, path_s, 256)
            assert c.output_tokens_per_s_per_gpu == pytest.approx(e.output_tokens_per_s_per_gpu * share, rel=1e-3)
            assert share < 1.0
        else:
            assert c.output_tokens_per_s_per_gpu == e.output_tokens_per_s_per_gpu


def test_a_closed_loop_beyond_the_token_budget_is_replayed_at_what_the_engine_ran() -> None:
    """An iteration's token budget admits the prompts of about max_num_batched_tokens x osl / (isl +
    osl) running sequences a scheduler; a loop of more at the KV room only queues the rest, whose
    wait the TTFT holds (12 s here). The candidate is the replay at the batch the engine ran: the
    same throughput, a TTFT without the queue. (DeepSeek-V3 at TP4 x PP4 on two DGX H200 had been the
    case, until each of a round's pipeline micro-batches got a budget of its own, 2026-12-07: its
    four budgets admit the whole KV room.)"""
    import planner

    kw = {"engine": "trtllm", "tp": 2, "pp": 1, "ep": 2, "attention_dp": False, "top": 1}
    (full,) = planner.serve("gpt-oss-120b", "dgx-b200x1", concurrency=8192, **kw).candidates
    (best,) = planner.serve("gpt-oss-120b", "dgx-b200x1", **kw).candidates
    assert full.batch_per_replica == pytest.approx(1536, rel=0.01) and full.ttft_s > 5
    assert best.max_concurrency == 8192 and best.batch_per_replica == pytest.approx(1536, rel=0.01)
    assert best.ttft_s < 1.0
    assert best.output_tokens_per_s_per_gpu == pytest.approx(full.output_tokens_per_s_per_gpu, rel=0.01)
    # and says why it ran fewer than its KV room: the budget admits the prompts of about 8,192 x 512 /
    # 2,560 = 1,638 (whole prompts of 2,048: 1,536 ran), and names TensorRT-LLM's own flag
    (note,) = best.warnings
    assert note.startswith("ran 1,536 of the 2,048 sequences in flight a replica: trtllm's token budget of")
    assert "about 1,638 running sequences" in note and "beside at most 6,144 decode tokens" in note
    assert "(--max_num_tokens, which --export writes)" in note and note.endswith("or chunked prefill runs more")


def test_fewer_in_flight_than_replicas_leave_replicas_idle() -> None:
    """N in flight over R replicas: N mod R of them hold ceil(N / R), the rest floor(N / R). At 1 in
    flight, 8B on one DGX H100 as 8 replicas of TP1 runs one request on one of them: its tokens over
    the 8 GPUs (every replica had been given one, 121 tokens/s per GPU for 1 user's 122); at 12, four
    replicas hold 2 and four hold 1."""
    import planner

    def eight(n: int):  # the 8 x TP1 layout at n in flight
        r = planner.serve("llama3-8b", "dgx-h100x1", concurrency=n, tp=1, pp=1, top=1)
        return r.candidates[0], r.request_path_s

    one, _ = eight(1)
    assert one.config["replicas"] == 8 and one.batch_per_replica == pytest.approx(1 / 8, rel=1e-6)
    a_request_s = one.ttft_s + 511 * one.tpot_s  # a client's cycle: the server's path too
    assert one.output_tokens_per_s_per_gpu == pytest.approx(512 / a_request_s / 8, rel=1e-6)
    assert one.output_tokens_per_s_per_gpu < one.output_tokens_per_s_per_user / 7
    twelve, _ = eight(12)
    assert twelve.batch_per_replica == pytest.approx(1.5, rel=1e-3)
    # four replicas at 2 in flight and four at 1: half of 16 in flight's tokens and half of 8's
    sixteen, _ = eight(16)
    eight_in_flight, _ = eight(8)
    half_and_half = (sixteen.output_tokens_per_s_per_gpu + eight_in_flight.output_tokens_per_s_per_gpu) / 2
    assert twelve.output_tokens_per_s_per_gpu == pytest.approx(half_and_half, rel=1e-9)


def test_a_lone_prompt_passes_the_pipeline_stages_in_turn() -> None:
    """One 2K prompt of Llama-3.1 405B (fp8) on TP1 x PP8 runs in one micro-batch through the 8
    stages one after another: its replayed TTFT is its pass (the steady state's first token, 1.5 s),
    not the prompt spread over the stages at once (0.22 s, under the FLOP floor of 0.84 s at the fp8
    peak); on fewer GPUs at a time than TP8, slower than TP8's. 8B on TP1 x PP2 is no faster than on
    TP1."""
    import planner

    r = planner.serve("llama3.1-405b", "dgx-h100x1", weights_dtype="fp8", concurrency=1, top=10)
    by = {(c.config["tp"], c.config["pp"]): c for c in r.candidates}
    pipeline, tensor = by[(1, 8)], by[(8, 1)]
    flops = 2 * 405e9 * 2048  # the weights' FLOPs alone, every layer once
    assert pipeline.ttft_s > flops / 1979e12  # one H100's dense fp8 peak at a time
    assert pipeline.ttft_s == pytest.approx(pipeline.steady_state_ttft_s, rel=0.05)
    assert pipeline.ttft_s > 3 * tensor.ttft_s
    small = {
        (c.config["tp"], c.config["pp"]): c for c in planner.serve("llama3-8b", "dgx-h100x1", concurrency=1).candidates
    }
    assert small[(1, 2)].ttft_s >= small[(1, 1)].ttft_s


def test_a_rate_plan_says_how_few_gpus_keep_up() -> None:
    """At a request rate every layout that keeps up serves the same tokens per GPU of the cluster; the
    capacity planner's question is how few GPUs would. Each candidate carries the fewest replicas of
    its layout that keep up at the steady state, and #1's why names the fewest GPUs of any: 8B at 2
    req/s on one DGX H100 ranks TP8 first (the lowest TPOT) and needs 1 GPU, which its own replay on
    one GPU confirms."""
    import planner

    r = planner.serve("llama3-8b", "dgx-h100x1", request_rate=2, top=20)
    assert all(c.replicas_for_rate is not None and c.replicas_for_rate >= 1 for c in r.candidates)
    best = r.candidates[0]
    assert best.config["tp"] == 8 and best.replicas_for_rate == 1
    assert (
        "the fewest GPUs that keep up with the rate at the steady state: 1 (1x tp1 pp1; #1's layout on 8;" in best.why
    )
    (alone,) = planner.serve("llama3-8b", load_cluster("dgx-h100", gpus=1), request_rate=2).candidates
    assert alone.replayed and alone.sustains_rate and alone.meets_targets
    # and at 16 req/s one TP1 replica no longer keeps up
    busier = planner.serve("llama3-8b", "dgx-h100x1", request_rate=16, top=20)
    by = {(c.config["tp"], c.config["pp"]): c.replicas_for_rate for c in busier.candidates}
    assert by[(1, 1)] > 1


def test_a_lone_prompt_on_each_attention_dp_rank_passes_the_stages_in_turn() -> None:
    """Under attention DP each rank holds whole prompts, so a round's piece is a rank's: one 2K prompt
    on each of DeepSeek-V3's 8 ranks takes about as long at PP 2 as at PP 1 (a review: priced on the
    replica's prompt tokens, PP 2 had come out at half of PP 1's round, 219 against 424 ms)."""
    from planner.serving.schemas import ServeRequest
    from planner.serving.search import resolve_request, setting_for
    from planner.serving.step import round_cost

    model, cluster = load_model("deepseek-v3"), load_cluster("dgx-h200x2")
    s = setting_for(model, cluster, resolve_request(model, ServeRequest(engine="trtllm")))
    lay = Layouts.of(8, [1, 2], 8, True)
    rounds = round_cost(s, lay, np.zeros(2), np.zeros(2), np.full(2, 8 * 2048.0), 2048).total_s(s.params)
    assert rounds[1] > 0.9 * rounds[0]
    # two prompts on each rank fill both micro-batches: about the same round at PP 2 as one prompt
    two = round_cost(s, lay, np.zeros(2), np.zeros(2), np.full(2, 16 * 2048.0), 2048).total_s(s.params)
    assert two[1] < 1.2 * rounds[1] and two[0] > 1.8 * rounds[0]


def test_attention_dp_ranks_take_their_share_of_a_concurrency() -> None:
    """An engine that schedules each attention-DP rank apart gets the N in flight over its ranks:
    DeepSeek-V3 with TensorRT-LLM at TP8 with attention DP on one DGX H200 at 1 in flight runs one
    rank (batch 1), where every rank had run one; and that rank runs its rounds alone, without the
    other ranks' tokens in the experts' GEMMs and all-to-alls, so its request finishes sooner than
    each of 8 in flight does (until 2026-12-07 it was replayed beside them: exactly an eighth)."""
    import planner

    kw = {"engine": "trtllm", "tp": 8, "attention_dp": True, "top": 1}
    (one,) = planner.serve("deepseek-v3", "dgx-h200x1", concurrency=1, **kw).candidates
    (eight,) = planner.serve("deepseek-v3", "dgx-h200x1", concurrency=8, **kw).candidates
    assert one.batch_per_replica == pytest.approx(1.0, rel=1e-6) and eight.batch_per_replica == pytest.approx(8.0)
    assert eight.output_tokens_per_s_per_gpu / 8 < one.output_tokens_per_s_per_gpu < eight.output_tokens_per_s_per_gpu
    assert one.ttft_s < eight.ttft_s and one.tpot_s < eight.tpot_s
