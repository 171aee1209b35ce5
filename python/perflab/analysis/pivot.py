"""A study's headline table: runs aggregated per factor level over their
repetitions and pivoted into the layout the study's authors used (rows one
factor's levels, columns another's), one table however many runs there are.

Workloads and collectors build their headline sections with these, from the
run rows (Store.runs()) and each run's metric values; the cells follow the
statistics module's rules (perflab.analysis.stats.summarize): the mean (or
median) with its 95% interval from 3 repetitions on, the values themselves
below that, "too few runs" when the interval informs nothing. Pure functions.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from perflab.analysis.effects import Effect, effect, settle
from perflab.analysis.stats import MIN_INTERVAL_N, summarize
from perflab.model import fmt_factors, fmt_level
from perflab.units import format_number

Run = dict[str, Any]

INTERVAL_NOTE = (
    f"Each cell: the {{center}} over the repetitions with its 95% interval (from {MIN_INTERVAL_N} repetitions; "
    "positive figures: the interval of the geometric mean); below that, n and the values themselves."
)


def fmt_num(value: object, digits: int = 4) -> str:
    """A number as the report prints it (units.format_number)."""
    return format_number(value, digits)


def level_text(value: object) -> str:
    """A factor level as a table or legend shows it: perflab.model.fmt_level,
    the one label function (a table level by its `label`)."""
    return fmt_level(value)


def short_name(factor: str) -> str:
    return factor.rsplit(".", 1)[-1]


def _key(value: object) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def done(runs: Sequence[Run]) -> list[Run]:
    return [r for r in runs if r.get("status", "done") == "done"]


def factor_names(runs: Sequence[Run]) -> list[str]:
    """Every factor path the runs carry, in the file's order."""
    names: list[str] = []
    for run in runs:
        for name in run["factors"]:
            if name not in names:
                names.append(name)
    return names


def levels(runs: Sequence[Run], factor: str) -> list[Any]:
    """The distinct levels of a factor in the plan's order (combination
    numbers follow the file's order of levels, whatever order they ran in)."""
    seen: dict[str, Any] = {}
    for run in sorted(runs, key=lambda r: (r.get("combination", 0), r.get("id", 0))):
        value = run["factors"].get(factor)
        seen.setdefault(_key(value), value)
    return list(seen.values())


def varied(runs: Sequence[Run]) -> list[str]:
    """The factors with two or more levels among these runs."""
    return [f for f in factor_names(runs) if len(levels(runs, f)) > 1]


def group(runs: Sequence[Run], factors: Sequence[str]) -> list[tuple[tuple[Any, ...], list[Run]]]:
    """Runs grouped by their levels of `factors`, groups in plan order."""
    out: dict[str, tuple[tuple[Any, ...], list[Run]]] = {}
    for run in sorted(runs, key=lambda r: (r.get("combination", 0), r.get("id", 0))):
        values = tuple(run["factors"].get(f) for f in factors)
        out.setdefault(_key(values), (values, []))[1].append(run)
    return list(out.values())


def combo_label(factors: Sequence[str], values: Sequence[Any], named: bool = True) -> str:
    """`name=level, ...` (or the levels alone) of one combination; "all runs" for none."""
    if not factors:
        return "all runs"
    if named:
        return ", ".join(f"{short_name(f)}={level_text(v)}" for f, v in zip(factors, values, strict=True))
    return ", ".join(level_text(v) for v in values)


def center_of(values: Sequence[float], center: str = "mean") -> float:
    x = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not x:
        return math.nan
    return float(np.median(x)) if center == "median" else float(np.mean(x))


def cell(values: Sequence[float], center: str = "mean") -> str:
    """The repetitions of one level as one cell, by the statistics module's
    rules: `mean [low, high]` from MIN_INTERVAL_N values (the interval of
    stats.summarize), `n=2: a; b` (the values) below, `mean (too few runs)` when the
    interval is too wide to inform, '–' without a value. With
    center="median" the median is printed before the interval of the mean."""
    x = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not x:
        return "–"
    if len(x) == 1:
        return f"n=1: {fmt_num(x[0])}"
    s = summarize(x)
    if s.n < MIN_INTERVAL_N:
        return f"n={s.n}: " + "; ".join(fmt_num(v) for v in s.values)
    point = center_of(x, center)
    if s.interval.too_wide or not s.interval.shown:
        return f"{fmt_num(point)} (too few runs, n={s.n})"
    return f"{fmt_num(point)} [{fmt_num(s.interval.low)}, {fmt_num(s.interval.high)}]"


def run_rows(runs: Sequence[Run], values: dict[int, dict[str, Any]],
             columns: Sequence[tuple[str, str]]) -> tuple[list[str], list[list[Any]]]:
    """The per-run table below a study's own: one row per run (id, factors,
    status, the metrics `columns` name as (metric, header), flags). Late and
    skipped transactions (`latency_limit`) get their columns wherever a run
    has them."""
    named = {k for k, _ in columns}
    columns = [*columns, *[(k, k) for k in ("late", "skipped")
                           if k not in named and any(k in values.get(r["id"], {}) for r in runs)]]
    rows = [[run["id"], fmt_factors(run["factors"], ", "), run["status"],
             *[values.get(run["id"], {}).get(k) for k, _ in columns], ", ".join(run["flags"])] for run in runs]
    return ["run", "factors", "status", *[label for _, label in columns], "flags"], rows


