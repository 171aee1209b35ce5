"""The results: one row per combination (mean, 95% CI, CV, flags, warnings), what flagged
conditions mean, and the experiment's own noise floor."""

from __future__ import annotations

import math
from typing import Any

from perflab.analysis.stats import (
    HIGH_CV,
    MIN_INTERVAL_N,
    MODIFIED_Z_THRESHOLD,
    TARGET_HALF_WIDTH,
    WIDE_FACTOR,
    repetitions_for,
)
from perflab.collectors.hostnoise import NOISY_HOST_CORES, SATURATED_IDLE_PCT
from perflab.model import Flag, fmt_level
from perflab.report import html as h
from perflab.report.data import Combination
from perflab.report.sections.base import MARK_MEANING, ReportContext, SectionHtml, register, short


@register(rank=40)
class Results:
    def render(self, ctx: ReportContext) -> list[SectionHtml]:
        d = ctx.data
        if not d.combinations:
            return [("results", "Results", h.note("The plan is empty."))]
        factor_names = list(d.factor_values)
        headers = ["#", *[short(f) for f in factor_names], "runs"]
        for name in d.headline:
            info = d.metrics[name]
            tag = " [estimated]" if info.estimated else ""
            headers += [f"{name} ({info.unit}){tag}", "95% CI", "CV"]
        headers += ["flags", "warnings"]
        rows = []
        classes = []
        for combo in d.combinations:
            row: list[Any] = [combo.index, *[fmt_level(combo.factors.get(f)) for f in factor_names],
                              len(combo.run_ids)]
            for name in d.headline:
                s = combo.summaries.get(name)
                if s is None:
                    row += ["–", "–", "–"]
                    continue
                # a metric measured in fewer of the runs (a load, done once and
                # reused) says its own n, not the combination's
                ci_text = ctx.ci_text(s)
                if s.n >= MIN_INTERVAL_N and s.n < len(combo.run_ids):
                    ci_text += f" (n={s.n})"
                if s.n < MIN_INTERVAL_N:
                    title = f"the runs' values: an interval needs {MIN_INTERVAL_N} runs ({s.interval.method})"
                elif s.interval.too_wide:
                    title = f"{s.interval.method}: spans more than x{WIDE_FACTOR:g}, so not printed; n={s.n}"
                else:
                    title = f"{s.interval.method}, n={s.n}"
                row += [
                    s.mean,
                    h.td(ci_text, "" if s.n < MIN_INTERVAL_N else "num", title=title),
                    h.td(h.fmt_pct(s.cv * 100, 1, signed=False), "num warn" if s.cv > HIGH_CV else "num"),
                ]
            row.append(h.td(", ".join(sorted(combo.flags)), "flag") if combo.flags else "")
            warnings = combination_warnings(ctx, combo)
            row.append(h.td("; ".join(warnings), "warn") if warnings else "")
            rows.append(row)
            classes.append("failed" if not combo.run_ids and combo.failed_ids else "")
        notes = [
            h.note(
                f"Each row is one factor combination over its finished repetitions. {ctx.ci_note()}; "
                "hover an interval for its method. "
                f"CV = sample standard deviation / mean; above {HIGH_CV * 100:.0f}% it is flagged. "
                f"Outliers (run numbers): modified z-score 0.6745 (x - median) / MAD above {MODIFIED_Z_THRESHOLD} "
                "(Iglewicz & Hoaglin 1993)."
            )
        ]
        for name in d.headline:
            info = d.metrics[name]
            if info.estimated:
                methods = ", ".join(sorted(m for m in info.methods if m != "measured"))
                notes.append(h.note(f"{name} is estimated, not measured: {methods}", "warn"))
            elif info.description:
                notes.append(h.note(f"{name}: {info.description}"))
        notes += condition_notes(ctx)
        table = h.table(headers, rows, row_classes=classes)
        return [("results", "Results", table + "".join(notes) + noise_section(ctx))]


