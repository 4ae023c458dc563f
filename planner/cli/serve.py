"""``plan serve``: rank serving layouts (planner/serve). Options in ms and tokens; the library
takes seconds."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from planner.cli.app import app, console, emit_json
from planner.cli.inputs import model_and_cluster
from planner.cli.options import JsonOpt, PlotOpt, Target, TopOpt, command, finite_in, positive_finite
from planner.errors import PlannerError
from planner.schemas.hardware import MAX_CLUSTER_GPUS
from planner.schemas.job import MAX_SEQ_LEN
from planner.serving.schemas import MAX_CONCURRENCY, MIN_REQUEST_RATE


def _workload(path: Path) -> dict[str, Any]:
    """input_len/output_len (and optionally ttft_ms, tpot_ms, request_rate, concurrency) from a
    YAML or JSON file."""
    from planner.catalog import read_yaml

    data = read_yaml(path)
    allowed = {"input_len", "output_len", "ttft_ms", "tpot_ms", "request_rate", "concurrency"}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise PlannerError(f"{path}: field '{unknown[0]}': unknown key (allowed: {', '.join(sorted(allowed))})")
    from planner.errors import validate_field
    from planner.serving.schemas import ServeRequest

    counts = ("input_len", "output_len", "request_rate", "concurrency")
    out = {k: validate_field(ServeRequest, k, v, str(path)) for k, v in data.items() if k in counts}
    for key in ("ttft_ms", "tpot_ms"):
        if key in data:
            value = data[key]
            if isinstance(value, str):  # YAML 1.1 reads 1e3 as text
                try:
                    value = float(value)
                except ValueError:
                    pass
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise PlannerError(
                    f"{path}: field '{key}': expected a positive number of milliseconds, got {data[key]!r}"
                )
            out[key.replace("_ms", "_s")] = value / 1e3
    return out


@app.command("serve")
@command
def serve_cmd(
    *,
    target: Target,
    input_len: Annotated[
        int | None, typer.Option("--input-len", min=1, max=MAX_SEQ_LEN, metavar="N", help="Prompt tokens [2048].")
    ] = None,
    output_len: Annotated[
        int | None, typer.Option("--output-len", min=1, max=MAX_SEQ_LEN, metavar="N", help="Generated tokens [512].")
    ] = None,
    workload: Annotated[
        Path | None, typer.Option("--workload", metavar="FILE", help="YAML/JSON with input_len, output_len, ...")
    ] = None,
    ttft_ms: Annotated[
        float | None,
        typer.Option("--ttft-ms", metavar="X", callback=positive_finite, help="Time-to-first-token (TTFT) target, ms."),
    ] = None,
    tpot_ms: Annotated[
        float | None,
        typer.Option(
            "--tpot-ms",
            metavar="X",
            callback=positive_finite,
            help="Time-per-output-token (TPOT, mean inter-token latency) target, ms.",
        ),
    ] = None,
    request_rate: Annotated[
        float | None,
        typer.Option(
            "--request-rate",
            metavar="X",
            callback=finite_in(MIN_REQUEST_RATE, None),
            help=f"Offered load, requests/s (at least {MIN_REQUEST_RATE:g}).",
        ),
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(
            "--concurrency", min=1, max=MAX_CONCURRENCY, metavar="N", help="Requests in flight over the cluster."
        ),
    ] = None,
    weights_dtype: Annotated[
        str | None,
        typer.Option(
            "--weights-dtype",
            metavar="DTYPE",
            help="bf16, fp8 or fp4 (default: the checkpoint's format: fp8 DeepSeek-V3, fp4 gpt-oss, else bf16).",
        ),
    ] = None,
    kv_dtype: Annotated[str, typer.Option("--kv-dtype", metavar="DTYPE", help="bf16 or fp8.")] = "bf16",
    mamba_ssm_dtype: Annotated[
        str | None,
        typer.Option(
            "--mamba-ssm-dtype",
            metavar="DTYPE",
            help="Hybrid models: the Mamba-2 SSM state's format, bf16, fp16 or fp32 (default: the checkpoint's, "
            "else the engine's).",
        ),
    ] = None,
    engine: Annotated[
        str | None,
        typer.Option(
            "--engine",
            metavar="ENGINE",
            help="vllm, sglang, trtllm (TensorRT-LLM's PyTorch backend) or trtllm-tensorrt (its TensorRT-engine "
            "runtime) (default: --export's, else vllm).",
        ),
    ] = None,
    disaggregate: Annotated[bool, typer.Option("--disaggregate", help="Separate prefill and decode pools.")] = False,
    tp: Annotated[
        int | None, typer.Option("--tp", min=1, max=MAX_CLUSTER_GPUS, metavar="N", help="Pin tensor parallelism.")
    ] = None,
    pp: Annotated[
        int | None, typer.Option("--pp", min=1, max=MAX_CLUSTER_GPUS, metavar="N", help="Pin pipeline parallelism.")
    ] = None,
    ep: Annotated[
        int | None, typer.Option("--ep", min=1, max=MAX_CLUSTER_GPUS, metavar="N", help="Pin expert parallelism.")
    ] = None,
    attention_dp: Annotated[
        bool | None, typer.Option("--attention-dp/--no-attention-dp", help="Pin attention data parallelism.")
    ] = None,
    top: TopOpt = 10,
    targets_at_band_end: Annotated[
        bool,
        typer.Option(
            "--targets-at-band-end",
            help="Meet --ttft-ms/--tpot-ms at the slow end of each layout's band (where 90% of published runs priced "
            "alike came in faster), not at the prediction.",
        ),
    ] = False,
    export: Annotated[
        str | None,
        typer.Option(
            "--export", metavar="ENGINE", help="Print launch flags of #1: vllm, sglang, trtllm, trtllm-tensorrt."
        ),
    ] = None,
    as_json: JsonOpt = False,
    plot: PlotOpt = None,
) -> None:
    """Rank serving layouts (TP, PP, EP, attention DP, replicas, prefill/decode split) by output
    tokens/s per GPU (at a price, the same order as cost per million tokens) among those that meet
    the TTFT/TPOT targets."""
    from planner.errors import validate_as
    from planner.serving.render import print_serve_ranking, ranking_json
    from planner.serving.schemas import ServeRequest
    from planner.serving.search import serve_search

    if export is not None and as_json:
        raise PlannerError("--export prints launch commands, not JSON: give --export or --json, not both")
    if export is not None:
        from planner.serving.export import EXPORTS

        if export not in EXPORTS:  # spelled as the engine field is (VLLM had failed as field 'engine')
            raise PlannerError(f"--export: unknown engine '{export}'; allowed: {', '.join(EXPORTS)}")
    if export is not None and engine is not None and export != engine:
        raise PlannerError(
            f"--export {export}: the plan is priced for --engine {engine} (its memory fraction, batch cap and fitted "
            f"rates); give the same engine to both, or --export {export} alone"
        )
    engine = export if engine is None else engine  # '' is no engine: refused by name, not read as unset
    fields: dict[str, Any] = _workload(workload) if workload is not None else {}
    given = {
        "input_len": input_len,
        "output_len": output_len,
        "ttft_s": None if ttft_ms is None else ttft_ms / 1e3,
        "tpot_s": None if tpot_ms is None else tpot_ms / 1e3,
        "request_rate": request_rate,
        "concurrency": concurrency,
        "weights_dtype": weights_dtype,
        "kv_dtype": kv_dtype,
        "mamba_ssm_dtype": mamba_ssm_dtype,
        "engine": engine,
        "disaggregate": disaggregate,
        "tp": tp,
        "pp": pp,
        "ep": ep,
        "attention_dp": attention_dp,
        "top": top,
        "targets_at_band_end": targets_at_band_end or None,
    }
    if request_rate is not None or concurrency is not None:  # the command line's load replaces the file's
        fields = {k: v for k, v in fields.items() if k not in ("request_rate", "concurrency")}
    fields |= {k: v for k, v in given.items() if v is not None}
    req = validate_as(ServeRequest, fields, "serve")
    spec, clus = model_and_cluster(target, "plan serve")
    ranking = serve_search(spec, clus, req)
    if plot is not None:
        from planner.plots import plot_serving
        from planner.serving.render import layout_label
        from planner.serving.search import layout_curves

        winner = layout_label(ranking.candidates[0]) if ranking.candidates else None
        title = f"{ranking.model} on {ranking.cluster}, {ranking.engine}, ISL {req.input_len} / OSL {req.output_len}"
        points = [(c.output_tokens_per_s_per_user, c.output_tokens_per_s_per_gpu) for c in ranking.candidates]
        if req.disaggregate:  # the splits over the co-located layouts' curves, which have none of them
            colocated = req.model_copy(update={"disaggregate": False})
            title += ": disaggregated splits against co-located layouts"
            plot_serving(layout_curves(spec, clus, colocated), None, req.tpot_s, title, plot, None, points)
        else:
            replayed = [(layout_label(c), *p) for c, p in zip(ranking.candidates, points, strict=True) if c.replayed]
            plot_serving(layout_curves(spec, clus, req), winner, req.tpot_s, title, plot, replayed)
    if not as_json and not ranking.candidates:  # JSON prints the empty ranking and its reason first (below)
        raise PlannerError(f"no candidate{', nothing to export' if export else ''}: {ranking.reason}")
    if export is not None:  # the table prints them; launch flags go to stdout, so these to stderr
        for warning in dict.fromkeys([*ranking.warnings, *ranking.candidates[0].warnings]):
            sys.stderr.write(f"warning: {warning}\n")
    if export is not None:
        from planner.cli.app import write_stdout
        from planner.serving.export import export_commands

        write_stdout(export_commands(ranking, export.lower(), str(target.model)))
        return
    if as_json:
        emit_json(ranking_json(ranking))
        if not ranking.candidates:  # the empty ranking and its reason are printed; the status says none
            raise PlannerError(f"no candidate: {ranking.reason}")
    else:
        print_serve_ranking(console(), ranking)


@app.command("serve-calibrate")
def serve_calibrate_cmd(
    runs: Annotated[Path, typer.Option("--runs", metavar="FILE", help="Runs file (inference_runs.yaml schema).")],
    write: Annotated[bool, typer.Option("--write", help="Write the fit into engines/*.yaml.")] = False,
    cross_validate: Annotated[bool, typer.Option("--cv/--no-cv", help="Leave-one-group-out cross-validation.")] = True,
    as_json: JsonOpt = False,
) -> None:
    """Fit the serving engines' per-architecture parameters to published rows (planner/serving/calibrate.py)."""
    from planner.runs import nothing_priced
    from planner.serving.calibrate import (
        FIT,
        MIN_MODELS,
        MIN_ROWS,
        at_bound,
        dropped_engine_fits,
        evaluate,
        write_engine_fits,
    )
    from planner.serving.runs import load_rows

    if write and not cross_validate:
        raise PlannerError(
            "--write: the engine profiles' error bars are the rows' cross-validated errors; drop --no-cv to write"
        )
    ev = evaluate(load_rows(runs), cross_validate=cross_validate)
    if not ev.overall["priced"]:
        raise nothing_priced(runs, ev.unpriced)
    written: list[str] = []
    if write and not ev.fitted:  # as `plan calibrate --from-runs --write` refuses a fit of nothing
        raise PlannerError(
            f"--write: the rows of {runs.name} fit no engine's parameters (a fit needs rows of its engine and GPU "
            "architecture that publish a throughput); nothing written, the shipped fits kept"
        )
    dropped = dropped_engine_fits(ev)
    if write and dropped:
        raise PlannerError(
            f"--write: the rows of {runs.name} do not fit what the engine files hold ({', '.join(dropped)}), which "
            "writing would drop; fit a runs file that holds the rows those were fitted to as well (each file's "
            "calibration.rows lists them); nothing written"
        )
    if write:
        written = write_engine_fits(ev, runs.name, f"plan serve-calibrate --runs {runs.name} --write")
    if as_json:
        emit_json(ev.as_json() | {"dropped": dropped, "written": written})
        return
    out = console()
    bounded = False
    for key, params in ev.fitted.items():
        rows = len(ev.rows_used.get(key, []))
        k = ev.keys.get(key, {})
        error = f"CV {_pct(k.get('cv_mape_pct', math.nan))}, signed {_pct(k.get('signed_pct', math.nan), '+')}"
        values = []
        for name, value in params.model_dump().items():
            fitted = name in FIT and name not in ev.held.get(key, [])  # a held or forced value is on no bound
            mark = "*" if fitted and at_bound(name, value) else ""
            bounded = bounded or bool(mark)
            shown = 0.0 if mark and abs(value) < 1e-9 else value  # a lower bound of 0 reached: 3.75e-25 read as 0
            values.append(f"{name} {shown:.3g}{mark}")
        out.print(f"{key:28} {rows:4d} rows, {error}:  " + "  ".join(values))
    if bounded:
        out.print(
            "* on its fit bound (serving/calibrate.py FIT): the rows push it past, so it stands for more than it names "
            "(at an upper bound) or less (at a lower one)"
        )
    o = ev.overall
    out.print(
        f"coverage {o['coverage']:.1%} ({o['priced']}/{o['rows']}); throughput per GPU MAPE {_pct(o['mape_pct'])}, "
        f"cross-validated {_pct(o['cv_mape_pct'])}, signed {_pct(o['signed_pct'], '+')} (each row's run replayed "
        f"as its benchmark ran it; as the fit prices it, its waves at the replay's ratio to them, "
        f"{_pct(o['fit_mape_pct'])}, {_pct(o['fit_signed_pct'], '+')})"
    )
    if not ev.fitted:
        out.print(
            f"nothing fitted (a fit needs {MIN_ROWS} rows of {MIN_MODELS} models of its engine and GPU architecture "
            "that publish a throughput): these errors price the rows with the engines' unfitted defaults, not as "
            "shipped"
        )
    elif cross_validate and len(ev.groups) < 2:
        out.print(
            "the rows are one group: leaving it out leaves no row to fit, so its cross-validated errors price it with "
            "the engines' unfitted defaults"
        )
    for m in ("ttft", "tpot"):
        if f"{m}_rows" in o:
            out.print(
                f"{m.upper()} over {o[f'{m}_rows']} rows: MAPE {_pct(o[f'{m}_mape_pct'])}, cross-validated "
                f"{_pct(o[f'{m}_cv_mape_pct'])}, signed {_pct(o[f'{m}_signed_pct'], '+')}"
            )
    for u in ev.unpriced:  # each with its reason, as --json lists them (a review: the text named none)
        out.print(f"not priced: {u['name']}: {u['reason']}", soft_wrap=True)
    if dropped:
        out.print(f"--write would drop, and so refuses: {', '.join(dropped)} (the rows do not fit them)")
    for path in written:
        out.print(f"wrote {path}")


def _pct(value: float, sign: str = "") -> str:
    """A percentage, or 'none' for an average over no rows (NaN: no throughput row priced, or --no-cv)."""
    return "none" if math.isnan(value) else f"{value:{sign}.1f}%"
