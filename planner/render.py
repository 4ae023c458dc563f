"""Human output: rich tables for estimates, rankings and catalog entries. Only renders; never
computes a figure the engine did not produce."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table

from planner.cost.comm import TIER_NAMES
from planner.cost.memory import headroom_clause, host_offload_capacity_bytes
from planner.error_bar import beyond_calibration, relative_band
from planner.figures import rate
from planner.hf_config import unfamiliar_type_note
from planner.schedules import SCHEDULE_SHAPES
from planner.schemas.base import GIB_BYTES
from planner.schemas.estimate import Estimate
from planner.schemas.hardware import ClusterSpec, HardwareProfile
from planner.schemas.job import JobSpec
from planner.schemas.model import HYBRID_BLOCKS, ModelSpec
from planner.schemas.ranking import RankedEstimate, Ranking

if TYPE_CHECKING:
    from planner.capacity import CapacityReport


def gib(n_bytes: float) -> str:
    return f"{n_bytes / GIB_BYTES:.1f}"


def si(value: float, unit: str) -> str:
    """1.23e12 -> '1.23 T<unit>'."""
    for factor, prefix in ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def duration(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3f} s"
    return f"{seconds * 1e3:.2f} ms"


def days(seconds: float) -> str:
    return f"{seconds / 86400:,.1f} days"


def describe_stack(job: JobSpec, est: Estimate | None = None) -> str:
    """The software the prices assume, in one line; given the ``est`` of one mesh, its TP overlap
    as that mesh runs it (none for a TP group across NVLink domains or without sequence
    parallelism: ``cost.traffic.tp_per_microbatch``)."""
    stack = job.software
    overlap = f"on, {stack.tp_overlap_hidden_fraction:.0%} hidden" if job.tp_overlap else "off"
    if est is not None and job.tp_overlap and est.config.parallel.tp > 1:
        if est.links.tp == "inter_node":
            overlap = "on, but not for this mesh's TP group, which spans NVLink domains"
        elif not est.config.parallel.sequence_parallel:
            overlap = "on, but not for this mesh, which runs no sequence parallelism"
    compiled = "eager"
    if job.compiled:
        compiled = (
            "compiled" if not stack.compiles_loss else f"compiled, loss {'too' if job.loss_compiled else 'eager'}"
        )
    kernel = f"{stack.attention_kernel} attention" if job.flash_attention else "unfused attention"
    return (
        f"{stack.name} ({kernel}, TP overlap {overlap}, gradients reduced in "
        f"{job.gradient_format}, {compiled}; compute slows "
        f"{stack.overlap_slowdown:.0%} while each overlapped collective runs; {mfu_convention(job)})"
    )


def mfu_convention(job: JobSpec) -> str:
    """How the MFU shown counts a causal layer's attention: as the stack's own log does
    (``Stack.causal_model_flops``)."""
    if job.software.causal_model_flops:
        return "MFU counts causal attention at half, as its log does"
    return "MFU counts the full attention square, as its log does"


SYMMETRIC_BAND_POINTS = 2.0
"""A band whose ends sit within this many percentage points of mirror images around the
prediction is shown as ``±half-width``; any other as its two signed ends, so that a band lying
wholly below the prediction (runs priced like it came in slower) never reads as centred on it. A
display choice, not a statistic."""


def band_cell(est: Estimate) -> str:
    """The error bar relative to the prediction: '±14%' where it is about symmetric, else its signed
    ends ('-38..-12%'); '-' without one."""
    return relative_band_cell(est.tokens_per_s_per_gpu, est.tokens_per_s_per_gpu_interval)


def relative_band_cell(value: float, band: tuple[float, float] | None) -> str:
    """``band_cell`` of any prediction and its interval: a training estimate's tokens/s per GPU, a
    serving candidate's output tokens/s per GPU, TTFT or TPOT."""
    if band is None or value <= 0:
        return "-"
    low, high = relative_band(value, band)
    if abs(low + high) <= SYMMETRIC_BAND_POINTS:
        return f"±{(high - low) / 2:.0f}%"
    return f"{low:+.0f}..{high:+.0f}%"


def error_bar_text(est: Estimate) -> str:
    band = est.tokens_per_s_per_gpu_interval
    if band is None:
        return f"none ({est.interval_basis})"
    return f"{rate(band[0])} .. {rate(band[1])} tokens/s per GPU (central 80% of {est.interval_basis})"


