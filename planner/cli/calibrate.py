"""``plan calibrate``: fit a hardware profile to `plan validate` measurements (--from), or the
sustained throughput of each GPU profile and the overhead of each stack to published runs
(--from-runs)."""

from __future__ import annotations

import re
from pathlib import Path

import typer

from planner.cli.app import app, emit_json
from planner.cli.options import (
    ClusterOpt,
    FromOpt,
    FromRunsOpt,
    GroupOpt,
    JsonOpt,
    NameOpt,
    ProfileOutOpt,
    WriteOpt,
)
from planner.errors import PlannerError


@app.command("calibrate")
def calibrate_cmd(
    from_: FromOpt = None,
    from_runs: FromRunsOpt = None,
    group: GroupOpt = None,
    write: WriteOpt = False,
    cluster: ClusterOpt = None,
    out: ProfileOutOpt = None,
    name: NameOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Fit a profile to measurements: alpha and bandwidth per link tier, GEMM and attention
    efficiency from `plan validate` (--from); or, from published runs (--from-runs), the
    sustained tensor throughput of each GPU profile and the kernel overhead of each stack."""
    import numpy as np

    if from_runs is not None:
        if from_ is not None:
            raise PlannerError("give --from or --from-runs, not both")
        ignored = _given({"--cluster": cluster, "--out": out, "--name": name})
        if ignored:
            raise PlannerError(
                f"{ignored} {_go(ignored)} with --from; --from-runs fits the shipped profiles and stacks "
                "(--write records the fit in them)"
            )
        _calibrate_from_runs(from_runs, group or [], write, as_json)
        return
    if from_ is None:
        raise PlannerError("--from (a validate JSON) or --from-runs (a published-runs YAML) is required")
    ignored = _given({"--write": write, "--group": group})
    if ignored:
        raise PlannerError(
            f"{ignored} {_go(ignored)} with --from-runs; with --from the fitted profile is written to --out"
        )

    from planner.catalog import load_cluster, load_profile, read_yaml
    from planner.validate.calibrate import (
        ALPHA_MIN_SIZES,
        ALPHA_MIN_TERMS,
        CV_FOLDS,
        ErrorStats,
        alpha_fitted_tiers,
        base_attention_efficiency,
        calibrated_profile,
        check_measured_on,
        cross_validated,
        fit,
        fits_attention,
        fitted_link_tiers,
        initial_params,
        predict,
        samples_from_json,
        write_profile_yaml,
    )
    from planner.validate.report import measured_where

    if cluster is None:
        raise PlannerError("--cluster is required: the profile the measurements ran on (e.g. localhost-cpu)")
    if out is None:
        raise PlannerError("--out is required: where to write the calibrated profile YAML")
    if name is not None:
        check_profile_name(name)
    elif not PROFILE_NAME.fullmatch(out.stem):
        raise PlannerError(
            f"--out {out}: the profile would be named '{out.stem}' after the file, which is no profile name; "
            "give --name, or a file named as a profile (letters, digits, '-', '_', '.')"
        )
    if out.suffix.lower() not in (".yaml", ".yml"):
        # written under another name it had been read back as JSON, or could not be loaded by --cluster (a review)
        raise PlannerError(f"--out {out}: give a .yaml or .yml file (the catalog loads a profile by that suffix)")
    if out.exists() and out.resolve() == from_.resolve():
        # the measurements had been overwritten by the profile, then read back as JSON (a review, 2026-12-08)
        raise PlannerError(f"--out {out} is the --from file: write the profile elsewhere, the measurements kept")
    from planner.atomic import make_parent

    make_parent(out)  # an output that cannot be written fails now, not after the fit
    base = load_cluster(cluster).profile
    samples = samples_from_json(read_yaml(from_), str(from_))
    check_measured_on(samples.context, base, str(from_))
    results, context = samples.results, samples.context
    if samples.error is not None:
        typer.echo(
            f"warning: {from_} is a partial report (the run stopped: {samples.error}); fitting the "
            f"{len(results)} terms measured before it stopped",
            err=True,
        )
    if samples.unmeasurable:
        shown = ", ".join(samples.unmeasurable[:3]) + (", ..." if len(samples.unmeasurable) > 3 else "")
        typer.echo(
            f"warning: {len(samples.unmeasurable)} terms of {from_} were timed below 1 ns (the timer's "
            f"resolution) and are left out of the fit: {shown}",
            err=True,
        )
    fitted_tiers, alphas = fitted_link_tiers(results), alpha_fitted_tiers(results)
    params, before, _ = fit(base, results)
    where = measured_where(context.host, context.created_at, context.device_name, context.torch_version)
    source = f"{where}: plan calibrate fit to {len(results)} terms of {from_.name}"
    profile = calibrated_profile(base, params, results, name or out.stem, source)
    write_profile_yaml(out, profile)
    written = load_profile(str(out.resolve()))  # what was written must load, and is what "after" prices
    after = ErrorStats.of(predict(written, initial_params(written), results), np.array([r.measured_s for r in results]))
    held_out = cross_validated(base, results)
    summary = {
        "profile": str(out),
        "samples": len(results),
        "partial": samples.error is not None,
        "error_before": vars(before),
        "error_after": vars(after),
        "error_cross_validated": None if held_out is None else vars(held_out),
        "links": {
            t: {"latency_s": lat, "bus_bandwidth_bytes_per_s": bw, "latency_fitted": t in alphas}
            for t, (lat, bw) in params.links.items()
            if t in fitted_tiers
        },
        "unmeasurable_terms": samples.unmeasurable,
        "gemm_rate_scale": params.gemm_scale,
        "attention_efficiency_scale": params.attention_scale,
    }
    if as_json:
        emit_json(summary)
        return
    typer.echo(f"fit to {len(results)} measured term{'' if len(results) == 1 else 's'} of {from_}")
    typer.echo(f"before ({base.name}): {before}")
    typer.echo(f"after  ({profile.name}): {after}")
    if held_out is not None:
        folds = min(CV_FOLDS, len(results))
        typer.echo(f"cross-validated ({folds} folds, each term priced by a fit without it): {held_out}")
    else:
        typer.echo(
            f"warning: {len(results)} measured term(s) are too few to cross-validate (3 at least): the fit reproduces "
            "them by construction, and its error on other terms is not known",
            err=True,
        )
    # a rise of half a point at least (a review: 'median 54% -> 54%, max 273% -> 271%' had warned)
    if after.median > before.median + ERROR_RISE or after.max > before.max + ERROR_RISE:
        typer.echo(
            f"warning: the fit moves the bias (measured/predicted geomean {before.geomean_ratio:.2f} -> "
            f"{after.geomean_ratio:.2f}) but spreads the terms' errors (median {before.median:.0%} -> "
            f"{after.median:.0%}, max {before.max:.0%} -> {after.max:.0%}): the terms disagree with one another more "
            f"than with {base.name} (contended links, ranks sharing cores); check the terms of the largest errors "
            "in the report before using the profile",
            err=True,
        )
    for tier, (_, bw) in params.links.items():
        stated = getattr(base, tier).bandwidth_gb_per_s * 1e9
        if tier in fitted_tiers and bw > LINK_EXCESS * stated:
            typer.echo(
                f"warning: {tier}'s fitted bus bandwidth {bw / 1e9:.3g} GB/s is {bw / stated:.0f}x the link "
                f"{base.name} states ({stated / 1e9:.3g} GB/s): ranks on one host (loopback) copy through memory, "
                "not that link, so such a profile describes that machine alone; check the terms before using it",
                err=True,
            )
    for tier, (lat, bw) in params.links.items():
        if tier in alphas:
            typer.echo(f"  {tier}: alpha {lat * 1e6:.1f} us, bus bandwidth {bw / 1e9:.3g} GB/s")
        elif tier in fitted_tiers:
            typer.echo(
                f"  {tier}: alpha {lat * 1e6:.1f} us, bus bandwidth {bw / 1e9:.3g} GB/s, scaled together from the "
                f"profile's (its terms have fewer than {ALPHA_MIN_TERMS} collectives of {ALPHA_MIN_SIZES} message "
                "sizes, at which alpha and bandwidth cannot be told apart)"
            )
        else:
            typer.echo(f"  {tier}: unchanged (no term was measured on it)")
    for dtype, scale in params.gemm_scale.items():
        typer.echo(f"  {dtype} GEMM rate x{scale:.3g} of the old profile's")
    if fits_attention(results):
        typer.echo(
            f"  attention efficiency {base_attention_efficiency(base):.3g} -> {profile.gpu.attention_efficiency:.3g} "
            "(fitted from the layer shards)"
        )
    typer.echo(f"wrote {out}: use it with --cluster {out} or --profile {out}")


LINK_EXCESS = 2.0
"""How far over a profile's stated link a fitted bus bandwidth may come before ``plan calibrate
--from`` warns: a fit of loopback gloo on a 2-core CPU wrote 264 GB/s (a review, 2026-12-07). A
judgement, not a measurement."""


ERROR_RISE = 0.005
"""How far (as a fraction: half a percentage point) the fit may raise the terms' median or largest
error before calibrate warns that it spreads them: a judgement, below the timer's own scatter."""


def _given(options: dict[str, object]) -> str:
    """The flags among ``options`` that were given (a value, a true flag, a non-empty list), joined."""
    return ", ".join(flag for flag, value in options.items() if value not in (None, False, []))


def _go(flags: str) -> str:
    return "go" if "," in flags else "goes"


PROFILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}")
"""A profile name --name may give: a word of letters, digits, '.', '_' and '-' that starts with a
letter or digit, at most 80 characters: what the shipped profiles are named
(hardware_profiles/<name>.yaml), safe as a file name on every system and as a --cluster value."""


