"""Megatron-Core pipeline layouts: which layers each model chunk holds.

A layout is a list of stages (p*v model chunks in model order; chunk c runs on pipeline rank
c mod p), each a list of layer kinds: 'E' the embedding, 't' a transformer decoder layer, 'm' a
multi-token-prediction layer, 'L' the loss (with the LM head). Megatron-LM writes it as a string,
``--pipeline-model-parallel-layout`` (megatron/core/transformer/pipeline_parallel_layer_layout.py,
PipelineParallelLayerLayout.parse_str_to_list and validate_layer_layout, stored at 00caa53a):
stages separated by '|', ``x*n`` repeating a kind, ``(...)*n`` repeating a group of stages or
kinds, commas purely cosmetic; e.g. DeepSeek-V3's ``Et*3|(tt|)*29,m|L`` (61 layers, one MTP
layer, 32 chunks).

``parse_layout`` and ``format_layout`` round-trip; ``check_layout`` applies Megatron's rules for
a model and a pipeline size, each failure one line naming the rule.
"""

from __future__ import annotations

import re

from planner.errors import PlannerError

LAYER_KINDS = {"E": "embedding", "t": "decoder", "m": "mtp", "L": "loss"}
"""Megatron's layer characters (parse_str_to_list's char2layer_type)."""

_GROUP = re.compile(r"\(([^()]+)\)\*(\d+)")
_REPEAT = re.compile(r"(.)\*(\d+)")

MAX_LAYOUT_LAYERS = 100_000
"""The most characters (layers and stage breaks) a layout may unroll to: hundreds of times the
deepest model and pipeline (a few hundred layers, pp x vp in the hundreds), so no real layout is
refused while a mistyped repeat count fails at once instead of filling memory. A bound, not a
measurement."""


def _repeat(text: str, layout: str, times: str) -> str:
    """``text`` repeated ``times`` times, refused past MAX_LAYOUT_LAYERS."""
    if len(times) > 9 or len(text) * int(times) > MAX_LAYOUT_LAYERS:
        raise PlannerError(
            f"pipeline_layout '{layout}': a repetition unrolls to more than {MAX_LAYOUT_LAYERS:,} layers and stage "
            "breaks; repeat counts are layers or stages"
        )
    return text * int(times)


def parse_layout(text: str) -> list[list[str]]:
    """The stages of a layout string, as Megatron unrolls it: commas dropped, every ``(...)*n``
    then every ``x*n`` expanded, split on '|'. Raises PlannerError on a character Megatron does
    not know or on an unbalanced repetition."""
    unrolled = text.replace(",", "").replace(" ", "")
    if not unrolled:
        raise PlannerError(f"pipeline_layout '{text}': empty; give its stages, e.g. 'Et*16|t*16L' for pp 2")
    while _GROUP.search(unrolled):
        unrolled = _GROUP.sub(lambda m: _repeat(m.group(1), text, m.group(2)), unrolled)
        _repeat(unrolled, text, "1")
    unrolled = _REPEAT.sub(lambda m: _repeat(m.group(1), text, m.group(2)), unrolled)
    _repeat(unrolled, text, "1")
    unknown = sorted(set(unrolled) - set(LAYER_KINDS) - {"|"})
    if {"(", ")"} & set(unknown):  # left after the (...)*n groups were expanded
        raise PlannerError(
            f"pipeline_layout '{text}': a parenthesis that does not close a repetition; write each group as "
            "(...)*n, closed, with its count"
        )
    if unknown:
        raise PlannerError(
            f"pipeline_layout '{text}': unknown character(s) {' '.join(unknown)}; allowed E (embedding), "
            "t (decoder layer), m (MTP layer), L (loss), '|' between stages, x*n and (...)*n repetitions"
        )
    return [list(stage) for stage in unrolled.split("|")]


def _stage_text(stage: list[str]) -> str:
    """One stage compactly: runs of a kind as ``x*n``."""
    out, i = [], 0
    while i < len(stage):
        j = i
        while j < len(stage) and stage[j] == stage[i]:
            j += 1
        out.append(stage[i] if j - i == 1 else f"{stage[i]}*{j - i}")
        i = j
    return "".join(out)


