"""The serving ranking as a table (ms, GiB and tokens/s at the edge) or as JSON (SI units)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from planner.figures import rate, seconds
from planner.render import relative_band_cell
from planner.schemas.base import GIB_BYTES
from planner.serving.disagg import REPLAYED_TPOT_FLOOR
from planner.serving.layout import layout_text
from planner.serving.schemas import ServeCandidate, ServeRanking, ServeRequest
from planner.serving.search import REPLAY_MIN_REQUESTS

SIDE_BY_SIDE_RATIO = 1.2
"""A pipelined #1 whose steady-state TPOT is this much above its closed loop's says why (a judgement:
the closed loop's own spread is a few percent)."""


def _side_by_side_note(best: ServeCandidate, req: ServeRequest) -> str:
    """Where #1 is a pipeline (pp > 1) replayed as a closed loop of equal requests and its steady
    state's TPOT is well above the replay's: the loop's requests arrive and finish together, so its
    pp micro-batches fill side by side and each prompt wave runs apart from the decode, which
    requests arriving apart do not (a review, 2026-12-07: 70B on one DGX H100 ranked 1 x TP2 x PP4
    first at 580 tokens/s per GPU, TPOT 126 ms, where at a request rate the same layout sustains 5.68
    req/s, 363 tokens/s per GPU, about its steady state's 204 ms)."""
    pp = int(best.config.get("pp", 1))  # type: ignore[call-overload]
    steady, tpot = best.steady_state_tpot_s, best.tpot_s
    if req.request_rate is not None or req.concurrency is not None or pp < 2 or steady is None or tpot is None:
        return ""
    if steady < SIDE_BY_SIDE_RATIO * tpot:
        return ""
    return (
        f"; #1's {pp} pipeline micro-batches fill side by side in a closed loop of equal requests (as trtllm-bench "
        "runs one), which requests arriving apart do not: for them expect about the steady state, and price a "
        "load with --request-rate"
    )


def layout_label(c: ServeCandidate) -> str:
    cfg = c.config
    split = cfg.get("prefill_decode_split")
    decode = layout_text(
        int(cfg["replicas"] if not isinstance(split, dict) else split["decode_replicas"]),  # type: ignore[arg-type]
        int(cfg["tp"]),  # type: ignore[arg-type]
        int(cfg["pp"]),  # type: ignore[arg-type]
        int(cfg["ep"]),  # type: ignore[arg-type]
        bool(cfg["attention_dp"]),
    )
    if isinstance(split, dict):
        return f"P: {prefill_text(split)} | D: {decode}"
    return decode


def prefill_text(split: dict[str, int | bool]) -> str:
    """A disaggregated split's prefill pool as the table names it: '4x tp2 pp1'."""
    return layout_text(
        int(split["prefill_replicas"]),
        int(split["prefill_tp"]),
        int(split["prefill_pp"]),
        int(split.get("prefill_ep", 1)),
        bool(split.get("prefill_attention_dp", False)),
    )


def batch_text(batch: float) -> str:
    """A replica's batch as the table shows it: whole where it is (a replayed time mean of
    47.99999999999954 is 48), else to two figures below ten (1.5 for 12 in flight over 8 replicas,
    which a whole number had shown as 2)."""
    if abs(batch - round(batch)) < 1e-6 or batch >= 10:
        return f"{batch:.0f}"
    return f"{batch:.2g}"