def combination_warnings(ctx: ReportContext, combo: Combination) -> list[str]:
    """Short warnings, one per metric ("tps: CV 5.3%, outlier #6"), then failures."""
    out = []
    many = len(ctx.data.headline) > 1
    for name, s in combo.summaries.items():
        found = []
        if math.isfinite(s.cv) and s.cv > HIGH_CV:
            found.append(f"CV {s.cv * 100:.1f}%")
        if s.outlier_indices:
            ids = [r for r in combo.run_ids if name in ctx.data.values.get(r, {})]
            found.append("outlier " + ", ".join(f"#{ids[i]}" for i in s.outlier_indices))
        if found:
            out.append((f"{name}: " if many else "") + ", ".join(found))
    if combo.failed_ids:
        out.append("failed " + ", ".join(f"#{i}" for i in combo.failed_ids))
    if 0 < len(combo.run_ids) < MIN_INTERVAL_N:
        # the summaries say how many repetitions their CV asks for; the most any asks
        needed = max((repetitions_for(ctx.data.values_of(combo, name)) for name in combo.summaries),
                     default=MIN_INTERVAL_N)
        out.append(f"n={len(combo.run_ids)}: no interval (needs {MIN_INTERVAL_N} runs); about {needed} "
                   f"repetitions for +-{TARGET_HALF_WIDTH * 100:.0f}%")
    elif any(s.interval.too_wide for s in combo.summaries.values()):
        out.append(f"too few runs: an interval spans more than x{WIDE_FACTOR:g}")
    return out


def noise_section(ctx: ReportContext) -> str:
    """The experiment's own noise floor: the spread of runs of identical
    set-ups (repetitions, and levels that resolve to one set-up)."""
    d = ctx.data
    floors = ctx.noise_floors()
    rows: list[list[Any]] = []
    for name, floor in floors.items():
        if floor is None:
            positive = all(v > 0 for r in d.values.values() if (v := r.get(name)) is not None)
            rows.append([name, "–", "–", "–", "–", "no two runs of one set-up: the noise is not measured"
                         if positive else "values of 0 or below: no relative floor (the tests alone decide)"])
            continue
        rows.append([name, h.td(f"{floor.sd_log * 100:.2f}%", "num"), floor.df, floor.groups,
                     h.td(f"x{floor.largest_ratio:.3f}", "num"),
                     h.td(f"x{1 / floor.factor:.3f} - x{floor.factor:.3f}", "num")])
    parts = ["<h3>Noise floor</h3>", h.table(
        ["metric", "run-to-run spread (SD of ln)", "df", "set-ups", "largest max/min in one set-up",
         "noise floor (no change called within)"], rows,
        caption="Runs of identical set-ups: each combination's repetitions, pooled with those of combinations "
        "that resolve to the same set-up. Spread: the pooled standard deviation of ln(value) (ISO 5725-2 "
        "repeatability, on the log scale: about the CV). Noise floor: the repeatability limit exp(2.8 s) "
        "(ISO 5725-6), the ratio two runs of one set-up exceed only 5% of the time; an effect within it is "
        "not called a change, whatever its test says.")]
    equivalent = d.equivalent_levels()
    if equivalent:
        items = []
        for group in equivalent:
            labels = "; ".join(f"#{c.index} {c.label()}" for c in group)
            spread = []
            for name in d.headline:
                means = [s.interval.estimate for c in group if (s := c.summaries.get(name)) is not None]
                if len(means) > 1 and min(means) > 0:
                    spread.append(f"{name} x{max(means) / min(means):.3f}")
            items.append(f"<li>{h.esc(labels)}" + (f": largest ratio {h.esc(', '.join(spread))}" if spread else "")
                         + "</li>")
        parts.append(h.note(
            f"{len(equivalent)} group(s) of combinations resolve to the same set-up (their runs stored the same "
            "target description and the same other factors), so their runs are pooled as repetitions:"))
        parts.append(f"<ul>{''.join(items)}</ul>")
    return "".join(parts)


