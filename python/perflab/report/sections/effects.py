"""The effects of the factors: each level against its baseline, as a ratio with its CI and a verdict."""

from __future__ import annotations

from typing import Any

from perflab.analysis import effects
from perflab.analysis.stats import MIN_VERDICT_N, REPETITIONS_NOTE, SIGNIFICANCE, WIDE_FACTOR
from perflab.model import fmt_factors, fmt_level
from perflab.report import effects_table
from perflab.report import html as h
from perflab.report.data import ReportData
from perflab.report.sections.base import ReportContext, SectionHtml, register, short
from perflab.report.sections.results import condition_notes


@register(rank=30)
class Effects:
    def render(self, ctx: ReportContext) -> list[SectionHtml]:
        """The answer to "does this factor matter?": each level against the
        baseline level, as a ratio with its CI and a verdict, as `compare`
        gives between two experiments."""
        d = ctx.data
        varied = [f for f, levels in d.factor_values.items() if len(levels) >= 2]
        if not varied:
            return []
        from perflab import search

        searched = search.settings_of(ctx.store.experiment()["spec_text"])
        if searched is not None:  # a search's rates are probes, not treatments: no effect between them is asked
            return [("effects", "Effects", h.note(
                f"A capacity search varies {searched.over} to find the highest value that meets {searched.goal}: its "
                "levels are probes, not treatments, so no level is compared with another here. The answer and "
                "every probe are under Capacity search."))]
        rows_found = effect_rows(ctx)
        if not rows_found:
            return [("effects", "Effects", h.note("No factor level has finished runs beside its baseline's."))]
        answers, rows, classes = [], [], []
        untested: dict[tuple[str, str], int] = {}
        # The metric each answer is about: each run's first headline metric it
        # has, so an experiment of several workloads (TPC-B's tps beside TPC-H's
        # power_at_size) answers for each, not only for the first run's.
        # With [experiment] primary, its metrics are what the experiment asks.
        leads = d.primary or [name for name in d.headline
                              if any(next((m for m in r["headline"] if m in d.values.get(r["id"], {})), None) == name
                                     for r in d.runs)] or d.headline[:1]
        for factor, level, base, context, name, found, mean_a, mean_b, n_a, n_b in rows_found:
            where = fmt_factors(context, ", ") or "all runs"
            ratio = found.ratio
            ci = (f"[{ratio.low:.3f}, {ratio.high:.3f}]" if ratio.shown else
                  f"too wide (over x{WIDE_FACTOR:g}): too few runs" if ratio.too_wide else "–")
            estimate = "undefined" if found.verdict == effects.UNDEFINED else f"{ratio.estimate:.3f}"
            if name in leads:
                if not found.tested:
                    untested[name, found.verdict] = untested.get((name, found.verdict), 0) + 1
                else:
                    verdict = {"better": "better", "worse": "worse", "differs": "different",
                               effects.NO_DIFFERENCE: "no significant change",
                               effects.WITHIN_NOISE: "within the noise floor, no change called"}.get(
                                   found.verdict, found.verdict)
                    if found.verdict == effects.NO_DIFFERENCE and ratio.too_wide:
                        verdict = "no significant change, and too few runs to rule one out"
                    if found.verdict in (effects.NO_DIFFERENCE, effects.WITHIN_NOISE) and found.power_note():
                        verdict += f" ({found.power_note()})"
                    if found.budget_note:
                        verdict += f" ({found.budget_note})"
                    answers.append(
                        f"{short(factor)} = {fmt_level(level)} against {fmt_level(base)}"
                        + (f" (at {where})" if context else "")
                        + f": {name} x{estimate}, "
                        + (f"95% CI wider than x{WIDE_FACTOR:g}" if ratio.too_wide else f"95% CI {ci}")
                        + f": {verdict}"
                    )
            verdict_class = {"better": "good", "worse": "bad"}.get(found.verdict, "")
            rows.append([
                short(factor), fmt_level(level), fmt_level(base), where, f"{name} ({d.metrics[name].unit})",
                h.td(f"{estimate} {ci}" if found.verdict != effects.UNDEFINED else "undefined", "num"),
                h.td(found.verdict, verdict_class),
                mean_a, mean_b, f"{n_a}/{n_b}", found.method,
                "–" if found.p_value is None or found.q_value is None else
                f"{found.p_value:.3g} ({found.q_value:.3g}{'' if not d.primary else ', ' + effects.family(name, d.primary)})",
            ])
            classes.append("changed" if found.verdict in ("better", "worse", "differs") else "")
        untested_why = {
            effects.UNDEFINED: "with a ratio undefined (a side is 0 or not a number)",
            effects.TOO_FEW: f"with fewer than {MIN_VERDICT_N} runs a side",
            effects.SAME_SETUP: "between levels that ran one set-up (their spread is in the noise floor)",
        }
        for lead in leads:
            said = {v: n for (m, v), n in untested.items() if m == lead}
            if said:
                answers.append(
                    f"{lead}: not tested: "
                    + "; ".join(f"{n} comparison(s) {untested_why[v]}" for v, n in sorted(said.items()))
                    + (f" ({REPETITIONS_NOTE})" if effects.TOO_FEW in said else "")
                )
        listing = "".join(f"<li>{h.esc(a)}</li>" for a in answers)
        named = ctx.data.spec.get("experiment", {}).get("baseline")
        how = ("the baseline is the level named in [experiment.baseline]" if named else
               "the baseline is each factor's first level (name another in [experiment.baseline])")
        changed = sum(1 for c in classes if c)
        body = (
            f'<ul class="answers">{listing}</ul>'
            # the full list of pairwise comparisons, folded: the answers above say what it found
            + h.details(
                f"all {len(rows)} pairwise comparisons (each level against its baseline, per metric; "
                f"{changed} changed)",
                h.table(
                    ["factor", "level", "baseline", "other factors", "metric", "ratio [95% CI]", "verdict",
                     "baseline mean", "level mean", "n", "test", "p (q, BH)"],
                    rows, row_classes=classes,
                    caption=f"Each level of each factor against the baseline (ratio = level / baseline), at each "
                    f"combination of the other factors; {how}. better/worse follow the metric's direction. "
                    f"{effects.LEGEND}",
                ))
            + effects_table.query_section(d, ctx.store, ctx.baseline_level)
            + (h.note(effects_table.blocking_note(d, leads)) if d.blocks() else "")
            + h.note(families_note(d, rows_found))
        )
        # A memory limit or a scratch filesystem as a factor: what its levels mean, beside their effects.
        conditions = [n for n in condition_notes(ctx)
                      if any(("resources.memory" in f) if "memory-limited" in n else ("storage." in f and "_fs" in f)
                             for f in varied)]
        return [("effects", "Effects of the factors", body + "".join(conditions))]


