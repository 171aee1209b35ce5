"""The energy collector's report section, from the store only: energy per
run (total, above idle, in queries and in the gaps, by component), joules
per query by component, power over time with the queries' boundaries, and
the energy-delay trade-off across the factor combinations (query time
against energy, one point per combination, as the energy study of
PostgreSQL plotted resources against query time: arXiv 1303.4869). Every
figure names its source (rapl, perf or model) next to the numbers."""

from __future__ import annotations

import json
import statistics
from typing import Any

from perflab.model import Flag, natural_key
from perflab.section import Figure, RunGroup, Section, Table, Text

MAX_GROUPS_DRAWN = 6
COMPONENT_ORDER = ("package", "core", "uncore", "dram", "psys", "cpu", "disk")


def _queries(group: RunGroup, run_id: int) -> list[dict[str, Any]]:
    return group.read_queries(run_id) if group.read_queries is not None else []


def _sources(queries: list[dict[str, Any]]) -> set[str]:
    return {q["energy_source"] for q in queries if q.get("energy_source")}


def sections(groups: list[RunGroup]) -> list[Section]:
    groups = [g for g in groups if any("energy.joules" in r["metrics"] for r in g.runs)]
    if not groups:
        return []
    rows = []
    below_idle: list[str] = []
    stalled: list[str] = []
    per_query: dict[str, dict[str, dict[str, list[float]]]] = {}  # group -> query -> component -> joules
    delay: list[tuple[int, str, frozenset[str], float, float]] = []  # (index, label, query names, s, J)
    sources: set[str] = set()
    for g in groups:
        label = f"#{g.index} {g.label}"
        times, joules = [], []
        names: set[str] = set()
        for run in g.runs:
            m = run["metrics"]
            if "energy.joules" not in m:
                continue
            qs = [q for q in _queries(g, run["id"]) if q.get("energy_j") is not None]
            src = _sources(qs)
            sources |= src
            rows.append([label, run["id"], ", ".join(sorted(src)) or "see metric method", m.get("energy.joules"),
                         m.get("energy.joules_above_idle"), m.get("energy.idle_watts"),
                         m.get("energy.queries.joules"), m.get("energy.gaps.joules"),
                         ", ".join(f"{k.split('.')[2]} {v:.3g}" for k, v in sorted(m.items())
                                   if k.startswith("energy.component.") and k.endswith(".joules"))])
            if Flag.COUNTER_STALLED.value in run.get("flags", []):
                stalled.append(f"run {run['id']}")
            above = m.get("energy.joules_above_idle")
            if above is not None and above < 0:
                seconds = m.get("energy.seconds")
                run_w = f"{m['energy.joules'] / seconds:.3f} W" if seconds else "less"
                below_idle.append(f"run {run['id']}: {above:.3f} J above idle: the run's mean power ({run_w}) "
                                  f"was below the idle baseline's {m.get('energy.idle_watts', float('nan')):.3f} W")
            for q in qs:
                parts = json.loads(q["energy_json"]) if q.get("energy_json") else {}
                slot = per_query.setdefault(label, {}).setdefault(q["query"], {})
                for c, j in parts.items():
                    slot.setdefault(c, []).append(j)
            if qs:
                times.append(sum(q["seconds"] or 0.0 for q in qs))
                joules.append(sum(q["energy_j"] for q in qs))
                names |= {q["query"] for q in qs}
        if times:
            delay.append((g.index, label, frozenset(names), statistics.fmean(times), statistics.fmean(joules)))
    source_text = ", ".join(sorted(sources)) or "the metrics' method"
    blocks: list[Any] = [Table(
        ["combination", "run", "source", "energy J", "above idle J", "idle W", "in queries J", "in gaps J",
         "by component J"], rows,
        "energy per run: total (the components the source adds up), above the idle baseline (idle power x the "
        "run's length taken off), inside the queries' intervals and in the gaps between them")]
    if below_idle:
        blocks.append(Text("Flagged energy-below-idle (the idle baseline, measured just before the run, drew more "
                           "than the run: other work during the baseline, or power that varies by more than the "
                           "run adds): " + "; ".join(below_idle) + "."))
    if stalled:
        blocks.append(Text("Flagged counter-stalled (a counter read zero or did not advance over the run; its "
                           "counter-stalled event names it; where it was the energy counter, the figures above are "
                           "the model's, and their source says so): " + ", ".join(stalled) + "."))
    if per_query:
        blocks.append(_per_query_figure(per_query, source_text))
    else:
        blocks.append(Text("no per-query energy: the runs stored no timed queries"))
    power = _power_figure(groups, source_text)
    if power is not None:
        blocks.append(power)
    if delay:
        blocks.append(_energy_delay_figure(delay, source_text))
        blocks.append(Table(["combination", "query time s", "energy in queries J"],
                            [[label, seconds, joules] for _, label, _, seconds, joules in delay],
                            f"energy-delay points: means over repetitions; source: {source_text}"))
    return [*_headline(groups), Section("Energy per query", blocks)]


