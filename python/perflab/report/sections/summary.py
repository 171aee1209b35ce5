"""The summary: what was varied, the study's headline table and the flags."""

from __future__ import annotations

from typing import Any

from perflab.model import fmt_level, natural_key
from perflab.report import effects_table
from perflab.report import html as h
from perflab.report.sections.base import ReportContext, SectionHtml, register, short
from perflab.section import Figure, Section, Table, Text


@register(rank=20)
class Summary:
    def render(self, ctx: ReportContext) -> list[SectionHtml]:
        """The first screen answers the question: what was varied (each
        factor's levels by label, in the file's order), the study's headline
        table (a workload's headline section, else one row per combination
        of the Results), and the flags (failed, noisy or otherwise marked runs)."""
        d = ctx.data
        meta = d.spec.get("experiment", {}) if isinstance(d.spec.get("experiment"), dict) else {}
        reps = meta.get("repetitions", 1)
        varied = {f: levels for f, levels in d.factor_values.items() if len(levels) >= 2}
        if d.factor_values:
            items = "".join(
                f"<li><b>{h.esc(f)}</b>: {h.esc(' | '.join(fmt_level(v) for v in levels))}"
                + (" (one level: fixed)" if len(levels) < 2 else "") + "</li>"
                for f, levels in d.factor_values.items())
            what = (f"<p>Varied: {len(varied)} factor(s), {len(d.combinations)} combination(s) x {reps} "
                    f"repetition(s), run in {h.esc(effects_table.design_words(d))}.</p>"
                    f"<ul class=\"varied\">{items}</ul>")
        else:
            what = f"<p>Nothing varied: {reps} repetition(s) of one set-up.</p>"
        servers = server_names(ctx)
        if servers:
            what += f"<p>Server{'s' if len(servers) > 1 else ''} that ran: {h.esc(', '.join(servers))}.</p>"
        parts = [what]
        shown_table = False
        for anchor, section in headline_sections(ctx):
            blocks: list[Text | Table | Figure] = [b for b in section.blocks if isinstance(b, (Table, Text))]
            shown_table = shown_table or any(isinstance(b, Table) for b in blocks)
            parts.append(f"<h3>{h.esc(section.title)}</h3>" + ctx.render_section(Section(section.title, blocks)))
            if any(isinstance(b, Figure) for b in section.blocks):
                parts.append(f'<p class="note">Its figures: <a href="#{h.esc(anchor)}">{h.esc(section.title)}</a>.</p>')
        if not shown_table:
            parts.append("<h3>Results</h3>" + summary_table(ctx))
        parts.append("<h3>Flags</h3>" + summary_flags(ctx))
        return [("summary", "Summary", "".join(parts))]


def headline_sections(ctx: ReportContext) -> list[tuple[str, Section]]:
    """The study's headline sections, with their anchors: the first a
    workload marks `headline`, then the first each collector marks (the
    storage study's fsync table beside its TPS, the energy study's
    joules beside its queries)."""
    def first_headlines(listing: list[tuple[str, str, list[Section] | str]]) -> list[tuple[str, Section]]:
        found = []
        for anchor, _, sections in listing:
            if isinstance(sections, str):
                continue
            found += [(f"{anchor}-{i}", section) for i, section in enumerate(sections, start=1)
                      if section.headline][:1]
        return found

    return first_headlines(ctx.workload_section_list())[:1] + first_headlines(ctx.collector_section_list())


def server_names(ctx: ReportContext) -> list[str]:
    """Each server version the runs used, as its target described it
    ("PostgreSQL 18.6"), in natural order."""
    names = set()
    for r in ctx.data.runs:
        t = r.get("target")
        if not isinstance(t, dict):
            continue
        name = t.get("server")
        if not name and t.get("server_version") and t.get("kind") == "postgres":
            name = f"PostgreSQL {str(t['server_version']).split()[0]}"
        if name:
            names.add(str(name))
    return sorted(names, key=natural_key)


def summary_table(ctx: ReportContext) -> str:
    """One row per combination: the varied factors' levels and each
    headline metric's mean with its interval (or the runs' values)."""
    d = ctx.data
    if not d.combinations:
        return h.note("The plan is empty.")
    shown = [f for f, levels in d.factor_values.items() if len(levels) >= 2] or list(d.factor_values)
    headers = [*[short(f) for f in shown], "runs"]
    for name in d.headline:
        headers += [ctx.metric_label(name), "95% CI"]
    rows = []
    for combo in d.combinations:
        row: list[Any] = [*[fmt_level(combo.factors.get(f)) for f in shown],
                          f"{len(combo.run_ids)}" + (f" ({len(combo.failed_ids)} failed)" if combo.failed_ids else "")]
        for name in d.headline:
            s = combo.summaries.get(name)
            row += ["–", "–"] if s is None else [s.mean, h.td(ctx.ci_text(s), "num")]
        rows.append(row)
    return h.table(headers, rows, caption="Each row is one combination of the factors over its finished "
                   "repetitions (Results has the CV, warnings and noise floor; Effects tests each level against "
                   "its baseline).")


def summary_flags(ctx: ReportContext) -> str:
    """Failed runs and each flag, with the combinations that carry it."""
    d = ctx.data
    failed = [r for r in d.runs if r["status"] == "failed"]
    items = []
    if failed:
        items.append(f'<li class="bad">{len(failed)} failed run(s): '
                     + ", ".join(f"#{r['id']}" for r in failed) + ' (<a href="#failures">Failures</a>)</li>')
    by_flag: dict[str, list[int]] = {}
    for combo in d.combinations:
        for r in combo.run_ids:
            for flag in d.runs_by_id[r]["flags"]:
                by_flag.setdefault(flag, [])
                if combo.index not in by_flag[flag]:
                    by_flag[flag].append(combo.index)
    for flag, combos in sorted(by_flag.items()):
        n = sum(1 for r in d.runs if r["status"] == "done" and flag in r["flags"])
        items.append(f'<li class="warn">{h.esc(flag)}: {n} run(s), in combination(s) '
                     + h.esc(", ".join(f"#{c}" for c in combos)) + "</li>")
    listing = f"<ul>{''.join(items)}</ul>" if items else "<p>No run failed and no run is flagged.</p>"
    return listing + h.note(ctx.flag_counts() + ". What each flag means is under Results.")