def precision_words(job: JobSpec) -> str:
    """The job's matmul format as the header shows it: NVFP4 named, the layers kept in bf16, and
    that MFU is read against the format's own peak (``step.evaluate``)."""
    words = {"fp8": "fp8", "fp4": "fp4 (NVFP4)"}.get(job.dtype)
    if words is None:
        return job.dtype
    tail = f", last {job.bf16_last_layers} layers bf16" if job.bf16_last_layers else ""
    return f"{words}{tail}; MFU of the {job.dtype} peak"


def print_estimate(console: Console, est: Estimate, cluster: ClusterSpec) -> None:
    cfg, job = est.config.parallel, est.config.job
    console.print(f"[bold]{est.config.model}[/] on {cluster.describe()}")
    console.print(
        f"job: global batch {job.batch_size} x seq {job.seq_len} = {job.tokens_per_step:,} tokens/step, "
        f"{precision_words(job)}"
    )
    console.print(f"stack: {describe_stack(job, est)}")
    console.print(f"mesh: {cfg.short()}  (order {cfg.order})")
    summary = Table(show_header=False, box=None)
    summary.add_row("step time", duration(est.step_time_s))
    summary.add_row("throughput", f"{rate(est.tokens_per_s)} tokens/s ({rate(est.tokens_per_s_per_gpu)} per GPU)")
    summary.add_row("error bar", error_bar_text(est))
    summary.add_row(
        "MFU / HFU", f"{est.mfu:.1%} / {est.hfu:.1%}  ({est.model_tflops_per_gpu:.0f} model TFLOP/s per GPU)"
    )
    summary.add_row("micro-batches", f"{est.num_microbatches}, bubble {est.bubble_fraction:.1%}")
    if cfg.pp > 1:
        layers = est.layers_per_stage
        layout = f"; layout {cfg.pipeline_layout}" if cfg.pipeline_layout else ""
        roles = {
            "dualpipev": "rank 0 holds the first and last half-stages: it embeds and runs the LM head and any MTP "
            "layers",
            "dualpipe": "layers per micro-batch, each rank running stages r and p-1-r for one direction each; the "
            "end ranks embed and run the LM head",
        }.get(cfg.schedule, "first also embeds, last runs the LM head and any MTP layers")
        summary.add_row(
            "layers per stage",
            f"{' '.join(map(str, layers))} ({roles}; the slower of the head's rank and the busiest other sets the "
            f"pace{layout})",
        )
    if est.cost_per_step_usd is not None:
        summary.add_row(
            "cost",
            f"${est.cost_per_step_usd:,.2f} per step at ${est.price_per_gpu_hour_usd:.2f} per GPU-hour",
        )
    if est.time_to_train_s is not None:
        cost = "" if est.cost_to_train_usd is None else f", ${est.cost_to_train_usd / 1e6:,.2f} M"
        summary.add_row(
            "time to train",
            f"{days(est.time_to_train_s)} for {job.training_tokens:.3g} tokens{cost} (steady state, no restarts)",
        )
    gpu_fits = est.memory_per_gpu_bytes <= est.memory_usable_bytes
    verdict = "[green]fits[/]" if gpu_fits else "[red]does NOT fit[/]"
    pp = est.config.parallel.pp
    where = ""
    if pp > 1:
        rank = est.memory_peak_rank
        which = f"rank {rank}" if rank is not None else "one between the first and the last, bounded at rank 1's load"
        where = f" (the most loaded of {pp} pipeline ranks: {which})"
    summary.add_row(
        "memory per GPU", f"{gib(est.memory_per_gpu_bytes)} of {gib(est.memory_usable_bytes)} GiB, {verdict}{where}"
    )
    if est.host_offload_bytes_per_gpu:
        host_cap = host_offload_capacity_bytes(cluster)
        verdict = "[green]fits[/]" if est.host_offload_bytes_per_gpu <= host_cap else "[red]does NOT fit[/]"
        summary.add_row(
            "host memory per GPU",
            f"{gib(est.host_offload_bytes_per_gpu)} of {gib(host_cap)} GiB of offloaded activations, {verdict}",
        )
    console.print(summary)

    times = Table(title="step time by term")
    times.add_column("term")
    times.add_column("time", justify="right")
    times.add_column("share", justify="right")
    for term, value in est.time_breakdown_s.model_dump().items():
        times.add_row(term, duration(value), f"{value / est.step_time_s:.1%}")
    for group, value in est.hidden_comm_s.model_dump().items():
        if value > 0:
            times.add_row(f"({group}_comm hidden)", duration(value), "overlapped")
    mem = Table(title="memory on the most loaded GPU")
    mem.add_column("kind")
    mem.add_column("GiB", justify="right")
    for kind, value in est.memory_breakdown_bytes.model_dump().items():
        mem.add_row(kind, gib(value))
    comm = Table(title="communication per GPU per step (the busiest pipeline rank's)")
    comm.add_column("group")
    comm.add_column("size", justify="right")
    comm.add_column("bytes sent", justify="right")
    comm.add_column("link")
    sizes = {"tp": cfg.tp, "pp": cfg.pp, "dp": cfg.dp * cfg.cp, "cp": cfg.cp, "ep": cfg.ep}
    # gradients reduce over dp x cp, as Megatron's do: the row says so where cp > 1
    names = {"dp": "dp x cp"} if cfg.cp > 1 else {}
    links = est.links.model_dump()
    if cfg.expert_tp != cfg.tp and cfg.expert_tp > 1:  # the tp bytes hold the expert layers' TP too
        names["tp"], sizes["tp"] = "tp + expert tp", f"{cfg.tp} / {cfg.expert_tp}"  # type: ignore[assignment]
        links["tp"] = max(links["tp"], links["etp"], key=TIER_NAMES.index)  # the slower of the two
    for group, value in est.comm_bytes_per_gpu.model_dump().items():
        comm.add_row(names.get(group, group), str(sizes[group]), si(value, "B"), links[group])
    console.print(times, mem, comm)
    for warning in est.warnings:
        console.print(f"[yellow]warning:[/] {warning}")


