"""The experiment's history: its sessions, the earlier attempts of its runs and what they
changed in the data."""

from __future__ import annotations

import json

from perflab.report import html as h
from perflab.report.sections.base import ReportContext, SectionHtml, register


@register(rank=110)
class History:
    def render(self, ctx: ReportContext) -> list[SectionHtml]:
        """The sessions that ran the experiment (start, stop, how it stopped,
        what a resume found and did) and every earlier attempt of a run."""
        sessions = ctx.store.sessions()
        attempts = ctx.store.attempts()
        if not sessions and not attempts:
            return []
        rows = [[s["id"], s["command"], s["pid"], s["started_at"], s["ended_at"] or "–",
                 h.td(s["ended"] or ("running" if s["ended_at"] is None else ""),
                      "" if (s["ended"] or "").startswith("finished") else "warn"),
                 s["note"] or ""] for s in sessions]
        parts = [h.table(["session", "command", "pid", "started (UTC)", "ended (UTC)", "how it ended", "what it did"],
                         rows, caption="Each perflab process that ran part of the experiment. A killed one has no "
                         "end time: it was found dead by the next resume.")]
        if attempts:
            from perflab.report.partial import attempt_partial, lost_seconds

            partials = [attempt_partial(ctx.store.dir, a) for a in attempts]
            arows = [[f"#{a['run_id']}", a["attempt"], a["status"], a["started_at"] or "–", a["ended_at"] or "–",
                      "–" if a["seconds"] is None else f"{a['seconds']:.1f}",
                      (a["error"] or "").splitlines()[0][:160] if a["error"] else "",
                      h.td(p.describe(), "warn") if p is not None else "–", a["files"] or "–"]
                     for a, p in zip(attempts, partials, strict=True)]
            lost = lost_seconds(attempts)
            parts.append("<h3>Earlier attempts</h3>" + h.table(
                ["run", "attempt", "status", "started (UTC)", "ended (UTC)", "seconds", "cause",
                 "what it measured", "files"], arows,
                caption="Attempts that did not finish (killed, interrupted) or failed and were run again; each "
                "run's figures are from its last attempt. A killed attempt's end is its last sign of life "
                "(its newest file). What an attempt measured before it stopped (its per-second series and "
                "query records) is kept in its files as partial figures, in no other table or figure."
                + (f" Time lost to attempts that did not finish: {lost:,.0f} s." if lost else "")))
        effects = [e for e in ctx.store.effects() if e["kind"] != "load" or e["data"].get("reload")]
        if effects:
            erows = [[f"#{e['run_id']}", e["attempt"], e["kind"], json.dumps(e["data"], sort_keys=True), e["at"]]
                     for e in effects]
            parts.append("<h3>Changes to the data</h3>" + h.details(
                f"what runs recorded they would change in the target's data ({len(erows)})",
                h.table(["run", "attempt", "kind", "what", "at (UTC)"], erows,
                        caption="Recorded before the change was made: a run run again first undoes what its "
                        "earlier attempt changed (TPC-H refresh pairs), has the data loaded again (a query "
                        "set that writes), or records what it left (tpcb's history, TPC-C's orders)."),
                open_=len(erows) <= 12))
        return [("history", "Experiment history", "".join(parts))]
