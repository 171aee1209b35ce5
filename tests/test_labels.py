"""Issue 27, items 2-4: a factor level that is a table reads as a short label
(its own `label`, else what differs between the levels) in every table,
figure, legend, `show` and `export`; query names sort naturally; the report
opens with a summary; building a report raises no matplotlib warning."""

from __future__ import annotations

import csv
import io
import json
import re
import warnings
from pathlib import Path

import pytest

from perflab import spec
from perflab.errors import SpecError
from perflab.export import export
from perflab.model import LABEL_KEY, fmt_factors, fmt_level, level_labels, natural_key
from perflab.report import write_report
from perflab.store import Store
from synthetic_store import build_store

STORAGE = [
    {"data_fs": {"type": "ext4", "size": "1GB"}},
    {"data_fs": {"type": "xfs", "size": "1GB"}},
    {"data_fs": {"type": "ext4", "size": "4GB"}},
]

EXPERIMENT = """\
[experiment]
name = "labels"

[target]
kind = "postgres"

[workload]
kind = "sql"
statements = ["SELECT 1"]
duration = "1s"

[factors]
{factors}
"""


# ----------------------------------------------------------------- derivation


def test_a_label_names_only_the_leaves_that_differ() -> None:
    assert level_labels(STORAGE) == ["ext4 1GB", "xfs 1GB", "ext4 4GB"]
    servers = [
        {"bin_dir": "/tmp/x/pg17/bin", "settings": {"shared_buffers": "128MB", "io_method": "worker"}},
        {"bin_dir": "/tmp/x/pg18/bin", "settings": {"shared_buffers": "128MB", "io_method": "io_uring"}},
    ]
    # paths shortened to the components that tell them apart; a setting as key=value
    assert level_labels(servers) == ["pg17/bin io_method=worker", "pg18/bin io_method=io_uring"]
    # a key one level lacks is a difference too; booleans read as in the file
    assert level_labels([{"settings": {"sendfile": False}}, {"settings": {}}]) == ["sendfile=false", "default"]
    # one table level: every leaf, never a repr
    assert level_labels([{"data_fs": {"type": "ext4", "size": "1GB"}}]) == ["ext4 1GB"]
    # levels that print alike are told apart by their place
    assert level_labels([{"x": 1}, {"x": "1"}]) == ["x=1 (level 1)", "x=1 (level 2)"]
    # scalar levels are as before
    assert level_labels([1, "", True]) == ["1", "default", "true"]


def test_a_value_shown_alone_names_its_table_where_the_tables_differ() -> None:
    """The storage study's layouts: the WAL on a filesystem of its own in some
    levels. The value alone ("ext4 1GB") must say it is the WAL's, and a level
    without that table must not read "default" (its data is on a scratch
    filesystem too): an earlier version printed "default" and "ext4 256MB",
    and "ext2 ext2 1GB" for the example's four layouts."""
    two = [{"data_fs": {"type": "ext4", "size": "512MB"}},
           {"data_fs": {"type": "ext4", "size": "512MB"}, "wal_fs": {"type": "ext4", "size": "256MB"}}]
    assert level_labels(two) == ["no wal_fs", "wal_fs ext4 256MB"]
    four = [{"data_fs": {"type": t, "size": "2GB"}, **({"wal_fs": {"type": t, "size": "1GB"}} if apart else {})}
            for t in ("ext2", "ext4") for apart in (False, True)]
    assert level_labels(four) == ["ext2", "ext2, wal_fs ext2 1GB", "ext4", "ext4, wal_fs ext4 1GB"]
    # both tables in every level, with the same key: each value says whose it is
    both = [{"data_fs": {"type": "ext4"}, "wal_fs": {"type": "ext2"}}, {"data_fs": {"type": "xfs"}, "wal_fs": {"type": "ext4"}}]
    assert level_labels(both) == ["data_fs ext4, wal_fs ext2", "data_fs xfs, wal_fs ext4"]


def test_a_user_given_label_wins_and_the_others_are_derived() -> None:
    levels = [{"settings": {"sendfile": "off"}, "label": "nginx sendfile=off"}, {"settings": {"sendfile": "on"}}]
    assert level_labels(levels) == ["nginx sendfile=off", "sendfile=on"]


def test_fmt_level_of_a_table_is_never_a_python_repr() -> None:
    value = {"data_fs": {"type": "ext4", "size": "1GB"}}
    assert fmt_level(value) == "ext4 1GB"  # stored without a label (an older store): its leaves
    assert fmt_level({**value, LABEL_KEY: "small ext4"}) == "small ext4"
    assert fmt_factors({"target.storage": {**value, LABEL_KEY: "small ext4"}, "workload.clients": 8}) == \
        "storage=small ext4 clients=8"


