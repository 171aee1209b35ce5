"""The report's effects, by the plan's design: a plan in blocks pairs the
levels within each block (perflab.analysis.blocks), its noise floor is the
spread inside a block, and the report says how much of the run-to-run
variance lay between blocks (what the pairing removed). The comparisons
(each factor's levels against its baseline, at each combination of the other
factors) are made once here, for the headline metrics and for each query of
a query set (per-item verdicts)."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable
from typing import Any

from perflab.analysis import effects
from perflab.analysis.blocks import BlockVariance, block_variance
from perflab.analysis.precision import PILOT_BLOCKS, precision_fraction
from perflab.analysis.stats import NoiseFloor, noise_floor
from perflab.errors import UserError
from perflab.model import fmt_factors, fmt_level, natural_key
from perflab.report import html as h
from perflab.report.data import ReportData
from perflab.store import Store

Values = dict[int, dict[str, float]]  # run id -> name -> value


def comparisons(data: ReportData, baseline: Callable[[str], Any]
                ) -> list[tuple[str, Any, Any, dict[str, Any], list[int], list[int]]]:
    """(factor, level, baseline level, the other factors' levels, the
    baseline's done runs, the level's done runs) for every factor with two or
    more levels, each level against `baseline(factor)`, at each combination of
    the other varying factors (an effect may differ between them)."""
    out = []
    for factor, levels in data.factor_values.items():
        if len(levels) < 2:
            continue
        base = baseline(factor)
        others = [f for f, values in data.factor_values.items() if f != factor and len(values) >= 2]
        contexts: dict[str, dict[str, Any]] = {}
        by_key: dict[tuple[str, str], list[int]] = {}
        for combo in data.combinations:
            context = {f: combo.factors.get(f) for f in others}
            key = json.dumps(context, sort_keys=True, default=str)
            contexts.setdefault(key, context)
            by_key.setdefault((key, json.dumps(combo.factors.get(factor), default=str)), []).extend(combo.run_ids)
        base_json = json.dumps(base, default=str)
        for key, context in contexts.items():
            for level in levels:
                if level != base:
                    out.append((factor, level, base, context, by_key.get((key, base_json), []),
                                by_key.get((key, json.dumps(level, default=str)), [])))
    return out


def pilot(data: ReportData) -> tuple[int, float] | None:
    """(pilot blocks, precision) of an experiment with `precision`, whose
    blocks after the pilot Stein's rule fixed; None otherwise."""
    meta = data.spec.get("experiment")
    text = meta.get("precision") if isinstance(meta, dict) else None
    fraction = precision_fraction(text) if isinstance(text, str) else None
    if fraction is None or not isinstance(meta, dict) or data.blocks() is None:
        return None
    reps = meta.get("repetitions", PILOT_BLOCKS)
    return (reps, fraction) if isinstance(reps, int) and reps >= 2 else None


def pairs(data: ReportData, a_ids: list[int], b_ids: list[int], metric: str,
          values: Values | None = None) -> tuple[list[float], list[float]] | None:
    """The two sides' values of `metric` (of `values`, default the run's
    metrics) aligned by block, when the plan ran in blocks and every block
    that ran either side holds one run of each; None otherwise (the
    comparison is then unpaired)."""
    blocks = data.blocks()
    vals = data.values if values is None else values
    if blocks is None:
        return None
    sides = []
    for ids in (a_ids, b_ids):
        by_block = {blocks[r]: vals[r][metric] for r in ids if r in blocks and metric in vals.get(r, {})}
        if len(by_block) != len(ids):  # a run without its figure, or two in one block
            return None
        sides.append(by_block)
    if set(sides[0]) != set(sides[1]):  # a block with one side only (a failed run): incomplete
        return None
    order = sorted(sides[0])
    return [sides[0][k] for k in order], [sides[1][k] for k in order]


def variance(data: ReportData, metric: str, values: Values | None = None) -> BlockVariance | None:
    """The metric's two-way layout (block x combination) over the complete blocks of done runs."""
    blocks = data.blocks()
    vals = data.values if values is None else values
    if blocks is None:
        return None
    table: dict[int, dict[int, float]] = {}
    for combo in data.combinations:
        for r in combo.run_ids:
            if r in blocks and metric in vals.get(r, {}):
                table.setdefault(blocks[r], {})[combo.index] = vals[r][metric]
    return block_variance(table)


def within_block_floor(data: ReportData, metric: str, blocks: int, values: Values | None = None
                       ) -> NoiseFloor | None:
    """The noise floor of a comparison paired in `blocks` blocks: what two
    identical set-ups give as the mean of that many blocks' log ratios, from
    the spread of a run inside a block (the residual of the two-way layout):
    s_r / sqrt(blocks), so that its repeatability limit exp(2.8 s) holds the
    mean log ratio of two identical set-ups 95% of the time (ISO 5725-6's
    limit of two single runs, for the mean of `blocks` pairs). More blocks,
    a lower floor: what the blocks a 5% change needs are counted against."""
    found = variance(data, metric, values)
    if found is None or found.residual_df < 1 or blocks < 1:
        return None
    return NoiseFloor(found.residual_sd / math.sqrt(blocks), found.residual_df, found.combinations, math.nan)