def pivot(
    runs: Sequence[Run],
    value: Callable[[Run], float | None],
    rows: Sequence[str],
    columns: Sequence[str],
    center: str = "mean",
) -> tuple[list[str], list[list[Any]]]:
    """One table: a row per combination of the `rows` factors' levels, a
    column per combination of the `columns` factors' levels, each cell the
    repetitions' cell() of `value(run)` over the done runs of that pair.
    Returns (headers, rows)."""
    runs = done(runs)
    row_groups = group(runs, rows)
    col_groups = group(runs, columns)
    first = " / ".join(short_name(f) for f in rows) or "runs"
    headers = [first] + [combo_label(columns, values, named=len(columns) > 1) if columns else "value"
                         for values, _ in col_groups]
    if len(columns) == 1:
        headers[1:] = [f"{short_name(columns[0])}={h}" for h in headers[1:]]
    table: list[list[Any]] = []
    for row_values, row_runs in row_groups:
        ids = {r["id"] for r in row_runs}
        line: list[Any] = [combo_label(rows, row_values, named=False)]
        for _, col_runs in col_groups:
            vals = [value(r) for r in col_runs if r["id"] in ids]
            line.append(cell([v for v in vals if v is not None], center))
        table.append(line)
    return headers, table


def per_level(
    runs: Sequence[Run],
    columns: Sequence[tuple[str, Callable[[Run], float | None]]],
    factors: Sequence[str] | None = None,
    center: str = "mean",
) -> tuple[list[str], list[list[Any]]]:
    """A row per combination of `factors` (default: the varied ones), a column
    per (header, value) pair, plus n: the repetitions as cells."""
    runs = done(runs)
    factors = list(varied(runs) if factors is None else factors)
    headers = [short_name(f) for f in factors] or ["runs"]
    headers += [h for h, _ in columns] + ["n"]
    table: list[list[Any]] = []
    for values, grp in group(runs, factors):
        line: list[Any] = [level_text(v) for v in values] if factors else ["all runs"]
        for _, get in columns:
            got = [get(r) for r in grp]
            line.append(cell([v for v in got if v is not None], center))
        line.append(len(grp))
        table.append(line)
    return headers, table


def change_list(
    runs: Sequence[Run],
    value: Callable[[Run], float | None],
    higher_is_better: bool | None,
    name: str,
) -> list[str]:
    """The lkml list form of each factor's levels against its first level,
    other factors held at their first level where they can be:
    `huge pages: on vs off +8.0% [+3.1%, +13.2%] (n 3/3, better)`. The ratio
    and its interval are perflab.analysis.effects.effect's (Welch on logs
    for positive figures; none below MIN_VERDICT_N runs a side)."""
    runs = done(runs)
    found: list[tuple[str, Effect, int, int, str]] = []
    names = varied(runs)
    for factor in names:
        others = [f for f in names if f != factor]
        base_of = {f: levels(runs, f)[0] for f in others}
        held = [r for r in runs if all(_key(r["factors"].get(f)) == _key(v) for f, v in base_of.items())]
        pool = held if len(levels(held, factor)) > 1 else runs
        where = " with " + combo_label(others, [base_of[f] for f in others]) if pool is held and others else ""
        lv = levels(pool, factor)
        a = [v for v in (value(r) for r in pool if _key(r["factors"].get(factor)) == _key(lv[0])) if v is not None]
        for level in lv[1:]:
            b = [v for v in (value(r) for r in pool if _key(r["factors"].get(factor)) == _key(level))
                 if v is not None]
            if a and b:
                head = f"{short_name(factor)}: {level_text(level)} vs {level_text(lv[0])}"
                found.append((head, effect(a, b, higher_is_better), len(a), len(b), where))
    settled = settle([e for _, e, _, _, _ in found])
    lines = []
    for (head, _, na, nb, where), e in zip(found, settled, strict=True):
        pct = (e.ratio.estimate - 1.0) * 100.0 if math.isfinite(e.ratio.estimate) else math.nan
        text = f"{head}: {name} " + (f"{pct:+.1f}%" if math.isfinite(pct) else "undefined")
        if e.ratio.shown:
            text += f" [{(e.ratio.low - 1) * 100:+.1f}%, {(e.ratio.high - 1) * 100:+.1f}%]"
        elif e.ratio.too_wide:
            text += " (interval too wide to inform: too few runs)"
        elif math.isfinite(pct):
            text += " (no interval: " + e.method.removeprefix("none: ") + ")"
        text += f" (n {na}/{nb}; {e.verdict})" + where
        lines.append(text)
    return lines