def condition_notes(ctx: ReportContext) -> list[str]:
    """What flagged conditions mean, once, where the figures are."""
    flags = {f for r in ctx.data.runs for f in r["flags"]}
    notes = []
    if Flag.MEMORY_LIMITED in flags:
        notes.append(h.note(
            "memory-limited: the server's cgroup memory limit (target.resources.memory or memory_high) bound "
            "during the run: its memory reached 90% of the limit, the limit was hit (failcnt, memory.events), "
            "or reclaim was counted; each such run has an event with the figures. A run under a limit that did "
            "not bind is not flagged. The limit counts the page cache the server's reads and writes bring in, not only "
            "its private memory: a limit of 1 GB leaves the server less than 1 GB of cache beyond shared "
            "memory, and reading beyond it is reclaimed within the cgroup. Huge pages are not charged to it (they are "
            "the hugetlb controller's): with huge_pages on, shared memory is outside the limit.", "warn"))
    if Flag.NOISY_HOST in flags or Flag.CPU_SATURATED in flags:
        notes.append(h.note(
            f"noisy-host: while the workload ran, processes neither perflab's nor the target's (kernel threads "
            f"and interrupts aside), plus steal time, took more than {NOISY_HOST_CORES} of a core "
            "(host.noise_cores; the run's host-noise event names the busiest). cpu-saturated: the CPUs perflab "
            f"and the server share were under {SATURATED_IDLE_PCT:g}% idle (host.shared_idle_pct): the driver "
            "and the server competed for them. Either makes a run's figures depend on the machine's state as "
            "much as on its factors.", "warn"))
    marked = [m for m in MARK_MEANING if m in flags]
    if marked:
        notes.append(h.note(
            "; ".join(f"{m}: {MARK_MEANING[m]}" for m in marked) + ". The Experiment history section lists "
            "every attempt and what it changed in the data.", "warn"))
    if Flag.NO_STEADY_STATE in flags:
        notes.append(h.note(
            "no-steady-state: the run's per-second rate had not settled by half its measured window (MSER-5, "
            "White 1997, on batch means of 5 seconds: the truncation that minimises the standard error of what "
            "is left lay in the second half). Its figures include a warm-up still under way: give it a longer "
            "warm-up or duration. Each harness run stores where its rate settled (steady_start_s) and a "
            "steady-state event.", "warn"))
    if Flag.LOOP_BACKED in flags:
        notes.append(h.note(
            "loop-backed: the server's data or WAL was on a scratch filesystem over a loop device, a file "
            "on another filesystem (target.storage.data_fs, wal_fs). Its figures measure that filesystem "
            "over the disk holding the file, through the loop driver, not a disk of its own.", "warn"))
    if Flag.SHAPED_LINK in flags:
        mechanisms = set()
        for values in ctx.data.values.values():
            if values.get("driver.network.netem"):
                mechanisms.add("netem (delay, jitter, loss, rate)")
            elif values.get("driver.network.relay"):
                mechanisms.add("perflab's delay relay (delay, jitter) with tbf for the rate")
            elif "driver.network.netem" in values:
                mechanisms.add("no delay; tbf for the rate")
        notes.append(h.note(
            "shaped-link: the driver ran in a network namespace of perflab's own and reached the server over a "
            "veth pair, shaped as driver.network says (a remote client on this machine). Its latency includes "
            "the link's delay twice per round trip. The link was shaped by: "
            + ("; ".join(sorted(mechanisms)) or "unknown") + ". netem is used where the kernel has it; else "
            "perflab's delay relay, a TCP relay inside the namespace that holds each chunk for the delay "
            "(its CPU is counted in the driver's). Each run's events say how its link was shaped.", "warn"))
    if Flag.SERVER_CLOSES in flags or Flag.HTTP10 in flags:
        closing = [r for r in ctx.data.runs if Flag.SERVER_CLOSES in r["flags"]]
        per_req = [ctx.data.values.get(r["id"], {}).get("connections_per_req") for r in closing]
        seen = sorted({f"{v:.2f}" for v in per_req if v is not None}, key=float)
        span = "" if not seen else f", {seen[0]}{f' to {seen[-1]}' if len(seen) > 1 else ''} connections " \
            "opened per request"
        notes.append(h.note(
            "server-closes: the HTTP server ended its connection after more than half of the responses "
            "(Connection: close, or an HTTP/1.0 answer; http/1.0: more than half were HTTP/1.0), in "
            f"{len(closing)} run(s){span}. Each such request paid a connect: "
            "perflab's latency counts the reconnection inside the request (connect_mean_ms is stored apart), "
            "while wrk starts its clock after the connect, so the two tools' percentiles differ on such a "
            "server (README: how perflab counts latency).", "warn"))
    return notes
