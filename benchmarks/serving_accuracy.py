"""Serving accuracy: predicted vs published serving throughput per GPU (and TTFT/TPOT where
published) of every row of a runs file in the schema of shared/groundtruth/inference_runs.yaml.

Each row is priced from its own fields (model shape, GPU, layout, formats, ISL/OSL, load) by
planner/serving/runs.py, never by its name; a row the translator cannot express is listed with the
reason. A maximum-throughput or concurrency row's predicted throughput is its run replayed
iteration by iteration (planner/serving/runs.py ``served``): where the row states its request count
(or trtllm-bench's is known), that whole run, its last requests' tail included, as the benchmark
reports it; else what `plan serve` reports for its layout at that load. The fit prices them by
their waves and steady round (``predict``), faster. The engines' per-architecture
parameters are fitted on the file's throughput rows, and each engine's server request path on its
TTFT rows measured through a server (planner/serving/calibrate.py, what `plan serve-calibrate --runs
FILE --write` ships); each row's cross-validated error comes from a fit that left the row's whole
group out.

Run: python benchmarks/serving_accuracy.py --runs ../shared/groundtruth/inference_runs.yaml [--json] [--no-cv]
A file kept aside (benchmarks/data/heldout_hybrid_serving.yaml) is checked with --shipped: nothing
is fitted to it, every row is priced with the parameters the engine profiles ship.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from planner.errors import PlannerError  # noqa: E402
from planner.runs import nothing_priced  # noqa: E402
from planner.serving.calibrate import MIN_MODELS, MIN_ROWS, evaluate, nan_as_null  # noqa: E402
from planner.serving.runs import load_rows  # noqa: E402


def _pct(x: float | None, signed: bool = True) -> str:
    """A percentage in six columns: signed for an error, plain for a MAPE (a mean of magnitudes)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "   -  "
    return f"{x:+6.1f}" if signed else f"{x:6.1f}"


def main(argv: list[str] | None = None) -> int:
    from benchmarks.arguments import OneLineParser

    ap = OneLineParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", required=True, help="runs file (inference_runs.yaml schema)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--no-cv", action="store_true", help="skip leave-one-group-out cross-validation")
    ap.add_argument(
        "--shipped",
        action="store_true",
        help="fit nothing: price every row with the engine profiles' shipped parameters (a held-out file)",
    )
    args = ap.parse_args(argv)
    try:
        ev = evaluate(load_rows(args.runs), cross_validate=not args.no_cv, shipped=args.shipped)
        if not ev.overall["priced"]:  # no error to report, as plan serve-calibrate ends it
            raise nothing_priced(args.runs, ev.unpriced)
    except PlannerError as err:  # a bad runs file: one line, exit 2, as the CLI ends it
        sys.stderr.write(f"error: {err}\n")
        return 2
    if args.json:
        out = ev.as_json()
        out["runs"] = [{k: v for k, v in r.items() if k != "key"} for r in out["runs"]]
        print(json.dumps(nan_as_null(out), indent=1, allow_nan=False))
        return 0
    print(f"{'row':72} {'metric':28} {'published':>10} {'predicted':>10} {'err %':>7} {'cv %':>7}")
    for r in ev.runs:
        print(
            f"{r['name'][:72]:72} {r['metric']:28} {r['published']:10.4g} {r['predicted']:10.4g} "
            f"{_pct(r['error_pct']):>7} {_pct(r['cv_error_pct']):>7}"
        )
    print("\nunpriced rows:")
    for u in ev.unpriced:
        print(f"  {u['name']}: {u['reason']}")
    print(f"\n{'group':40} {'rows':>5} {'priced':>6} {'MAPE':>6} {'CV':>6} {'signed':>7}  TTFT MAPE/CV  TPOT MAPE/CV")
    for g, e in ev.groups.items():
        print(
            f"{g:40} {e['rows']:5d} {e['priced']:6d} {_pct(e.get('mape_pct'), False):>6} "
            f"{_pct(e.get('cv_mape_pct'), False):>6} {_pct(e.get('signed_pct')):>7}  "
            f"{_pct(e.get('ttft_mape_pct'), False)}/{_pct(e.get('ttft_cv_mape_pct'), False)}"
            f"  {_pct(e.get('tpot_mape_pct'), False)}/{_pct(e.get('tpot_cv_mape_pct'), False)}"
        )
    o = ev.overall

    def cv(value: float, sign: str = "") -> str:  # no figure where nothing was fitted (--shipped, --no-cv)
        return "-" if math.isnan(value) else f"{value:{sign}.1f}%"  # or no row has the metric

    print(f"\n{'engine/architecture (throughput rows)':40} {'rows':>5} {'MAPE':>6} {'CV':>6} {'signed':>7}")
    for key, e in ev.keys.items():
        print(f"{key:40} {e['rows']:5d} {e['mape_pct']:5.1f}% {cv(e['cv_mape_pct']):>6} {e['signed_pct']:+6.1f}%")

    print(
        f"\noverall: {o['priced']}/{o['rows']} rows priced (coverage {o['coverage']:.1%}); throughput per GPU over "
        f"{o['throughput_rows']} rows: MAPE {cv(o['mape_pct'])}, cross-validated MAPE {cv(o['cv_mape_pct'])}, "
        f"signed {cv(o['signed_pct'], '+')}" + (" (shipped parameters: no row in a fit)" if args.shipped else "")
    )
    print(
        "  (a maximum-throughput or concurrency row by the replay of its run, or where it states no request count "
        "as plan serve replays its layout at that load; the fit prices "
        "them by their waves and steady round at the replay's ratio to them at a first fit: MAPE "
        f"{cv(o['fit_mape_pct'])}, signed {cv(o['fit_signed_pct'], '+')})"
    )
    if o.get("interval_coverage") is not None:
        whose = "no row in the fit" if args.shipped else "a fitted row's own is among them"
        print(
            f"inside the 80% band of plan serve: {o['interval_coverage']:.0%} of the throughput rows (the shipped "
            f"calibration's cross-validated errors; {whose})"
            + "".join(
                f", {o[f'{m}_interval_coverage']:.0%} of the {m.upper()} rows"
                for m in ("ttft", "tpot")
                if o.get(f"{m}_interval_coverage") is not None
            )
        )
    for m in ("ttft", "tpot"):
        if f"{m}_rows" in o:
            print(
                f"{m.upper()} over {o[f'{m}_rows']} rows: MAPE {o[f'{m}_mape_pct']:.1f}%, "
                f"CV {cv(o[f'{m}_cv_mape_pct'])}, signed {o[f'{m}_signed_pct']:+.1f}%"
            )
    for key, p in ev.fitted.items():
        print(f"fitted {key}: " + ", ".join(f"{k} {v:.3g}" for k, v in p.model_dump().items()))
    if not args.shipped and not ev.fitted:
        # no engine/architecture key had the rows a fit needs: the rows were priced at the uncalibrated
        # defaults, which is no check of the model; a held-out file is checked with --shipped
        print(
            f"fitted nothing: no engine/architecture key has {MIN_ROWS} throughput rows of {MIN_MODELS} models; "
            "priced at the uncalibrated defaults (check a held-out file with --shipped)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