def plain_table_lines(console: Console, table: Table) -> list[str] | None:
    """The lines ``console.print(table)`` writes, for a borderless table of one-line text cells,
    printed without styles (to a pipe or a file, whatever its width: rich cut the band and
    time-to-train cells of a 121-column ranking to '-18..+1…' at the 120 columns a pipe gets;
    on a terminal only where it fits); None for any other table or console, which rich lays out.
    Each column is as wide as its widest cell, justified in a space of padding either side (rich's
    layout of such a table, at a tenth of its ~50 ms)."""
    if (
        console.color_system is not None
        or table.box is not None
        or table.title
        or table.caption
        or not table.show_header
        or table.show_footer
        or table.expand
        or table.width is not None
        or table.min_width is not None
        or table.collapse_padding
        or not table.pad_edge
        or table.leading
        or table.row_styles
        or table.padding != (0, 1, 0, 1)
    ):
        return None
    columns: list[list[str]] = []
    for column in table.columns:
        cells = [column.header, *column.cells]
        plain = all(
            isinstance(cell, str) and cell.count(":") < 2 and not any(ch in cell for ch in "[\n\t\r") for cell in cells
        )
        if (
            not plain
            or column.justify not in ("left", "right")
            or column.width is not None
            or column.min_width is not None
            or column.max_width is not None
            or column.ratio is not None
        ):
            return None
        width = max(cell_len(cell) for cell in cells)
        fill = [" " * (width - cell_len(cell)) for cell in cells]
        if column.justify == "right":
            columns.append([f" {pad}{cell} " for cell, pad in zip(cells, fill, strict=True)])
        else:
            columns.append([f" {cell}{pad} " for cell, pad in zip(cells, fill, strict=True)])
    lines = ["".join(row) for row in zip(*columns, strict=True)]
    if not lines or (cell_len(lines[0]) > console.width and console.is_terminal):
        return None  # a terminal too narrow: rich folds it; a pipe or file takes any width whole
    return lines


def print_table(console: Console, table: Table) -> None:
    """``console.print(table)``, without rich's layout where ``plain_table_lines`` gives its text."""
    lines = plain_table_lines(console, table)
    if lines is None:
        console.print(table)
    else:
        console.out("\n".join(lines), highlight=False)


def recompute_cell(c: RankedEstimate) -> str:
    """The ranking's recompute column: none, sele(ctive), sel+ (selective with a named module
    list), full, f:r (full recompute of the first r layers of each chunk), or o:n (the
    activations of n layers offloaded to host memory instead)."""
    p = c.config.parallel
    if p.offload_layers is not None:
        return f"o:{p.offload_layers}"
    if p.recompute_layers is not None:
        return f"f:{p.recompute_layers}"
    if p.recompute == "selective" and c.config.job.recompute_modules is not None:
        return "sel+"
    return p.recompute[:4]


