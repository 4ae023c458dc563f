"""Write a runs fit (``planner.fit_runs``) into the shipped profiles and stacks, where the
error bar (``planner.error_bar``) reads it back.

The YAML files keep their comments: the fitted value replaces (or is inserted as) one line, its
``sources`` entry one line, and the top-level ``calibration`` block (command, runs file, rows
used, cross-validated errors) is replaced as a whole.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import yaml

from planner.atomic import write_texts_atomic
from planner.catalog import FITTED_SOURCE_PREFIX, catalog_dir
from planner.error_bar import calibration_key
from planner.errors import PlannerError

if TYPE_CHECKING:
    from planner.fit_runs import FitResult


def _set_line(lines: list[str], key: str, value: str, indent: str, before: re.Pattern[str], start: int) -> None:
    """Replace ``indent + key: ...`` at or after ``start``, or insert it before the first line
    matching ``before`` after ``start``."""
    pattern = re.compile(rf"^{re.escape(indent)}{re.escape(key)}:")
    for i in range(start, len(lines)):
        if pattern.match(lines[i]):
            lines[i] = f"{indent}{key}: {value}"
            return
    for i in range(start, len(lines)):
        if before.match(lines[i]):
            lines.insert(i, f"{indent}{key}: {value}")
            return
    raise PlannerError(f"cannot place '{key}' in the YAML: no line matching {before.pattern}")


def _set_source(lines: list[str], key: str, text: str, indent: str, start: int) -> None:
    """Set ``key``'s entry of the first ``sources:`` map (at ``indent``) after ``start``."""
    head = re.compile(rf"^{re.escape(indent)}sources:\s*$")
    for i in range(start, len(lines)):
        if head.match(lines[i]):
            entry = f"{indent}  {key}: {json_str(text)}"
            for j in range(i + 1, len(lines)):
                if not lines[j].startswith(indent + "  "):
                    break
                if lines[j].startswith(f"{indent}  {key}:"):
                    lines[j] = entry
                    return
            lines.insert(i + 1, entry)
            return
    raise PlannerError(f"no '{indent}sources:' map to record the source of '{key}'")


def json_str(text: str) -> str:
    """A double-quoted YAML scalar."""
    return yaml.safe_dump(text, default_style='"', width=10_000).strip()


def _replace_calibration(text: str, block: dict[str, object]) -> str:
    """Drop the top-level ``calibration:`` block, if any, and append ``block``."""
    lines = text.rstrip("\n").split("\n")
    out: list[str] = []
    skipping = False
    for line in lines:
        if line.startswith("calibration:"):
            skipping = True
            continue
        if skipping and line and not line.startswith((" ", "#")):
            skipping = False
        if not skipping:
            out.append(line)
    dumped = yaml.safe_dump({"calibration": block}, sort_keys=False, width=120)
    return "\n".join(out).rstrip("\n") + "\n\n" + dumped


def source_text(command: str, runs_file: str, rows: int) -> str:
    return (
        f"{FITTED_SOURCE_PREFIX} `{command}` over {rows} rows of {runs_file} (listed in calibration.rows); "
        "Huber-weighted least squares on log(predicted/published tokens/s per GPU), planner/fit_runs.py"
    )


def transfer_text(result: FitResult, j: int, command: str, runs_file: str) -> str:
    """The source of a transferred parameter: why it is not fitted and the values it is the median of."""
    param = result.problem.params[j]
    peers = [
        f"{p.target} {v:.3g}"
        for p, v, free in zip(result.problem.params, result.theta, result.free, strict=True)
        if free and p.kind == param.kind and p.field == param.field
    ]
    return (
        f"not fitted: this GPU's rows in {runs_file} come from fewer than two models; the median of the "
        f"values `{command}` fitted on {', '.join(peers)} (planner/fit_runs.py TRANSFERRED_FIELDS)"
    )


def _drop_field(lines: list[str], key: str, indent: str, start: int) -> None:
    """Remove ``indent + key:`` and its ``sources`` entry (one line each) after ``start``."""
    for prefix in (f"{indent}{key}:", f"{indent}  {key}:"):
        for i in range(start, len(lines)):
            if lines[i].startswith(prefix):
                del lines[i]
                break


def _files_of(result: FitResult, j: int) -> list[str]:
    """The shipped profiles (or the stack) parameter ``j`` of the fit is written to."""
    from planner.fit_runs import profiles_of

    param, cases = result.problem.params[j], result.problem.cases
    if param.kind == "stack":
        return [param.target]
    names = profiles_of(param.kind, param.target)
    return [n for n in names if param.kind != "architecture" or any(c.profile == n for c in cases)]


