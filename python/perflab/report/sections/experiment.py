"""The experiment itself: its file, the host, versions, server settings and what it left
outside its output directory."""

from __future__ import annotations

import json
from typing import Any

from perflab.report import effects_table
from perflab.report import html as h
from perflab.report.data import applied, flatten
from perflab.report.sections.base import ReportContext, SectionHtml, register
from perflab.targets.confine import format_bytes


@register(rank=120)
class Experiment:
    def render(self, ctx: ReportContext) -> list[SectionHtml]:
        d = ctx.data
        exp = d.experiment
        parts = [f"<h3>Experiment file</h3>{h.note(exp['spec_path'] or '(given on stdin)')}{h.pre(exp['spec_text'])}"]
        host = exp["host"]
        host_rows = [[k, v] for k, v in host.items() if k != "memory_bytes"]
        if host.get("memory_bytes"):
            host_rows.append(["memory", f"{host['memory_bytes'] / 2**30:.1f} GiB"])
        parts.append("<h3>Host</h3>" + h.table(["fact", "value"], host_rows, css_class="kv"))
        targets = [(r, r["target"]) for r in d.runs if isinstance(r.get("target"), dict)]
        versions = sorted({str(t.get("version")) for _, t in targets if t.get("version")})
        version_rows = [["perflab", host.get("perflab", "?")], ["engine", f"{host.get('engine')} ({host.get('engine_profile')})"],
                        ["python", host.get("python", "?")]]
        version_rows += [["server", v] for v in versions]
        parts.append("<h3>Versions</h3>" + h.table(["component", "version"], version_rows, css_class="kv"))
        parts.append(settings_tables(ctx, targets))
        seed = exp["seed"]
        parts.append(h.note(f"Plan: {effects_table.design_words(d)} (seed {seed}); "
                            f"factors: {', '.join(exp['factors']) or 'none'}."))
        parts.append(left_behind(ctx))
        return [("experiment", "Experiment", "".join(parts))]


def left_behind(ctx: ReportContext) -> str:
    """What the experiment made outside its output directory (perflab's
    schemas in databases it did not create), and how to remove it."""
    rows = ctx.store.leftovers(removed=True)
    if not rows:
        return ""
    table = h.table(
        ["what", "name", "where", "size", "contents", "measured", "state"],
        [[r["kind"], r["name"], r["location"], format_bytes(r["bytes"]), r["detail"], r["measured_at"] or "-",
          f"removed {r['removed_at']}" if r["removed_at"] else "left"] for r in rows], css_class="kv")
    left = [r for r in rows if not r["removed_at"]]
    say = (f"{len(left)} left: remove with `perflab clean {ctx.store.dir}`." if left
           else "All of it was removed by `perflab clean`.")
    return ("<h3>Left outside the output directory</h3>"
            + h.note("Schemas of perflab's own (marked as this experiment's) in databases it did not create; "
                     "nothing else there was created, changed or dropped. " + say) + table)


def settings_tables(ctx: ReportContext, targets: list[tuple[dict[str, Any], dict[str, Any]]]) -> str:
    """Effective server settings as target.describe() recorded them: the
    settings that differ between runs per combination, then the whole set."""
    if not targets:
        return "<h3>Server settings</h3>" + h.note("No run recorded its target's description.")
    # what was applied: pids, paths perflab picked and how it reaches the
    # server (a fresh socket directory per start) are declared apart by their targets
    flat_by_run = {r["id"]: applied(t) for r, t in targets}
    keys = sorted({k for flat in flat_by_run.values() for k in flat})
    varying = [k for k in keys if len({json.dumps(f.get(k), default=str) for f in flat_by_run.values()}) > 1]
    # key_settings repeat effective_settings: show a setting once
    varying = [k for k in varying
               if not (k.startswith("key_settings.") and f"effective_settings.{k[13:]}" in varying)]
    parts = ["<h3>Server settings</h3>"]
    first_run, first = targets[0]
    key_settings = first.get("key_settings") or first.get("effective_settings")
    if isinstance(key_settings, dict):
        parts.append(h.table(["setting", "value"], sorted(key_settings.items()), css_class="kv",
                             caption=f"Key settings as the server reported them (run #{first_run['id']})."))
    if varying:
        by_combo: dict[int, dict[str, Any]] = {}
        for r, _ in targets:
            by_combo.setdefault(r["combination"], flat_by_run[r["id"]])
        rows = [[c, *[flat.get(k, "–") for k in varying]] for c, flat in sorted(by_combo.items())]
        parts.append(h.table(["#", *varying], rows, caption="Settings that differ between combinations."))
    everything = sorted(flatten("", first, {}).items())
    parts.append(h.details(f"everything the target described (run #{first_run['id']}, {len(everything)} entries)",
                           h.table(["key", "value"], everything, css_class="kv")))
    return "".join(parts)