def ranking_legend(ranking: Ranking) -> str:
    """One line naming the ranking's terse columns (v, Z, recomp, SP, GiB, free, bubble); of the
    recompute codes (``recompute_cell``), those a candidate shows."""
    cells = {recompute_cell(c) for c in ranking.candidates}
    codes = ["sele selective"]
    if "sel+" in cells:
        codes.append("sel+ selective of named modules")
    if any(cell.startswith("f:") for cell in cells):
        codes.append("f:N full on N layers of each chunk")
    if any(cell.startswith("o:") for cell in cells):
        codes.append("o:N N layers' activations offloaded to host")
    usable = gib(ranking.candidates[0].memory_usable_bytes) if ranking.candidates else "?"
    return (
        "columns: v virtual stages per pipeline rank, Z ZeRO stage (1 optimizer, 2 +gradients, 3 +weights sharded), "
        f"recomp {', '.join(codes)}, SP sequence parallel, GiB peak per GPU, free GiB left of {usable} usable"
        f"{headroom_clause(ranking.job)}, {bubble_legend(c.config.parallel.schedule for c in ranking.candidates)}"
    )


def bubble_legend(schedules: Iterable[str]) -> str:
    """How the bubble column is read for the ``schedules`` shown (``ScheduleShape.bubble_text``):
    1F1B and interleaved as (p-1)/(v m+p-1), any other schedule by name."""
    shown = [s for s in SCHEDULE_SHAPES if s in set(schedules)]
    classic = "bubble (p-1)/(v m+p-1)"
    others = [f"{s} {SCHEDULE_SHAPES[s].bubble_text}" for s in shown if s not in ("1f1b", "interleaved-1f1b")]
    if not others:
        return classic
    return (classic + ", " if len(others) < len(shown) else "bubble ") + ", ".join(others)


def print_ranking(console: Console, ranking: Ranking) -> None:
    """Top candidates as one compact table (about 100 columns), then the search's bookkeeping."""
    job = ranking.job
    console.print(f"[bold]{ranking.model}[/] on {ranking.cluster_description}")
    console.print(
        f"job: global batch {job.batch_size} x seq {job.seq_len} = {job.tokens_per_step:,} tokens/step, "
        f"{precision_words(job)}; ranked by {ranking.objective}"
    )
    console.print(f"stack: {describe_stack(job)}")
    table = Table(box=None, padding=(0, 1), header_style="bold")
    for col in (
        "#",
        "tp",
        "pp",
        "dp",
        "cp",
        "ep",
        "mbs",
        "v",
        "Z",
        "recomp",
        "SP",
        "step",
        "tok/s/GPU",
        "band",
        "MFU",
        "GiB",
        "free",
        "bubble",
    ):
        table.add_column(col, justify="left" if col == "recomp" else "right")
    grown = any(c.config.job.batch_size != job.batch_size for c in ranking.candidates)
    if grown:
        table.add_column("batch", justify="right")  # the job allowed the batch to grow
    to_train = ranking.candidates and ranking.candidates[0].time_to_train_s is not None
    costed = to_train and ranking.candidates[0].cost_to_train_usd is not None
    if to_train:
        table.add_column("days", justify="right")
    if costed:
        table.add_column("$M", justify="right")
    # ranked by cost: what a million trained tokens cost at the price (per step / tokens per step)
    per_token = ranking.objective == "cost" and bool(ranking.candidates)
    if per_token:
        table.add_column("$/Mtok", justify="right")
    for c in ranking.candidates:
        p = c.config.parallel
        extra = [str(c.config.job.batch_size)] if grown else []
        if to_train:
            extra.append(f"{(c.time_to_train_s or 0.0) / 86400:,.1f}")
        if costed:
            extra.append(f"{(c.cost_to_train_usd or 0.0) / 1e6:,.2f}")
        if per_token:
            extra.append(f"{(c.cost_per_step_usd or 0.0) / c.config.job.tokens_per_step * 1e6:,.3f}")
        table.add_row(
            str(c.rank),
            str(p.tp),
            str(p.pp),
            str(p.dp),
            str(p.cp),
            str(p.ep),
            str(p.micro_batch_size),
            str(p.virtual_stages),
            str(p.zero_stage),
            recompute_cell(c),
            "y" if p.sequence_parallel else "n",
            duration(c.step_time_s),
            rate(c.tokens_per_s_per_gpu),
            band_cell(c),
            f"{c.mfu:.1%}",
            gib(c.memory_per_gpu_bytes),
            gib(c.memory_usable_bytes - c.memory_per_gpu_bytes),
            f"{c.bubble_fraction:.1%}",
            *extra,
        )
    print_table(console, table)
    if ranking.candidates:
        console.print(ranking_legend(ranking))
    modules = sorted({c.config.job.recompute_modules for c in ranking.candidates if c.config.job.recompute_modules})
    for names in modules:
        console.print(f"sel+: selective recompute of {', '.join(names)} (Megatron --recompute-modules)")
    pruned = ", ".join(f"{k} {v}" for k, v in sorted(ranking.pruned.items(), key=lambda kv: -kv[1])) or "none"
    console.print(f"{ranking.evaluated:,} meshes enumerated, {ranking.feasible:,} feasible; pruned: {pruned}")
    for line in ranking.explanation[:4]:
        console.print(line)
    if ranking.margin_pick is not None:
        console.print(ranking.margin_pick.describe())
    if ranking.fewer_gpus is not None:
        console.print(ranking.fewer_gpus.describe(ranking.num_gpus, ranking.job.batch_size))
    if ranking.candidates:
        console.print(
            "band: where published runs priced like this landed, relative to the prediction (their central 80%): "
            f"{ranking.candidates[0].interval_basis}"
        )
    if ranking.pareto:
        fastest, leanest = ranking.pareto[0], ranking.pareto[-1]
        console.print(
            f"Pareto front of memory vs step time: {len(ranking.pareto)} meshes, from {fastest.mesh} "
            f"({duration(fastest.step_time_s)}, {gib(fastest.memory_per_gpu_bytes)} GiB) to {leanest.mesh} "
            f"({duration(leanest.step_time_s)}, {gib(leanest.memory_per_gpu_bytes)} GiB)"
        )
    same = [c for c in ranking.candidates if c.equivalent_meshes]
    if same:
        console.print(
            f"{sum(len(c.equivalent_meshes) for c in same)} more meshes tie with those shown "
            "(same predicted time and memory); see equivalent_meshes in --json"
        )
    if ranking.candidates:
        best = ranking.candidates[0]
        for warning in best.warnings:
            console.print(f"[yellow]warning (#1):[/] {warning}")