# ----------------------------------------------------------------- the file


def _factors(path: str, levels: list[str]) -> str:
    return f'"{path}" = [{", ".join(levels)}]'


def test_spec_labels_every_table_level_and_never_applies_the_label() -> None:
    exp = spec.load_text(EXPERIMENT.format(factors=_factors("target.storage", [
        '{data_fs = {type = "ext4", size = "1GB"}, label = "small ext4"}',
        '{data_fs = {type = "xfs", size = "1GB"}}',
        '{data_fs = {type = "ext4", size = "4GB"}}',
    ])))
    levels = exp.factors["target.storage"]
    assert [v[LABEL_KEY] for v in levels] == ["small ext4", "xfs 1GB", "ext4 4GB"]  # the file's order
    for combo in exp.combinations():
        run = exp.resolve(combo)
        assert "label" not in run.raw["target"]["storage"]  # applied without it
        assert run.target.storage.data_fs.type in ("ext4", "xfs")


def test_spec_labels_a_whole_section_level() -> None:
    exp = spec.load_text(EXPERIMENT.format(factors=_factors("workload", [
        '{statements = ["SELECT 1"], label = "one"}', '{statements = ["SELECT 2"]}'])))
    assert [fmt_level(v) for v in exp.factors["workload"]] == ["one", "statements=SELECT 2"]
    assert [exp.resolve(c).workload.statements for c in exp.combinations()] == [["SELECT 1"], ["SELECT 2"]]
    assert all("label" not in exp.resolve(c).raw["workload"] for c in exp.combinations())


@pytest.mark.parametrize("levels, message", [
    (['{data_fs = {type = "ext4", size = "1GB"}, label = 3}', '{data_fs = {type = "xfs", size = "1GB"}}'],
     'factors."target.storage"[0].label: got 3; allowed: a short non-empty string'),
    (['{data_fs = {type = "ext4", size = "1GB"}, label = " "}', '{data_fs = {type = "xfs", size = "1GB"}}'],
     'factors."target.storage"[0].label: got " "; allowed: a short non-empty string'),
    (['{data_fs = {type = "ext4", size = "1GB"}, label = "b"}', '{data_fs = {type = "xfs", size = "1GB"}, label = "b"}'],
     'factors."target.storage"[1].label: got "b", the label of level 0 too; allowed: a label of its own'),
])
def test_a_bad_label_is_one_clear_problem(levels: list[str], message: str) -> None:
    with pytest.raises(SpecError) as err:
        spec.load_text(EXPERIMENT.format(factors=_factors("target.storage", levels)))
    assert message in str(err.value)


def test_the_baseline_may_name_a_table_level_without_its_label() -> None:
    text = EXPERIMENT.format(factors=_factors("target.storage", [
        '{data_fs = {type = "ext4", size = "1GB"}, label = "e"}', '{data_fs = {type = "xfs", size = "1GB"}}']))
    text = text.replace('name = "labels"', 'name = "labels"\nbaseline = {"target.storage" = {data_fs = {type = "xfs", size = "1GB"}}}')
    exp = spec.load_text(text)
    assert exp.meta.baseline["target.storage"] == {"data_fs": {"type": "xfs", "size": "1GB"}}


# ----------------------------------------------------------------- natural order


def test_query_names_sort_naturally() -> None:
    names = ["Q10", "Q2", "Q1", "RF1", "Q1.10", "Q1.2", "q9", "Q11", "RF2"]
    assert sorted(names, key=natural_key) == ["Q1", "Q1.2", "Q1.10", "Q2", "q9", "Q10", "Q11", "RF1", "RF2"]


def test_a_query_set_report_lists_queries_in_natural_order(tmp_path: Path) -> None:
    from perflab.workloads.ssb.report import query_section

    out = build_store(tmp_path / "out", clients=[1], sync=["on"], repetitions=1, queries=12, histograms=False)
    store = Store.open(out)
    try:
        section = query_section(store, store.runs(), "Query set", None, (), "caption", "queries")
    finally:
        store.close()
    table = section.blocks[1]
    assert [row[0] for row in table.rows] == [f"q{n}" for n in range(1, 13)]


# ----------------------------------------------------------------- the report