def dropped_values(result: FitResult) -> list[str]:
    """The shipped fitted values writing ``result`` would remove, as 'file.field value': the
    parameters of the files it writes that its rows do not determine (neither fitted nor
    transferred). A fit over a subset of the rows the shipped calibration used (one --group) had
    wiped, written, the values the rest had fixed (a review, 2026-12-07: dgx-h100's sustained
    tensor fraction, Hopper's row-wise fp8 fraction and two of torchtitan's)."""
    from planner.catalog import load_profile, load_stack

    out = []
    for j, param in enumerate(result.problem.params):
        if result.free[j] or result.transferred[j]:
            continue
        for name in _files_of(result, j):
            spec = load_stack(name) if param.kind == "stack" else load_profile(name).gpu
            value = getattr(spec, param.field, None)
            if value is not None:
                out.append(f"{name}.{param.field} {value:.4g}")
    return out


def written_value(result: FitResult, j: int) -> float:
    """Fitted parameter ``j`` as ``write_fit`` records it: 0 within 1e-6 of its upper bound's scale of
    it (a fit at its lower bound of 0), else the value (the dry run prints the same)."""
    upper = result.problem.params[j].bounds[1]
    theta = float(result.theta[j])
    return 0.0 if abs(theta) < 1e-6 * max(abs(upper), 1.0) else theta


def rows_left_out(result: FitResult) -> list[str]:
    """Of the files writing ``result`` would re-fit, those whose shipped values were fitted on rows
    this fit has not, as 'file (n of its m rows, e.g. ...)': written, a value fitted on many rows
    would be replaced by one fitted on few, the profiles fitted jointly with it left as they were. A
    fit of one --group (Megatron-Bridge's B200 rows) had replaced megatron-core's per-layer and
    per-expert overheads fitted on 39 rows and dropped the 18 GB200/GB300 rows from its list, and
    those profiles' own errors went from 6-10% to 12-14% (a review, 2026-12-08)."""
    from planner.catalog import load_profile, load_stack
    from planner.fit_runs import target_of

    out = []
    seen: set[tuple[str, str]] = set()
    for j, param in enumerate(result.problem.params):
        if not (result.free[j] or result.transferred[j]):
            continue
        kind = "stack" if param.kind == "stack" else "profile"
        for name in _files_of(result, j):
            if (kind, name) in seen:
                continue
            seen.add((kind, name))
            calibration = (load_stack(name) if kind == "stack" else load_profile(name)).calibration
            shipped = set(calibration.rows) if calibration is not None else set()
            missing = sorted(shipped - {c.name for c in result.problem.cases if target_of(kind, c) == name})
            if missing:
                out.append(f"{name} ({len(missing)} of its {len(shipped)} rows, e.g. {missing[0]})")
    return out


def write_fit(result: FitResult, command: str, runs_file: str) -> list[Path]:
    """Write every fitted parameter, and once per file the rows of its target with their
    cross-validated errors; returns the files written. A parameter the rows do not determine
    loses any value it had (it is uncalibrated): the command refuses to write where that drops
    a shipped value (``dropped_values``)."""
    from planner.fit_runs import target_of

    problem = result.problem
    edits: dict[Path, list[str]] = {}
    rows_of: dict[Path, tuple[str, np.ndarray]] = {}
    for j, param in enumerate(problem.params):
        gpu = param.kind != "stack"
        names = _files_of(result, j)
        rows = int(problem.uses[:, j].sum())
        source = source_text(command, runs_file, rows)
        if param.kind == "architecture":
            source += (
                f"; one value for every {param.target} profile (a kernel is written per architecture): "
                "its rows are those of the profiles of that architecture"
            )
        for name in names:
            path = catalog_dir("hardware_profiles" if gpu else "stacks") / f"{name}.yaml"
            lines = edits.setdefault(path, path.read_text(encoding="utf-8").split("\n"))
            kind = "profile" if gpu else "stack"
            rows_of[path] = (kind, np.array([target_of(kind, c) == name for c in problem.cases]))
            indent, head = ("  ", re.compile(r"^  sources:")) if gpu else ("", re.compile(r"^sources:"))
            start = next(i for i, ln in enumerate(lines) if ln.startswith("gpu:")) if gpu else 0
            if result.transferred[j]:
                _set_line(lines, param.field, f"{result.theta[j]:.4g}", indent, head, start)
                _set_source(lines, param.field, transfer_text(result, j, command, runs_file), indent, start)
                continue
            if not result.free[j]:
                _drop_field(lines, param.field, indent, start)
                continue
            _set_line(lines, param.field, f"{written_value(result, j):.4g}", indent, head, start)
            _set_source(lines, param.field, source, indent, start)
    texts: dict[Path, str] = {}
    for path, lines in edits.items():
        kind, rows = rows_of[path]
        by: dict[str, list[float]] = {}
        for i in np.flatnonzero(rows):
            case = problem.cases[i]
            key = calibration_key(case.stack if kind == "profile" else case.profile, case.model.is_moe)
            by.setdefault(key, []).append(round(100.0 * float(result.cv_error[i]), 2))
        block = {
            "command": command,
            "runs_file": runs_file,
            "rows": [problem.cases[i].name for i in np.flatnonzero(rows)],
            "cv_error_pct": by,
        }
        texts[path] = _replace_calibration("\n".join(lines), block)
    write_texts_atomic(texts, "--write")  # all the profiles and stacks, or none
    return list(edits)