def print_model(
    console: Console, model: ModelSpec, flops_per_token: float, seq_len: int, mtp: int = 0, causal: float | None = None
) -> None:
    c = model.parameter_counts
    table = Table(title=f"{model.name}: {model.description}", show_header=False)
    table.add_row("parameters", f"{c.total / 1e9:.2f} B total, {c.active_per_token / 1e9:.2f} B active per token")
    table.add_row(
        "embedding / LM head",
        f"{c.embedding / 1e9:.3f} B / {c.lm_head / 1e9:.3f} B" + (" (tied)" if model.tie_word_embeddings else ""),
    )
    if model.is_hybrid:
        blocks = ", ".join(f"{model.blocks_of(k)} {what}" for k, what in HYBRID_BLOCKS.items() if model.blocks_of(k))
        table.add_row("layers", f"{model.num_hidden_layers} blocks: {blocks}")
        table.add_row("pattern", model.hybrid_override_pattern or "")
        per_block = {
            "M": f"Mamba-2 {c.mamba_per_layer / 1e6:.1f} M",
            "*": f"attention {c.attention_per_layer / 1e6:.1f} M",
            "-": f"MLP {c.dense_mlp_per_layer / 1e6:.1f} M",
            "E": f"MoE {c.moe_layer / 1e6:.1f} M ({c.moe_layer_active / 1e6:.1f} M active)",
        }
        table.add_row("per block", ", ".join(text for k, text in per_block.items() if model.blocks_of(k)))
        if model.mtp_hybrid_override_pattern:
            table.add_row(
                "MTP modules", f"{model.num_nextn_predict_layers} x '{model.mtp_hybrid_override_pattern}' blocks"
            )
        if model.mamba_inner_size:
            table.add_row(
                "Mamba-2",
                f"{model.mamba_num_heads} heads x {model.mamba_head_dim}, state {model.ssm_state_size}, "
                f"{model.mamba_n_groups} groups, conv {model.mamba_conv_width}, chunk {model.mamba_chunk}",
            )
    else:
        table.add_row(
            "layers", f"{model.num_hidden_layers} ({model.num_moe_layers} MoE, {model.num_dense_layers} dense)"
        )
        # a model of MoE layers alone has no dense layer to size (a review, 2026-12-07: 'dense 222.3 M' for
        # Qwen3-235B-A22B, every layer MoE)
        sizes = [f"dense {c.dense_layer / 1e6:.1f} M"] if model.num_dense_layers else []
        if model.is_moe:
            sizes.append(f"MoE {c.moe_layer / 1e6:.1f} M ({c.moe_layer_active / 1e6:.1f} M active)")
        table.add_row("per layer", ", ".join(sizes))
    table.add_row(
        "hidden / heads / kv heads / head dim",
        f"{model.hidden_size} / {model.num_attention_heads} / {model.num_kv_heads} / {model.head_dim_resolved}",
    )
    activation = f"{'gated' if model.is_gated_mlp else 'plain'} {model.hidden_act}" + (
        f", clamped at {model.swiglu_limit:g} (swiglu_limit)" if model.swiglu_limit else ""
    )
    if model.num_dense_layers or not model.is_moe:
        table.add_row("MLP", f"{activation}, width {model.intermediate_size}")
    else:  # its config's intermediate_size sizes no layer; the experts' width is theirs
        table.add_row("expert MLP", activation)
    windowed = [(model.num_sliding_layers, f"sliding window {model.sliding_window}")]
    windowed.append((model.num_chunked_layers, f"chunked ({model.attention_chunk_size}-token chunks)"))
    kinds = [f"{what} on {n}" for n, what in windowed if n]
    if kinds or model.attention_sinks:
        full = model.num_hidden_layers - model.num_sliding_layers - model.num_chunked_layers
        sinks = ", with sinks" if model.attention_sinks else ""
        table.add_row("attention", ", ".join([f"full on {full} layers", *kinds]) + sinks)
    if model.is_moe:
        table.add_row(
            "experts",
            f"{model.num_experts_total} routed, top-{model.num_experts_per_tok}, width "
            f"{model.expert_intermediate_size}, shared {model.n_shared_experts or 0}"
            + (f", on a {model.moe_latent_size}-wide latent (LatentMoE)" if model.moe_latent_size else ""),
        )
    table.add_row("vocab / max positions", f"{model.vocab_size} / {model.max_position_embeddings}")
    with_mtp = f", {mtp} MTP module{'s' if mtp > 1 else ''}" if mtp else ""
    halved = "" if causal is None else f"; {si(causal, 'FLOP')} with causal attention at half, as Megatron-LM counts"
    if causal is not None and (model.num_sliding_layers or model.num_chunked_layers):
        halved += " (windowed layers here: the keys they attend, where the frameworks' logs count the whole sequence)"
    table.add_row(f"training FLOPs per token (s={seq_len}{with_mtp})", si(flops_per_token, "FLOP") + halved)
    table.add_row("source", model.source)
    if model.notes:
        table.add_row("notes", model.notes)
    if (unfamiliar := unfamiliar_type_note(model)) is not None:
        table.add_row("warning", unfamiliar)
    console.print(table)