def _strict_report(out: Path) -> str:
    """The report, with every warning an error (matplotlib's layout ones included)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return write_report(out).read_text()


def test_the_report_opens_with_a_summary_of_one_row_per_level(tmp_path: Path) -> None:
    out = build_store(tmp_path / "out", clients=[1, 8], sync=["on"], repetitions=3, fail_runs=(2,),
                      flag_runs={4: ["noisy-host"]}, histograms=False, table_factor=("target.storage", STORAGE))
    html = _strict_report(out)
    sections = re.findall(r'<section id="([^"]+)"', html)
    assert sections[0] == "summary" and sections[1] == "effects"
    summary = html[html.index('<section id="summary"'):html.index('<section id="effects"')]
    # what was varied, by label, in the file's order
    assert "target.storage</b>: ext4 1GB | xfs 1GB | ext4 4GB" in summary
    assert "workload.clients</b>: 1 | 8" in summary
    # the table: one row per level combination (2 clients x 3 storage levels), not per run (18)
    body = re.search(r"<tbody>(.*?)</tbody>", summary, re.S)
    assert body is not None
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", body.group(1), re.S)
    assert len(rows) == 6
    first = re.findall(r"<td[^>]*>(.*?)</td>", rows[0], re.S)
    assert first[:3] == ["1", "ext4 1GB", "2 (1 failed)"]
    # the flags: failed and noisy runs
    assert "1 failed run(s): #2" in summary and "noisy-host: 1 run(s), in combination(s) #2" in summary
    # no Python repr of a table level anywhere in the page
    assert "{&#x27;data_fs&#x27;" not in html and "{'data_fs'" not in html
    # the full list of pairwise effects is folded
    effects = html[html.index('<section id="effects"'):html.index('<section id="results"')]
    assert re.search(r"<details><summary>all \d+ pairwise comparisons", effects)


def test_the_summary_shows_a_workloads_headline_section(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first section a workload marks `headline` is the summary's table."""
    from perflab.section import Section, Table
    from perflab.workloads import WORKLOADS

    def sections(store: Store, runs: list[dict]) -> list[Section]:
        return [Section("Not this one", [Table(["x"], [[1]])]),
                Section("Study table", [Table(["storage", "tps"], [["ext4 1GB", 1.0]])], headline=True)]

    monkeypatch.setattr(WORKLOADS.get("sql"), "report_sections", staticmethod(sections))
    out = build_store(tmp_path / "out", clients=[1], sync=["on"], repetitions=3, histograms=False)
    html = _strict_report(out)
    summary = html[html.index('<section id="summary"'):html.index('<section id="effects"')
                   if '<section id="effects"' in html else html.index('<section id="results"')]
    assert "<h3>Study table</h3>" in summary and "Not this one" not in summary
    assert "<h3>Results</h3>" not in summary  # the headline table stands in for it


def test_long_labels_and_many_lines_raise_no_matplotlib_warning(tmp_path: Path) -> None:
    """Long labels once made matplotlib warn "constrained_layout not applied"
    and collapse the plot beside its legend: the legend is outside and the
    figure grows for it."""
    long = [{"settings": {"shared_buffers": "128MB", "effective_io_concurrency": str(n),
                          "io_method": "worker-with-a-rather-long-name-for-a-setting-value"}} for n in (1, 16, 64)]
    out = build_store(tmp_path / "out", clients=[1, 2, 4, 8], sync=["on", "off"], repetitions=3,
                      table_factor=("target.tuning", long))
    html = _strict_report(out)
    assert "effective_io_concurrency=16" in html
    assert html.count("<figure") >= 3