def format_layout(stages: list[list[str]]) -> str:
    """A layout string for ``stages`` that ``parse_layout`` reads back to the same stages: each
    stage compactly, runs of two or more identical stages inside as ``(stage|)*n``."""
    texts = [_stage_text(s) for s in stages]
    parts: list[str] = []
    i = 0
    while i < len(texts):
        j = i
        while j < len(texts) and texts[j] == texts[i]:
            j += 1
        run = j - i
        last = j == len(texts)
        if run >= 2 and texts[i] and not last:
            parts.append(f"({texts[i]}|)*{run}")
        elif run >= 3 and texts[i] and last:
            parts.append(f"({texts[i]}|)*{run - 1}{texts[i]}")
        else:
            parts.append("|".join(texts[i:j]) + ("" if last else "|"))
        i = j
    return "".join(parts)


def check_layout(stages: list[list[str]], num_layers: int, pp: int, mtp_layers: int = 0) -> int:
    """Megatron's rules for a layout of a model with ``num_layers`` decoder layers and
    ``mtp_layers`` MTP layers on ``pp`` pipeline ranks (validate_layer_layout and the constructor);
    returns the virtual stages per rank, len(stages) / pp. Raises PlannerError naming the rule."""
    where = f"pipeline_layout of {len(stages)} stages"
    if len(stages) % pp:
        raise PlannerError(f"{where}: the stage count must be a multiple of pp {pp}")
    flat = [kind for stage in stages for kind in stage]
    if not flat or flat[0] != "E" or flat.count("E") != 1:
        raise PlannerError(f"{where}: the embedding 'E' must come first, exactly once")
    if flat[-1] != "L" or flat.count("L") != 1:
        raise PlannerError(f"{where}: the loss 'L' must come last, exactly once")
    if flat.count("t") != num_layers:
        raise PlannerError(f"{where}: {flat.count('t')} decoder layers 't', the model has {num_layers}")
    if flat.count("m") != mtp_layers:
        raise PlannerError(
            f"{where}: {flat.count('m')} MTP layers 'm', the job trains {mtp_layers} (--mtp-layers, default the "
            "model's num_nextn_predict_layers)"
        )
    if "m" in flat and "t" in flat[flat.index("m") :]:
        raise PlannerError(f"{where}: decoder layers must come before the MTP layers")
    return len(stages) // pp


def placement_notes(stages: list[list[str]]) -> list[str]:
    """Where a layout writes the embedding or the loss off its end chunks. Megatron-LM's
    ``validate_layer_layout`` checks only the flattened order, but ``training.get_model`` builds
    the embedding into the first model chunk (``pre_process = is_pipeline_first_stage``) and the
    LM head and loss into the last (``post_process = is_pipeline_last_stage``) whatever the layout
    says; the torchtitan export writes them there too (``ends_placed``). The planner prices them
    there. One line per misplaced kind; none when 'E' is in the first chunk and 'L' in the last."""
    notes = []
    for kind, chunk, where, flag in (("E", 0, "first", "pre_process"), ("L", len(stages) - 1, "last", "post_process")):
        found = next(c for c, stage in enumerate(stages) if kind in stage)
        if found != chunk:
            notes.append(
                f"pipeline_layout writes '{kind}' in model chunk {found + 1} of {len(stages)}, but the "
                f"{LAYER_KINDS[kind]}{' (with the LM head)' if kind == 'L' else ''} runs on the {where} chunk "
                f"(Megatron-LM's training.get_model builds it there by {flag}, whatever the layout says; the "
                f"torchtitan export writes it there), and is priced there; move '{kind}' into the {where} chunk"
            )
    return notes


def ends_placed(stages: list[list[str]]) -> list[list[str]]:
    """``stages`` with the embedding opening the first chunk and the loss closing the last, where
    the model runs them (``placement_notes``); the decoder and MTP layers stay where they are."""
    placed = [[kind for kind in stage if kind not in ("E", "L")] for stage in stages]
    placed[0].insert(0, "E")
    placed[-1].append("L")
    return placed


def rank_layer_counts(stages: list[list[str]], pp: int, kind: str = "t") -> list[int]:
    """Layers of ``kind`` on each pipeline rank: the sum over its chunks c = rank, rank + p, ..."""
    return [sum(stages[c].count(kind) for c in range(rank, len(stages), pp)) for rank in range(pp)]