def print_cluster(console: Console, cluster: ClusterSpec) -> None:
    gpu = cluster.gpu
    table = Table(title=cluster.describe(), show_header=False)
    table.add_row(
        "GPU",
        f"{gpu.name}: {gpu.hbm_capacity_gib:.1f} GiB of memory at {gpu.hbm_bandwidth_tb_per_s} TB/s, "
        f"{gpu.reserved_memory_gib} GiB reserved",
    )
    table.add_row("peak dense TFLOP/s", ", ".join(f"{k} {v:g}" for k, v in gpu.peak_tflops.items()))
    table.add_row("cluster peak", si(cluster.num_gpus * gpu.peak_flops_per_s("bf16"), "FLOP/s") + " bf16")
    if cluster.gpus_per_host != cluster.gpus_per_node:
        table.add_row(
            "hosts",
            f"{cluster.gpus_per_node // cluster.gpus_per_host} per node of {cluster.gpus_per_host} GPUs each "
            "(one torchrun per host: plan export --launcher)",
        )
    for label, tier in (("intra-node", cluster.intra_node), ("inter-node", cluster.inter_node)):
        domain = f", domain {tier.domain_size_gpus} GPUs" if tier.domain_size_gpus else ""
        table.add_row(
            label,
            f"{tier.name}: {tier.bandwidth_gb_per_s:g} GB/s per GPU per direction "
            f"(busbw {tier.bus_bandwidth_bytes_per_s / 1e9:.0f} GB/s), {tier.latency_us:g} us{domain}, "
            f"in-network reduction: {tier.in_network_reduction}",
        )
    domain = cluster.intra_node.domain_size_gpus
    if domain and cluster.intra_node.job_segment_gpus is not None and cluster.num_gpus > domain:
        held = (
            f"{cluster.fast_domain_gpus}-GPU segment of each {domain}-GPU domain (aligned: block scheduling)"
            if cluster.fast_domain_gpus < domain
            else f"whole {domain}-GPU domains (ranks 0-{domain - 1} share the first)"
        )
        table.add_row("this job's NVLink groups", held)
    if cluster.price_per_gpu_hour_usd:
        table.add_row("price", f"${cluster.price_per_gpu_hour_usd:.2f} per GPU-hour")
    console.print(table)