def _headline(groups: list[RunGroup]) -> list[Section]:
    """Joules per query set and per component for each combination of the
    resources (every other varied factor), over the repetitions with their
    intervals; and each query's energy against its time, one figure."""
    from perflab.analysis import pivot

    runs = [{**r, "group": g} for g in groups for r in g.runs if "energy.joules" in r["metrics"]]
    if not runs:
        return []
    varied = pivot.varied(runs)
    query_set = [f for f in varied if f.endswith(".queries") or f.endswith(".kind")]
    resources = [f for f in varied if f not in query_set]
    components = _ordered({k.split(".")[2] for r in runs for k in r["metrics"]
                           if k.startswith("energy.component.") and k.endswith(".joules")})
    col_groups = pivot.group(runs, query_set)
    headers = [*(pivot.short_name(f) for f in resources), "component",
               *(pivot.combo_label(query_set, v, named=False) if query_set else "joules" for v, _ in col_groups)]
    rows: list[list[Any]] = []
    for values, grp in pivot.group(runs, resources):
        ids = {r["id"] for r in grp}
        for name, key in [("total", "energy.joules"), ("in queries", "energy.queries.joules"),
                          *((c, f"energy.component.{c}.joules") for c in components)]:
            cells = [pivot.cell([r["metrics"][key] for r in col if r["id"] in ids and key in r["metrics"]])
                     for _, col in col_groups]
            if any(c != "–" for c in cells):
                rows.append([*(pivot.level_text(v) for v in values), name, *cells])
    blocks: list[Any] = [
        Text("Joules per run for each query set (columns) and each combination of the other factors (rows), total "
             "and by component, over the repetitions. " + pivot.INTERVAL_NOTE.format(center="mean")),
        Table(headers, rows, "Energy (J) per query set, component and resource combination"),
    ]
    scatter = _energy_time_figure(runs, query_set, resources)
    if scatter is not None:
        blocks.append(scatter)
    return [Section("Energy per resource combination", blocks, headline=True)]


def _energy_time_figure(runs: list[dict[str, Any]], query_set: list[str], resources: list[str]) -> Figure | None:
    """Each query's energy against its time: a point per query run, a colour
    per resource combination, a panel per query set, on log axes."""
    from perflab.analysis import pivot

    panels = pivot.group(runs, query_set)
    combos = [values for values, _ in pivot.group(runs, resources)]
    plt = _plt()
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels) + 2.2, 3.4), squeeze=False,
                             layout="constrained")
    drawn = False
    for ax, (values, panel_runs) in zip(axes[0], panels, strict=True):
        for i, combo in enumerate(combos):
            xs, ys = [], []
            for r in panel_runs:
                if tuple(r["factors"].get(f) for f in resources) != tuple(combo):
                    continue
                for q in _queries(r["group"], r["id"]):
                    if q.get("energy_j") is not None and q.get("seconds"):
                        xs.append(q["seconds"])
                        ys.append(q["energy_j"])
            if xs:
                ax.scatter(xs, ys, s=6, color=f"C{i % 10}", label=pivot.combo_label(resources, combo) if
                           resources else "runs")
                drawn = True
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(pivot.combo_label(query_set, values) if query_set else "", fontsize=8)
        ax.set_xlabel("query time, s")
        ax.set_ylabel("query energy, J")
    if not drawn:
        plt.close(fig)
        return None
    handles, labels = axes[0][0].get_legend_handles_labels()
    for ax in axes[0][1:]:
        for h_, l_ in zip(*ax.get_legend_handles_labels(), strict=True):
            if l_ not in labels:
                handles.append(h_)
                labels.append(l_)
    fig.legend(handles, labels, loc="outside right upper", fontsize=6, frameon=False)
    return Figure("energy-per-query-time", fig,
                  "each query's energy against its time: a point per query run, a colour per combination of the "
                  "other factors, a panel per query set")