def design_words(data: ReportData) -> str:
    """The design the runs were in, as their stored order shows it (a store
    older than blocks, or a file that says "random", ran no blocks)."""
    blocks = data.blocks()
    if blocks is None:
        order = data.spec.get("experiment", {}).get("order", "sequential") if isinstance(
            data.spec.get("experiment"), dict) else "sequential"
        return f"{order} order" if order in ("random", "sequential") else "sequential order"
    from perflab import plan, spec

    try:
        return plan.design(spec.load_text(data.experiment["spec_text"], stored=True))
    except (UserError, ValueError, TypeError):
        return f"{len(set(blocks.values()))} blocks: every combination once per block, in a fresh random order"


def blocking_note(data: ReportData, metrics: list[str]) -> str:
    """What the blocks removed, per metric: the between-block share of the
    run-to-run variance. Empty when the plan ran no blocks."""
    said = []
    for metric in metrics:
        found = variance(data, metric)
        if found is not None:
            said.append(f"{metric} {found.between_share:.0%} (within a block: {math.expm1(found.residual_sd):.1%} "
                        "a run)")
    if not said:
        return ""
    return ("The runs ran in blocks and each comparison is paired within them. Share of the run-to-run variance that "
            "lay between blocks, which pairing removes: " + "; ".join(said) + " (two-way analysis of variance of the "
            "logs over the complete blocks, the block a random effect: Montgomery, Design and Analysis of "
            "Experiments, ch. 4). A paired comparison's noise floor is that of the mean of its blocks' ratios, from the "
            "spread within a block.")


# ---------------------------------------------------------------- per query


def query_times(store: Store, run_ids: list[int]) -> Values:
    """Run id -> query -> its time in that run: the geometric mean of the
    run's executions of it (streams, iterations), when every one ended ok."""
    out: Values = {}
    for r in run_ids:
        times: dict[str, list[float]] = {}
        failed: set[str] = set()
        for q in store.queries(r):
            if q["status"] == "ok" and q["seconds"] is not None and q["seconds"] > 0:
                times.setdefault(q["query"], []).append(float(q["seconds"]))
            else:
                failed.add(q["query"])
        out[r] = {name: statistics.geometric_mean(t) for name, t in times.items() if name not in failed}
    return out


def query_section(data: ReportData, store: Store, baseline: Callable[[str], Any]) -> str:
    """Each query's time, level against baseline, as a ratio with its interval
    and a verdict (paired by block where the plan ran in blocks), with the
    false discovery rate controlled over the queries' comparisons; empty for
    an experiment that ran no query set."""
    done = [r for c in data.combinations for r in c.run_ids]
    times = query_times(store, done)
    names = sorted({q for t in times.values() for q in t}, key=natural_key)
    if not names:
        return ""
    floors = {q: noise_floor([[times[r][q] for c in g for r in c.run_ids if q in times.get(r, {})]
                              for g in data.setups()]) for q in names}
    setup_of = {r: i for i, group in enumerate(data.setups()) for c in group for r in c.run_ids}
    rows_in: list[tuple[str, Any, Any, dict[str, Any], str, effects.Effect, int, int]] = []
    for factor, level, base, context, a_ids, b_ids in comparisons(data, baseline):
        one_setup = len({setup_of.get(r) for r in a_ids + b_ids}) == 1 and bool(a_ids) and a_ids[0] in setup_of
        for q in names:
            a = [times[r][q] for r in a_ids if q in times.get(r, {})]
            b = [times[r][q] for r in b_ids if q in times.get(r, {})]
            if a and b:
                found = effects.effect(a, b, False, seed=data.experiment["seed"],
                                       pairs=pairs(data, a_ids, b_ids, q, times))
                if one_setup and found.verdict != effects.UNDEFINED:  # no effect: their spread is noise
                    found = effects.same_setup(found)
                rows_in.append((factor, level, base, context, q, found, len(a), len(b)))
    if not rows_in:
        return ""
    settled = effects.settle([r[5] for r in rows_in],
                             [within_block_floor(data, r[4], r[5].paired, times) if r[5].paired else floors.get(r[4])
                              for r in rows_in])
    rows, classes = [], []
    for (factor, level, base, context, q, _, n_a, n_b), found in zip(rows_in, settled, strict=True):
        ratio = found.ratio
        ci = f"[{ratio.low:.3f}, {ratio.high:.3f}]" if ratio.shown else "–"
        said = found.verdict if found.verdict != effects.NO_DIFFERENCE or not found.power_note() else \
            f"{found.verdict} ({found.power_note()})"
        rows.append([factor.rsplit(".", 1)[-1], fmt_level(level), fmt_level(base), fmt_factors(context, ", ") or "all runs",
                     q, h.td(f"{ratio.estimate:.3f} {ci}" if found.verdict != effects.UNDEFINED else "undefined", "num"),
                     h.td(said, {"better": "good", "worse": "bad"}.get(found.verdict, "")), f"{n_a}/{n_b}",
                     found.method])
        classes.append("changed" if found.verdict in ("better", "worse") else "")
    changed = sum(1 for c in classes if c)
    return h.details(
        f"per query: {len(rows)} comparisons of each query's time ({changed} changed)",
        h.table(["factor", "level", "baseline", "other factors", "query", "time ratio [95% CI]", "verdict", "n",
                 "test"], rows, row_classes=classes,
                caption="Each query's time in a run (the geometric mean of its executions in that run, when all "
                "ended ok), level against baseline; lower is better. The same tests as above, the false discovery "
                "rate controlled over these comparisons as one family (Benjamini & Hochberg 1995), and no change "
                "called within the query's noise floor."))