def check_profile_name(name: str) -> None:
    """Refuse a --name that is not a plain file-name-safe word (``PROFILE_NAME``): an empty name, a
    path ('a/b'), spaces or a leading dot would be written into the profile and then not name it."""
    if not PROFILE_NAME.fullmatch(name):
        raise PlannerError(
            f"--name {name!r}: expected a profile name of letters, digits, '.', '_' and '-' (starting with a "
            "letter or digit, at most 80 characters), e.g. dgx-h100-fitted"
        )


def _calibrate_from_runs(path: Path, groups: list[str], write: bool, as_json: bool) -> None:
    """`plan calibrate --from-runs`: fit, cross-validate, report, and with --write record it."""
    import shlex

    import numpy as np

    from planner.calibration_io import dropped_values, rows_left_out, write_fit, written_value
    from planner.fit_runs import fit_and_cross_validate
    from planner.runs import cases_from_runs, check_groups, load_runs, nothing_priced

    runs = load_runs(path)
    if groups:
        check_groups(runs, groups, path)
        runs = [r for r in runs if str(r.get("group")) in groups]
    cases, skipped = cases_from_runs(runs)
    if not cases:
        raise nothing_priced(path, skipped)
    result = fit_and_cross_validate(cases)
    command = "plan calibrate --from-runs " + " ".join(
        shlex.quote(a) for a in [path.name, *[x for g in groups for x in ("--group", g)]]
    )
    if write and not (np.any(result.free) or np.any(result.transferred)):
        # written, the shipped values the rows do not determine would only be dropped
        raise PlannerError(
            f"--write: the rows of {path.name} fit no parameter (a parameter needs rows of at least two models "
            "that move it); nothing written, the shipped calibration kept"
        )
    dropped = dropped_values(result)
    if write and dropped:
        raise PlannerError(
            f"--write: the rows of {path.name}{' in ' + ', '.join(groups) if groups else ''} do not determine "
            f"{len(dropped)} shipped fitted value(s), which writing would drop ({', '.join(dropped[:4])}"
            f"{', ...' if len(dropped) > 4 else ''}); fit a runs file that holds the rows they were fitted to as well "
            "(each file's calibration.rows lists them); nothing written"
        )
    left_out = rows_left_out(result)
    if write and left_out:
        raise PlannerError(
            f"--write: the rows of {path.name}{' in ' + ', '.join(groups) if groups else ''} leave out rows the "
            f"shipped values they would replace were fitted on: {', '.join(left_out[:3])}"
            f"{', ...' if len(left_out) > 3 else ''}; fit a runs file that holds those rows as well (each file's "
            "calibration.rows lists them); nothing written"
        )
    written = [str(p) for p in write_fit(result, command, path.name)] if write else []
    moved = result.problem.uses.any(axis=0)
    pairs = list(zip(result.problem.params, result.theta, result.free, moved, result.transferred, strict=True))
    # as --write records them (a fit at its bound of 0: 0), in the text and the JSON alike
    params = {p.label(): written_value(result, j) for j, (p, _, free, _, _) in enumerate(pairs) if free}
    moved_in = {p.label(): float(v) for p, v, _, _, transfer in pairs if transfer}
    unfitted = [p.label() for p, _, free, some, transfer in pairs if some and not free and not transfer]
    summary = {
        "runs": len(runs),
        "priced": len(cases),
        "skipped": [{"name": s["name"], "reason": s["reason"]} for s in skipped],
        "parameters": params,
        "transferred": moved_in,
        "not_fitted": unfitted,
        "mape_pct": float(100 * np.mean(np.abs(result.error))),
        "cv_mape_pct": float(100 * np.mean(np.abs(result.cv_error))),
        "signed_pct": float(100 * np.mean(result.error)),
        "dropped": dropped,
        "rows_left_out": left_out,
        "written": written,
    }
    if as_json:
        emit_json(summary)
        return
    typer.echo(f"fit to {len(cases)} of {len(runs)} runs of {path} ({len(skipped)} cannot be priced)")
    for s in skipped:  # each with its reason, as --json and the benchmark list them (a review: text named none)
        typer.echo(f"  not priced: {s['name']}: {s['reason']}")
    for label, value in params.items():
        typer.echo(f"  {label} = {value:.4g}")
    for label, value in moved_in.items():
        typer.echo(f"  {label} = {value:.4g} (not fitted: the median of the fitted values of its field)")
    if unfitted:
        typer.echo(
            "  not fitted (moved by rows of fewer than two models, or a kernel's by rows of one GPU "
            f"architecture; left uncalibrated): {', '.join(unfitted)}"
        )
    typer.echo(
        f"MAPE {summary['mape_pct']:.1f}% in sample, {summary['cv_mape_pct']:.1f}% cross-validated "
        f"(leave one model of one source out); mean signed {summary['signed_pct']:+.1f}%"
        + ("" if params or moved_in else ": nothing fitted, so these price the rows uncalibrated, not as shipped")
    )
    if dropped:
        typer.echo(
            f"  --write would drop these shipped values, which the rows do not determine, and so refuses: "
            f"{', '.join(dropped)}"
        )
    if left_out:
        typer.echo(
            "  --write would re-fit these files without rows their shipped values were fitted on, and so refuses: "
            f"{', '.join(left_out)}"
        )
    typer.echo(f"wrote {', '.join(written)}" if written else "dry run: --write records the fit in the shipped files")