def print_serve_ranking(console: Console, ranking: ServeRanking) -> None:
    req = ranking.request
    head = (
        f"{ranking.model} on {ranking.cluster} ({ranking.num_gpus} GPUs), {ranking.engine}, "
        f"ISL {req.input_len} / OSL {req.output_len}, weights {req.weights_dtype}, KV {req.kv_dtype}"
    )
    if ranking.mamba_ssm_dtype:
        head += f", SSM state {ranking.mamba_ssm_dtype}"
    console.print(head)
    for w in ranking.warnings:
        console.print(f"warning: {w}")
    if not ranking.candidates:
        console.print(f"no candidate: {ranking.reason}")
        return
    priced = ranking.candidates[0].cost_per_million_output_tokens_usd is not None
    table = Table(show_lines=False)
    for col in (
        "#",
        "layout",
        "batch",
        "TTFT ms",
        "TPOT ms",
        "tok/s/GPU",
        "tok/s/user",
        "max conc",
        "GiB/GPU W+KV+act+rt",
        *(["$/Mtok"] if priced else []),
    ):
        table.add_column(col, justify="left" if col == "layout" else "right", no_wrap=col != "layout")
    for i, c in enumerate(ranking.candidates, 1):
        m = c.memory_breakdown_bytes
        mem = (
            f"{c.memory_per_gpu_bytes / GIB_BYTES:.0f}={m.weights / GIB_BYTES:.0f}+{m.kv_cache / GIB_BYTES:.0f}"
            f"+{m.activations / GIB_BYTES:.1f}+{m.runtime / GIB_BYTES:.1f}"
        )
        table.add_row(
            str(i),
            layout_label(c),
            batch_text(c.batch_per_replica),
            f"{c.ttft_s * 1e3:.0f}",
            "-" if c.tpot_s is None else f"{c.tpot_s * 1e3:.1f}",
            rate(c.output_tokens_per_s_per_gpu),
            f"{c.output_tokens_per_s_per_user:.1f}",
            f"{c.max_concurrency:,}",
            mem,
            *([_dollars(c.cost_per_million_output_tokens_usd)] if priced else []),
        )
    console.print(table)
    console.print(
        "columns: layout replicas x tp pp (ep, adp attention data-parallel; P: | D: prefill and decode pools), "
        "batch sequences per replica (replayed: its time mean), TPOT mean inter-token latency, max conc the "
        "sequences the KV room holds over all replicas, at most the engine's max batch a scheduler (vLLM "
        "--max-num-seqs, SGLang --max-running-requests, TensorRT-LLM max_batch_size), GiB/GPU weights + KV "
        "cache + activations + runtime"
        + (
            "; a disaggregated row's batch, max conc and GiB/GPU are its decode pool's"
            if any(isinstance(c.config.get("prefill_decode_split"), dict) for c in ranking.candidates)
            else ""
        )
        + (", $/Mtok per million output tokens at the cluster's price" if priced else "")
    )
    for i, c in enumerate(ranking.candidates, 1):
        if c.equivalent_layouts:
            console.print(f"#{i} is priced the same as {', '.join(c.equivalent_layouts)}")
    console.print(f"why #1 wins: {ranking.candidates[0].why}")
    if untargeted_note := no_target_note(ranking):
        console.print(untargeted_note)
    if "prefill_decode_split" in ranking.candidates[0].config:  # the pools and the KV's move, in the candidate's words
        for note in ranking.candidates[0].warnings:
            console.print(f"#1: {note}")
    for line in band_lines(ranking):
        console.print(line)
    best = ranking.candidates[0]
    if best.replayed:
        if req.request_rate is not None:
            load = f"at {req.request_rate:g} req/s: Poisson arrivals"
        elif req.concurrency is not None:
            load = (
                f"at {req.concurrency} requests in flight over the replicas (batch: a replica's mean), each finished "
                "one sending the next"
            )
        else:
            chosen = (
                "the largest batch of the grid whose replay meets the targets"
                if req.ttft_s is not None or req.tpot_s is not None
                else "no target: the largest batch that fits"
            )
            load = (
                "at each layout's batch on every replica, in a closed loop (each finished request sends the next; "
                f"{chosen}, or the batch the engine ran where its token budget queued the rest)"
            )
        console.print(
            f"TTFT, TPOT (mean inter-token latency) and batch replayed {load} through the engine's admission and "
            f"token budget, the middle half of at least {REPLAY_MIN_REQUESTS:,} requests per replica measured; #1's "
            f"steady-state estimate was TTFT {best.steady_state_ttft_s * 1e3:.0f} ms"  # type: ignore[operator]
            + ("" if best.steady_state_tpot_s is None else f", TPOT {best.steady_state_tpot_s * 1e3:.1f} ms")
            + _side_by_side_note(best, req)
        )
    elif req.request_rate is not None or req.concurrency is not None:
        console.print(
            "TTFT and TPOT at the steady state of the offered load, the TTFT with the wait for admission by Little's "
            "law (a disaggregated plan is replayed at a request rate only: a closed loop through two pools is not)"
        )
    kv = ranking.candidates[0].kv_cache_bytes_per_token
    console.print(
        f"KV cache {kv / 1024:.1f} KiB per token; {ranking.feasible} "
        f"{'layout meets' if ranking.feasible == 1 else 'layouts meet'} the targets "
        f"({ranking.considered} layout x batch points priced"
        + (
            f"; {ranking.unreplayed} more not replayed: "
            + (
                "their decode pools' TPOT, at least "
                f"{REPLAYED_TPOT_FLOOR:g} of their steady rounds', cannot reach the top {ranking.request.top})"
                if ranking.request.disaggregate
                else f"their throughput, bounded by rounds of decode alone, cannot reach the top {ranking.request.top})"
            )
            if ranking.unreplayed
            else ")"
        )
    )