def test_show_and_export_use_the_label(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    out = build_store(tmp_path / "out", clients=[1], sync=["on"], repetitions=1, histograms=False,
                      table_factor=("target.storage", STORAGE))
    shown = run_cli("show", out).stdout
    assert "ext4 1GB" in shown and "xfs 1GB" in shown and "data_fs" not in shown
    buf = io.StringIO()
    store = Store.open(out)
    try:
        export(store, "csv", buf)
        rows = list(csv.DictReader(io.StringIO(buf.getvalue())))
        buf = io.StringIO()
        export(store, "json", buf)
    finally:
        store.close()
    assert [r["target.storage"] for r in rows if r["metric"] == "tps"] == ["ext4 1GB", "xfs 1GB", "ext4 4GB"]
    assert {r["target.storage"] for r in json.loads(buf.getvalue())} == {"ext4 1GB", "xfs 1GB", "ext4 4GB"}


def test_a_legend_of_long_labels_stays_beside_the_plot() -> None:
    """Ten labels as long as the old Python reprs: the figure grows for the
    legend, which lies right of the axes, and matplotlib does not warn (it
    said "constrained_layout not applied" and collapsed the plot)."""
    from perflab.report import figures

    long = ("clients=8, tuning={'settings': {'shared_buffers': '128MB', 'effective_io_concurrency': '16'}}, "
            "storage={'data_fs': {'type': 'ext4', 'size': '1GB'}}")
    lines = [(f"{long} (run #{n})", [1.0, 2.0, 3.0], [1.0, 2.0 + n, 3.0]) for n in range(10)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = figures.series_figure(lines, "tps", "tps over time")
        fig.savefig(io.BytesIO(), format="png")
        renderer = fig.canvas.get_renderer()
        ax = fig.axes[0]
        legend = ax.get_legend()
        assert legend is not None
        assert legend.get_window_extent(renderer).x0 >= ax.get_window_extent(renderer).x1
        assert ax.get_window_extent(renderer).width > 200  # the plot kept its size (pixels)


def test_compare_matches_table_levels_whatever_their_derived_labels(tmp_path: Path) -> None:
    """With two of the three storage levels, B derives other labels ("ext4",
    "xfs") than A ("ext4 1GB", ...): runs are matched on what a level sets."""
    from perflab.report.compare import compare_data
    from perflab.report.data import load

    a = build_store(tmp_path / "a", clients=[1], sync=["on"], repetitions=3, histograms=False,
                    table_factor=("target.storage", STORAGE))
    b = build_store(tmp_path / "b", clients=[1], sync=["on"], repetitions=3, histograms=False, seed=2,
                    table_factor=("target.storage", STORAGE[:2]))
    stores = [Store.open(a), Store.open(b)]
    try:
        rows, common, notes = compare_data(load(stores[0]), load(stores[1]))
    finally:
        for s in stores:
            s.close()
    assert "target.storage" in common
    assert sorted({r.combination for r in rows}) == ["clients=1, synchronous_commit=on, storage=ext4 1GB",
                                                    "clients=1, synchronous_commit=on, storage=xfs 1GB"]
    assert any("storage=ext4 4GB (only in A)" in n for n in notes)


def test_http_throughput_is_drawn_as_req_per_s_not_tps(tmp_path: Path) -> None:
    """The engine names every per-second throughput "tps"; an HTTP run's is
    requests per second, and its figures say so."""
    import sqlite3

    from perflab.report.telemetry import build_run_figure

    out = build_store(tmp_path / "out", clients=[1], sync=["on"], repetitions=1, histograms=False)
    db = sqlite3.connect(out / "perflab.sqlite")
    with db:
        db.executemany("INSERT INTO series (run_id, source, name, t, value) VALUES (1, 'http', 'tps', ?, ?)",
                       [(float(t), 1000.0 + t) for t in range(1, 6)])
    db.close()
    store = Store.open(out)
    try:
        fig = build_run_figure(store, 1)
    finally:
        store.close()
    assert fig is not None
    panel = next(ax for ax in fig.axes if ax.get_title(loc="left") == "throughput")
    labels = [t.get_text() for t in panel.get_legend().get_texts()]
    assert "http req/s" in labels and "http tps" not in labels
    assert "req/s" in panel.get_ylabel() and "tps" in panel.get_ylabel()  # the sql source's own is tps


def test_a_figure_matplotlib_warns_about_is_named_and_fails_the_tests(tmp_path: Path) -> None:
    """The check the report tests rely on: a legend too wide for its figure
    (as the Python reprs once made) is a FigureWarning naming the figure."""
    from perflab.report import figures

    fig = figures.new_figure()
    ax = fig.add_subplot()
    for n in range(10):
        ax.plot([1, 2], [1, n], label="storage={'data_fs': {'type': 'ext4', 'size': '1GB'}} " * 3 + str(n))
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    with pytest.warns(figures.FigureWarning, match=r"figure too-wide: constrained_layout not applied"):
        figures.save(fig, tmp_path, "too-wide")
    assert (tmp_path / "too-wide.svg").exists()  # the figure is still written


def test_another_codes_warning_while_a_figure_is_saved_is_not_the_figures(tmp_path: Path) -> None:
    """Issue 44: an unclosed file of unrelated code, collected while a figure
    was drawn, was raised as a FigureWarning: it goes on as a ResourceWarning."""
    import gc

    from matplotlib.artist import Artist

    from perflab.report import figures

    class Unclosed:
        def __init__(self) -> None:
            self.cycle = self  # only the garbage collector frees it

        def __del__(self) -> None:
            warnings.warn("unclosed file <_io.FileIO name=13>", ResourceWarning, stacklevel=1)

    class CollectsGarbage(Artist):
        def draw(self, renderer: object) -> None:
            gc.collect()

    fig = figures.new_figure()
    fig.add_subplot().plot([1, 2], [1, 2])
    fig.add_artist(CollectsGarbage())
    gc.disable()  # collected in the middle of drawing, not before
    try:
        Unclosed()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            figures.save(fig, tmp_path, "fine")
    finally:
        gc.enable()
    assert [w.category for w in caught] == [ResourceWarning]