def print_profiles(console: Console, profiles: list[HardwareProfile]) -> None:
    table = Table(title="hardware profiles (use <name> or <name>x<nodes>, e.g. dgx-h100x16)")
    for col in ("name", "GPU", "GPUs/node", "memory GiB", "bf16 TFLOP/s", "intra GB/s", "inter GB/s"):
        table.add_column(col)
    for p in profiles:
        table.add_row(
            p.name,
            p.gpu.name,
            str(p.gpus_per_node),
            f"{p.gpu.hbm_capacity_gib:.1f}",
            f"{p.gpu.peak_tflops.get('bf16', 0):g}",
            f"{p.intra_node.bandwidth_gb_per_s:g}",
            f"{p.inter_node.bandwidth_gb_per_s:g}",
        )
    console.print(table)


def print_models(console: Console, models: list[ModelSpec]) -> None:
    table = Table(title="models")
    for col in ("name", "aliases", "params (B)", "active (B)", "layers", "hidden", "kind"):
        table.add_column(col)
    for m in models:
        c = m.parameter_counts
        kind = f"MoE {m.num_experts_total}x top-{m.num_experts_per_tok}" if m.is_moe else "dense"
        if m.is_hybrid:
            kind = f"hybrid Mamba-2, {kind}"
        table.add_row(
            m.name,
            ", ".join(m.aliases),
            f"{c.total / 1e9:.1f}",
            f"{c.active_per_token / 1e9:.1f}",
            str(m.num_hidden_layers),
            str(m.hidden_size),
            kind,
        )
    console.print(table)


def _more_nodes_advice(report: CapacityReport, job: JobSpec) -> str:
    """What to change where no count searched meets the deadline: more nodes; where the largest
    counts train no faster than a smaller one, the global batch alone, which caps how many GPUs can
    split it; where the largest count's MFU is under 0.9x the best row's, both (Llama-3.1 405B on
    1,024 DGX H100 at 512 sequences: 47.5% MFU against 56.5% on 64 nodes, where "raise --max-nodes"
    had been the advice)."""
    timed = [r for r in report.rows if r.time_to_train_s is not None]
    if timed:
        fastest = min(timed, key=lambda r: r.time_to_train_s or 0.0)
        batch = f"a global batch of {job.global_batch_size:,} sequences"
        if fastest.nodes < timed[-1].nodes:
            return f"more nodes stop helping past {fastest.nodes} ({batch} splits no further): a larger -B, or --days"
        best = max(timed, key=lambda r: r.mfu or 0.0)
        last = timed[-1]
        if (last.mfu or 0.0) < 0.9 * (best.mfu or 0.0):  # each GPU holds ever less of the batch
            return (
                f"raise --max-nodes, -B ({batch} splits ever thinner: {last.mfu or 0.0:.1%} MFU at {last.nodes} "
                f"nodes against {best.mfu or 0.0:.1%} at {best.nodes}) or --days"
            )
    return "raise --max-nodes or --days"