def _ordered(components: set[str]) -> list[str]:
    return sorted(components, key=lambda c: (COMPONENT_ORDER.index(c) if c in COMPONENT_ORDER else 99, c))


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _per_query_figure(per_query: dict[str, dict[str, dict[str, list[float]]]], source: str) -> Figure:
    plt = _plt()
    shown = list(per_query)[:MAX_GROUPS_DRAWN]
    fig, axes = plt.subplots(len(shown), 1, figsize=(10, 2.6 * len(shown)), squeeze=False)
    for ax, label in zip(axes[:, 0], shown, strict=True):
        queries = per_query[label]
        names = sorted(queries, key=natural_key)  # Q2 before Q10
        components = _ordered({c for q in queries.values() for c in q})
        bottom = [0.0] * len(names)
        for c in components:
            values = [statistics.fmean(queries[n][c]) if queries[n].get(c) else 0.0 for n in names]
            ax.bar(range(len(names)), values, bottom=bottom, label=c)
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
        ax.set_xticks(range(len(names)), names, fontsize=7, rotation=60 if len(names) > 12 else 0)
        ax.set_ylabel(f"J ({source})")
        ax.set_title(label, fontsize=9)
        if components:
            ax.legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the bars
    fig.tight_layout()
    return Figure("energy-per-query", fig,
                  f"joules per query execution by component (mean over executions and repetitions); source: {source}")


def _power_figure(groups: list[RunGroup], source: str) -> Figure | None:
    runs = [(g, g.runs[0]) for g in groups[:MAX_GROUPS_DRAWN] if g.runs and g.read_series is not None]
    if not runs:
        return None
    plt = _plt()
    fig, axes = plt.subplots(len(runs), 1, figsize=(10, 2.6 * len(runs)), squeeze=False)
    drawn = False
    for ax, (g, run) in zip(axes[:, 0], runs, strict=True):
        assert g.read_series is not None
        series: dict[str, list[tuple[float, float]]] = {}
        for row in g.read_series(run["id"], "energy"):
            if row["name"] == "watts" or row["name"].endswith(".watts"):
                series.setdefault(row["name"], []).append((row["t"], row["value"]))
        for name in ["watts", *sorted(n for n in series if n != "watts")]:
            points = series.get(name)
            if points:
                ax.step([t for t, _ in points], [v for _, v in points], where="pre",
                        label="total" if name == "watts" else name.removesuffix(".watts"),
                        linewidth=1.6 if name == "watts" else 0.8)
                drawn = True
        qs = _queries(g, run["id"])
        for q in qs:
            if q.get("started_s") is not None:
                ax.axvline(q["started_s"], color="grey", linewidth=0.5, alpha=0.6)
        ax.set_ylabel(f"W ({source})")
        ax.set_title(f"#{g.index} {g.label}, run {run['id']}: grey lines mark each query's start", fontsize=9)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the lines
    ax.set_xlabel("seconds on the run's clock")
    fig.tight_layout()
    if not drawn:
        plt.close(fig)
        return None
    return Figure("energy-power-over-time", fig,
                  f"power over time (each sample covers the interval that ends at it), query starts marked; "
                  f"source: {source}")


def _energy_delay_figure(points: list[tuple[int, str, frozenset[str], float, float]], source: str) -> Figure:
    """One panel per query set (combinations that ran the same queries are
    comparable), one point per combination, labelled by its number."""
    plt = _plt()
    sets = sorted({names for _, _, names, _, _ in points}, key=lambda n: sorted(n))[:MAX_GROUPS_DRAWN]
    fig, axes = plt.subplots(1, len(sets), figsize=(4.2 * len(sets), 3.8), squeeze=False)
    for ax, names in zip(axes[0], sets, strict=True):
        for index, _, point_names, seconds, joules in points:
            if point_names == names:
                ax.scatter([seconds], [joules])
                ax.annotate(f"#{index}", (seconds, joules), fontsize=8, xytext=(3, 3), textcoords="offset points")
        listed = sorted(names, key=natural_key)
        title = f"{len(listed)} queries: {listed[0]} .. {listed[-1]}" if len(listed) > 1 else listed[0]
        ax.set_title(title, fontsize=8)
        ax.set_xlabel("query time per run, s")
        ax.set_ylabel(f"energy in the queries, J ({source})")
    fig.tight_layout()
    return Figure("energy-delay", fig,
                  "energy-delay trade-off: one panel per query set, one point per factor combination (numbered as "
                  "in the table below: e.g. cores x memory), its query time (sum of the queries' times) and the "
                  f"energy inside its queries, means over repetitions; source: {source}")