def no_target_note(ranking: ServeRanking) -> str | None:
    """Without a latency target or a load, what #1's largest batch costs each user, and how to ask
    for interactive serving (a review: DeepSeek-V3 on two DGX H200 ranked first a batch of 8,032 at a
    TTFT of 6.1 s and 1.9 tokens/s per user, with nothing on the first screen saying a target
    changes that); None where a target or a load was given."""
    req = ranking.request
    if any(x is not None for x in (req.ttft_s, req.tpot_s, req.request_rate, req.concurrency)):
        return None
    best = ranking.candidates[0]
    return (
        f"no target: ranked by throughput at each layout's largest batch, so #1's users wait {seconds(best.ttft_s)} "
        f"for a first token and get {best.output_tokens_per_s_per_user:.1f} tokens/s each; for interactive serving "
        "give --tpot-ms (50 ms is 20 tokens/s a user) and --ttft-ms, or the load with --request-rate or --concurrency"
    )


def ranking_json(ranking: ServeRanking) -> dict[str, Any]:
    return ranking.model_dump(mode="json")


def _dollars(usd: float | None) -> str:
    """A cost as the table shows it: cents below a million, three figures above (a trickle of one
    request in 1e300 s costs 4e298 dollars per million tokens, whose 300 digits squeezed every
    other column of the table to nothing)."""
    if usd is None:
        return "-"
    return f"{usd:,.2f}" if usd < 1e6 else f"{usd:.3g}"


def band_lines(ranking: ServeRanking) -> list[str]:
    """#1's error bars, one line each: where published runs priced like it landed (the central 80%
    of ``ServeRanking.interval_basis``); one engine on one GPU gives every row the same relative
    band, so they are shown once."""
    best = ranking.candidates[0]
    shown = (
        ("throughput", "tok/s/GPU", best.output_tokens_per_s_per_gpu, best.output_tokens_per_s_per_gpu_interval, rate),
        ("ttft", "TTFT", best.ttft_s, best.ttft_s_interval, seconds),
        ("tpot", "TPOT", best.tpot_s, best.tpot_s_interval, seconds),
    )
    lines = []
    for metric, label, value, band, text in shown:
        if band is None or value is None:
            continue
        lines.append(
            f"band {label}: published runs priced at #1's {text(value)} measured {text(band[0])} to {text(band[1])} "
            f"({relative_band_cell(value, band)}): the central 80% of {ranking.interval_basis[metric]}"
        )
    if lines:
        lines.append("every row has the same relative bands")
    if ranking.request_path_s > 0:
        lines.append(
            f"TTFT holds {ranking.request_path_s * 1e3:.1f} ms of a request's path through the server (HTTP/gRPC, "
            "tokenizer, detokenizer, queue hand-off), fitted to the TTFTs of TensorRT-LLM's Triton online-serving "
            "table, the published rows measured through a server numerous enough to fit (other engines' servers "
            "borrow it, an estimate; ARCHITECTURE.md 9.7)"
        )
    if best.ttft_s_interval is not None or best.tpot_s_interval is not None:
        lines.append(
            "TTFT and TPOT bands come from TensorRT-LLM's batch-1 and online-serving tables (prompts of 128 to "
            "2,048 tokens, a few Llama-class models): at other loads and lengths read them as the direction of "
            "the miss (ARCHITECTURE.md 9.7)"
        )
    return lines