def print_capacity(console: Console, report: CapacityReport, job: JobSpec) -> None:
    """The node counts tried, with the best mesh, time to train and cost of each."""
    price = report.price_per_gpu_hour_usd
    # a batch grown to a multiple of dp x micro-batch (--max-batch-growth) runs in its own column
    grown = any(r.global_batch_size not in (None, job.batch_size) for r in report.rows)
    asked = f"batch {job.batch_size}" + (" (grown where a row's batch column says)" if grown else "")
    console.print(
        f"[bold]{report.model}[/] on {report.profile} {report.unit}s: {report.training_tokens:.3g} tokens within "
        f"{days(report.deadline_s)}; {asked} x seq {job.seq_len}, stack {report.stack}, "
        f"{precision_words(job)}"
        + (f"; ${price:.2f} per GPU-hour" if price is not None else "; no price (give --price)")
        + f"; {mfu_convention(job)}"
    )
    console.print(
        "days: whole optimizer steps at the steady state, no restarts, checkpoints or evaluation (a lower bound)"
    )
    table = Table(box=None, padding=(0, 1), header_style="bold")
    columns = ("nodes", "GPUs", "best mesh", *(("batch",) if grown else ()), "step", "MFU", "days", "80% band", "$M")
    for col in (*columns, "meets"):
        table.add_column(col, justify="left" if col == "best mesh" else "right")
    fastest_so_far = float("inf")
    dominated = False
    for r in report.rows:
        # a count that trains no faster than a smaller one tried: more GPUs buy nothing there
        slower = r.time_to_train_s is not None and r.time_to_train_s >= fastest_so_far
        if r.time_to_train_s is not None:
            fastest_so_far = min(fastest_so_far, r.time_to_train_s)
        dominated |= slower
        if r.mesh is None:
            table.add_row(str(r.nodes), str(r.gpus), "nothing fits", *[""] * (len(columns) - 3), "no")
            continue
        span = r.time_to_train_s_interval
        table.add_row(
            str(r.nodes),
            str(r.gpus) if r.gpus == r.node_gpus else f"{r.gpus} of {r.node_gpus}",
            r.mesh,
            *((f"{r.global_batch_size:,}",) if grown else ()),
            duration(r.step_time_s or 0.0),
            f"{r.mfu or 0.0:.1%}",
            f"{(r.time_to_train_s or 0.0) / 86400:,.1f}" + ("*" if slower else ""),
            "" if span is None else f"{span[0] / 86400:,.1f}-{span[1] / 86400:,.1f}",
            "" if r.cost_to_train_usd is None else f"{r.cost_to_train_usd / 1e6:,.2f}",
            ("yes" if r.meets_deadline_slow_end else "maybe") if r.meets_deadline else "no",
        )
    console.print(table)
    unfit = [r for r in report.rows if r.mesh is None and r.why_not]
    if unfit:  # the largest count that fits nothing says how far off the smaller ones are
        last = unfit[-1]
        console.print(f"nothing fits on {last.nodes} node{'' if last.nodes == 1 else 's'}: {last.why_not}")
    banded = any(r.time_to_train_s_interval is not None for r in report.rows)
    if banded:
        console.print(
            "80% band: the days at the ends of the best mesh's tokens/s band (published runs priced alike); meets: "
            "yes within the deadline at the band's slow end, maybe at the prediction only (about an even chance: "
            "the prediction sits near the middle of its band)"
        )
    if dominated:
        console.print(
            "*: no faster than a smaller node count tried (the batch splits less evenly over these GPUs, or each "
            "holds too little work): more nodes buy nothing there"
        )
    segment_note = capacity_segment_note(report)
    if segment_note:
        console.print(segment_note)
    if report.answer is None:
        console.print(
            f"no node count up to {report.rows[-1].nodes} meets the deadline; {_more_nodes_advice(report, job)}"
        )
        return
    a = report.answer
    cost = "" if a.cost_to_train_usd is None else f" for ${a.cost_to_train_usd / 1e6:,.2f} M"
    used = a.gpus if a.gpus == a.node_gpus else f"{a.gpus} of their {a.node_gpus}"
    console.print(
        f"answer: {a.nodes} {report.unit}{'' if a.nodes == 1 else 's'} ({used} GPUs) "
        f"with {a.mesh} train in {days(a.time_to_train_s or 0.0)}{cost}"
    )
    for note in a.warnings:
        console.print(f"warning (answer): {note}")
    beyond = beyond_calibration(a.gpus, report.moe)
    if beyond is not None and a.time_to_train_s_interval is not None:
        console.print(f"warning (answer): {beyond}")
    sure = report.answer_slow_end
    if sure is not None and sure.nodes != a.nodes:
        span = sure.time_to_train_s_interval or (0.0, 0.0)
        console.print(
            f"to meet the deadline at the slow end of the band too: {sure.nodes} {report.unit}s with {sure.mesh}, "
            f"{days(span[1])} at worst"
        )
    elif sure is None and banded:
        console.print(
            f"no count up to {report.rows[-1].nodes} nodes meets the deadline at the slow end of its band; "
            f"{_more_nodes_advice(report, job)} for that margin"
        )
    if report.cheapest is not None and report.cheapest.nodes != a.nodes:
        c = report.cheapest
        console.print(
            f"cheapest within the deadline: {c.nodes} {report.unit}s, {days(c.time_to_train_s or 0.0)}, "
            f"${(c.cost_to_train_usd or 0.0) / 1e6:,.2f} M"
        )


def capacity_segment_note(report: CapacityReport) -> str | None:
    """The footnote of the capacity table's 'N of M' GPUs, where a row uses its racks' segments."""
    fewer = [r for r in report.rows if r.gpus < r.node_gpus]
    if not fewer:
        return None
    savings = [1.0 - (r.step_time_s or 0.0) / r.all_gpus_step_time_s for r in fewer if r.all_gpus_step_time_s]
    by = ""
    if savings:
        low, high = min(savings), max(savings)
        span = f"{high:.0%}" if round(low * 100) == round(high * 100) else f"{low * 100:.0f}-{high:.0%}"
        by = f", {span} less time per step than on all of them"
    r = fewer[0]
    return (
        f"GPUs 'N of M': the {r.gpus // r.nodes}-GPU segment of each {r.node_gpus // r.nodes}-GPU rack that block "
        f"scheduling gives a large job trains faster{by} (M's odd factor must go to pipeline or tensor parallelism); "
        f"time and $ count the N GPUs used, the rest of each rack is free for other jobs (whole racks bought cost "
        f"{r.node_gpus / r.gpus:.3g}x the $ shown)"
    )