def families_note(d: ReportData, rows_found: list[Any]) -> str:
    """What the p-values were adjusted over: all the tested comparisons, or
    the primary metrics' and the others' as two families."""
    tested = [r for r in rows_found if r[5].tested]
    rule = (f"a change is called where q < {SIGNIFICANCE} and the ratio is outside the metric's noise floor "
            "(Results: Noise floor).")
    if not d.primary:
        return (f"{len(tested)} comparisons were tested in this report; their p-values are adjusted for the false "
                f"discovery rate (Benjamini & Hochberg 1995) and {rule}")
    first = sum(1 for r in tested if r[4] in d.primary)
    return (f"{len(tested)} comparisons were tested in this report. The experiment names its question, "
            f"[experiment] primary = {', '.join(d.primary)}: the false discovery rate (Benjamini & Hochberg 1995) is "
            f"controlled over those {first} comparisons as one family, and over the {len(tested) - first} of the "
            f"other metrics, secondary, as another (q in the table says which); {rule}")


def effect_rows(ctx: ReportContext) -> list[tuple[str, Any, Any, dict[str, Any], str, effects.Effect, float, float, int, int]]:
    """(factor, level, baseline, other factors' levels, metric, effect,
    mean at baseline, mean at level, n baseline, n level) for every factor
    with two or more levels, each level against the baseline, at each
    combination of the other factors (an effect may differ between them)."""
    d = ctx.data
    out = []
    # levels that resolve to one set-up are no effect: their runs are the noise floor's
    setup_of = {r: i for i, group in enumerate(d.setups()) for c in group for r in c.run_ids}
    for factor, level, base, context, a_ids, b_ids in effects_table.comparisons(d, ctx.baseline_level):
        for name in d.headline:
            a = [d.values[r][name] for r in a_ids if name in d.values.get(r, {})]
            b = [d.values[r][name] for r in b_ids if name in d.values.get(r, {})]
            if not a or not b:
                continue
            found = effects.effect(a, b, d.metrics[name].higher_is_better, seed=d.experiment["seed"],
                                   pairs=effects_table.pairs(d, a_ids, b_ids, name),
                                   pilot=effects_table.pilot(d))
            if found.verdict != effects.UNDEFINED and \
                    len({setup_of.get(r) for r in a_ids + b_ids}) == 1 and a_ids[0] in setup_of:
                found = effects.same_setup(found)
            out.append((factor, level, base, context, name, found, sum(a) / len(a), sum(b) / len(b),
                        len(a), len(b)))
    # one report, many comparisons: Benjamini-Hochberg over all of them (over
    # the primary metrics' alone and the others' alone where the experiment
    # names its primary metrics), and no change called within the metric's noise floor
    floors = ctx.noise_floors()  # a paired comparison's: that of its blocks' mean ratio
    settled = effects.settle_families([row[5] for row in out],
                                      [effects_table.within_block_floor(d, row[4], row[5].paired) if row[5].paired
                                       else floors.get(row[4]) for row in out],
                                      [effects.family(row[4], d.primary) for row in out])
    return [(*row[:5], found, *row[6:]) for row, found in zip(out, settled, strict=True)]