def layout_rank_layers(text: str, pp: int) -> list[int]:
    """Decoder layers on each pipeline rank of a layout string (``parse_layout``, ``rank_layer_counts``)."""
    return rank_layer_counts(parse_layout(text), pp)


def split_layout(
    num_layers: int,
    pp: int,
    vp: int,
    mtp_layers: int = 0,
    first: int | None = None,
    last: int | None = None,
    embedding: bool = False,
    loss: bool = False,
) -> str:
    """The layout Megatron-LM builds for ``num_layers`` decoder layers on ``pp`` ranks of ``vp``
    chunks each from its split options: ``first``/``last`` decoder layers on the first/last rank
    (--decoder-first/last-pipeline-num-layers, the other ranks splitting the rest evenly), or the
    embedding and the loss counted as one layer each of an even split (--account-for-embedding/
    loss-in-pipeline-split). Megatron-Core 0.16 TransformerConfig.__post_init__ ('Uneven PP' and
    account-for checks) and transformer_block.get_num_layers_to_build: a rank's layers are split
    evenly over its vp chunks, chunk c runs on rank c mod pp, and MTP layers go to the last chunk
    before the loss. Raises PlannerError with the rule Megatron applies, naming the flag."""
    flag = {"first": "--decoder-first-pipeline-num-layers", "last": "--decoder-last-pipeline-num-layers"}
    if pp < 2:
        raise PlannerError(
            "a pipeline split (--decoder-first/last-pipeline-num-layers, --account-for-*) needs --pp >= 2"
        )
    if (first is not None or last is not None) and (embedding or loss):
        raise PlannerError(
            "--decoder-first/last-pipeline-num-layers cannot be given with "
            "--account-for-embedding/loss-in-pipeline-split (Megatron-LM refuses both at once)"
        )
    chunks = pp * vp
    if first is not None or last is not None:
        middle_layers, middle_ranks = num_layers, pp
        for name, count in (("first", first), ("last", last)):
            if count is None:
                continue
            if count % vp:
                raise PlannerError(f"{flag[name]} {count}: must be divisible by the virtual stages {vp}")
            middle_layers -= count
            middle_ranks -= 1
        pinned = f"{flag['first']} / {flag['last']}"
        if middle_layers < 0:
            raise PlannerError(
                f"{pinned}: {num_layers - middle_layers} layers pinned, more than the model's {num_layers} "
                "decoder layers"
            )
        if middle_layers and not middle_ranks:
            raise PlannerError(
                f"{pinned}: {middle_layers} of the model's {num_layers} decoder layers are left over and pp {pp} has "
                "no middle rank to hold them (the pinned counts must add up to the layers)"
            )
        if middle_ranks and not middle_layers:
            rank_s = "rank" if middle_ranks == 1 else "ranks"
            which = "middle" if first is not None and last is not None else "other"  # pp 2, first only: the last
            raise PlannerError(
                f"{pinned}: no decoder layer is left for the {middle_ranks} {which} pipeline {rank_s} (each needs some)"
            )
        per_middle = middle_layers // middle_ranks if middle_ranks else 0
        if middle_ranks and (middle_layers % middle_ranks or per_middle % vp):
            raise PlannerError(
                f"{flag['first']} / {flag['last']}: the {middle_layers} decoder layers left must split evenly over "
                f"{middle_ranks} middle rank(s) of {vp} virtual stage(s) each"
            )
        per_rank = [per_middle] * pp
        if first is not None:
            per_rank[0] = first
        if last is not None:
            per_rank[-1] = last
        counts = [per_rank[c % pp] // vp for c in range(chunks)]
    else:
        total = num_layers + int(embedding) + int(loss)
        if total % chunks:
            raise PlannerError(
                f"--account-for-embedding/loss-in-pipeline-split: {num_layers} decoder layers + {int(embedding)} "
                f"embedding + {int(loss)} loss = {total} must be divisible by pp x virtual stages = {chunks}"
            )
        counts = [total // chunks] * chunks  # at least 1 each: total is a positive multiple of chunks >= 2
        counts[0] -= int(embedding)
        counts[-1] -= int(loss)
    stages = [["t"] * n for n in counts]
    stages[0].insert(0, "E")
    stages[-1] += ["m"] * mtp_layers + ["L"]
    return format_layout(stages)
