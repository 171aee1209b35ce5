"""The HTML report from stores written through the real Store API."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from conftest import cli_command
from perflab.analysis.stats import WIDE_FACTOR
from perflab.errors import UserError
from perflab.report import write_report
from perflab.report.figures import new_figure
from perflab.report.html import fmt, fmt_pct
from perflab.section import Figure, Section, Table, Text
from perflab.store import Store
from perflab.workloads.sql import SqlWorkload
from synthetic_store import build_store

scipy_stats = pytest.importorskip("scipy.stats")

EXTERNAL_REF = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:|//)""", re.IGNORECASE)


def _embedded(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="perflab-data">(.*?)</script>', html, re.S)
    assert m
    return json.loads(m.group(1))


@pytest.fixture(scope="module")
def durability_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = build_store(tmp_path_factory.mktemp("durability") / "out", repetitions=5, degrade_pct_per_run=3.0,
                      fail_runs=(7,), client_bound_from=8)
    path = write_report(out)
    return out, path.read_text()


def test_report_is_one_self_contained_file_with_figures(durability_report: tuple[Path, str]) -> None:
    out, html = durability_report
    assert (out / "report.html").is_file()
    assert not EXTERNAL_REF.search(html), "the report must not reference anything outside itself"
    assert "default-src 'none'" in html  # and the browser is told to fetch nothing
    svgs = sorted(p.stem for p in (out / "figures").glob("*.svg"))
    pngs = sorted(p.stem for p in (out / "figures").glob("*.png"))
    assert svgs == pngs and "scaling-tps-vs-clients" in svgs and "cpu-split" in svgs
    assert html.count("<svg") >= len(svgs)  # every figure inline


def test_results_table_holds_mean_ci_n_cv_from_the_store(durability_report: tuple[Path, str]) -> None:
    out, html = durability_report
    store = Store.open(out)
    try:
        runs = [r for r in store.runs() if r["combination"] == 3 and r["status"] == "done"]
        tps = [m["value"] for r in runs for m in store.metrics(r["id"]) if m["name"] == "tps"]
    finally:
        store.close()
    # the interval of the geometric mean: scipy's t interval of the mean of the logs, exponentiated
    y = np.log(tps)
    low, high = np.exp(scipy_stats.t.interval(0.95, len(y) - 1, loc=y.mean(), scale=scipy_stats.sem(y)))
    data = _embedded(html)
    combo = next(c for c in data["combinations"] if c["index"] == 3)
    summary = combo["summaries"]["tps"]
    assert summary["n"] == 5 and summary["ci_method"] == "t interval of the mean of logs (geometric mean)"
    assert summary["ci_low"] == pytest.approx(low) and summary["ci_high"] == pytest.approx(high)
    assert f"[{fmt(low)}, {fmt(high)}]" in html
    assert "Limpert, Stahel &amp; Abbt 2001" in html  # the method is cited where the intervals are
    assert len(data["runs"]) == 40


def test_failures_flags_and_degradation_are_shown(durability_report: tuple[Path, str]) -> None:
    _, html = durability_report
    assert "server closed the connection unexpectedly" in html
    assert "terminated by signal 9" in html  # the log tail
    assert "client-bound" in html
    # the process collector's own section: server and driver CPU per combination
    assert "CPU: server and driver" in html and "driver share (%)" in html
    # 3% lost per repetition: the trend test says so, and OSDL's column is there
    assert "degrades by trend" in html
    runs = [r for r in _embedded(html)["runs"] if r["combination"] == 3]
    first, last = runs[0]["metrics"]["tps"], runs[-1]["metrics"]["tps"]
    assert fmt_pct((last - first) / first * 100) in html
    assert "Matteson &amp; James" in html


def test_workload_sections_come_from_the_workload(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []

    def sections(cls: type, store: Store, runs: list[dict]) -> list[Section]:
        seen.append(len(runs))
        fig = new_figure()
        fig.add_subplot().bar(["q1", "q2"], [1.0, 2.0])
        return [Section("Per-query times", [Text("from the workload <itself>"),
                                            Table(["query", "seconds"], [["q1", 1.0], ["q2", 2.0]]),
                                            Figure("per-query", fig, "per-query bars")])]

    monkeypatch.setattr(SqlWorkload, "report_sections", classmethod(sections))
    out = build_store(tmp_path / "out", clients=[1], sync=["on"], repetitions=2)
    html = write_report(out).read_text()
    assert seen == [2]
    assert "Per-query times" in html and "from the workload &lt;itself&gt;" in html
    assert (out / "figures" / "per-query.svg").is_file()


def test_a_failing_workload_section_does_not_lose_the_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(cls: type, store: Store, runs: list[dict]) -> list[Section]:
        raise KeyError("q99")

    monkeypatch.setattr(SqlWorkload, "report_sections", classmethod(broken))
    out = build_store(tmp_path / "out", clients=[1], sync=["on"], repetitions=1)
    html = write_report(out).read_text()
    assert "section failed: KeyError" in html and "Results" in html


def test_single_runs_and_no_numeric_factor_get_notes_not_errors(tmp_path: Path) -> None:
    out = build_store(tmp_path / "out", clients=[4], sync=["on", "off"], repetitions=1)
    html = write_report(out).read_text()
    assert "n=1: no interval" in html
    assert "no scaling curve" in html
    assert "Degradation needs 5 or more" in html


def test_report_of_a_directory_without_a_store_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no perflab store"):
        write_report(tmp_path)


def test_latency_percentiles_merge_the_repetitions_exactly() -> None:
    from perflab import _engine
    from perflab.report import latency

    fast = _engine.hdr_encode([100] * 90)
    slow = _engine.hdr_encode([5000] * 10)
    values, count = latency.merged_percentiles([fast, slow], [50.0, 89.0, 95.0, 99.0])
    assert count == 100
    assert values[0] == pytest.approx(100, rel=0.01) and values[1] == pytest.approx(100, rel=0.01)
    assert values[2] == pytest.approx(5000, rel=0.01) and values[3] == pytest.approx(5000, rel=0.01)
    with pytest.raises(latency.HistogramsUnavailable):
        latency.merged_percentiles([fast], [50.0], encoding="other")


def test_report_draws_the_latency_spectrum(durability_report: tuple[Path, str]) -> None:
    out, html = durability_report
    assert "percentile spectrum (all repetitions merged)" in html
    assert "spectrum skipped" not in html
    assert list((out / "figures").glob("latency-spectrum-*.svg"))


def test_figure_names_from_metric_names_with_dots_become_file_names() -> None:
    from perflab.report.figures import file_name

    assert file_name("latency-spectrum-latency.tpcb-like") == "latency-spectrum-latency_tpcb-like"
    assert file_name("degradation-1-ins.mean_ms") == "degradation-1-ins_mean_ms"
    with pytest.raises(ValueError):
        file_name("..")


@pytest.fixture(scope="module")
def tpcb_report() -> Iterator[tuple[Path, str]]:
    """A real tpcb experiment (3 short runs on a managed PostgreSQL) and its report."""
    d = Path(tempfile.mkdtemp(prefix="perflab-report-", dir="/tmp"))
    d.chmod(0o755)
    f = d / "e.toml"
    f.write_text(
        '[experiment]\nname = "real"\nrepetitions = 3\n[target]\nkind = "postgres"\n'
        '[workload]\nkind = "tpcb"\nscale = 1\nduration = "2s"\nclients = 2\n[collect]\n'
    )
    out = d / "out"
    subprocess.run(cli_command("run", f, "--out", out, "--quiet"), check=True, capture_output=True, timeout=240)
    yield out, (out / "report.html").read_text()
    shutil.rmtree(d, ignore_errors=True)


def test_report_of_a_real_tpcb_experiment(tpcb_report: tuple[Path, str]) -> None:
    """The engine's histogram names hold dots (latency.tpcb-like) and reach
    figure file names; the report must draw them, not fail."""
    out, html = tpcb_report
    assert "percentile spectrum" in html
    assert list((out / "figures").glob("latency-spectrum-latency_tpcb-like.svg"))
    # 3 repetitions: too few for a trend, and the report says so rather than draw one
    assert not list((out / "figures").glob("degradation-*")) and "Degradation needs 5 or more" in html


def test_a_series_that_is_zero_throughout_gets_a_line_not_a_figure(tpcb_report: tuple[Path, str]) -> None:
    out, html = tpcb_report
    assert "0 throughout, in every run shown: tpcb.failed" in html
    assert not list((out / "figures").glob("series-tpcb-failed.*"))
    assert list((out / "figures").glob("series-tpcb-tps.svg"))


# ----------------------------------------------------------------- issue 18: the report answers the question


def _set_spec(out: Path, old: str, new: str) -> None:
    import sqlite3

    db = sqlite3.connect(out / "perflab.sqlite")
    with db:
        text = db.execute("SELECT spec_text FROM experiment").fetchone()[0]
        assert old in text
        db.execute("UPDATE experiment SET spec_text = ?", (text.replace(old, new),))
    db.close()


def test_the_effect_of_each_factor_is_one_line_with_a_ratio_ci_and_verdict(tmp_path: Path) -> None:
    # synthetic figures: synchronous_commit=off gives 520 tx/s where on gives 300 (x1.733), 1.5% noise
    out = build_store(tmp_path / "out", clients=[2], sync=["on", "off"], repetitions=3, histograms=False)
    html = write_report(out).read_text()
    line = re.search(r"<li>synchronous_commit = off against on: tps x(\d\.\d+), 95% CI \[(\d\.\d+), (\d\.\d+)\]: "
                     r"(\w+)</li>", html)
    assert line, html[:3000]
    ratio, low, high = (float(line.group(i)) for i in (1, 2, 3))
    assert 1.65 < low < ratio < high < 1.9 and line.group(4) == "better"
    assert html.index('id="effects"') < html.index('id="results"')

    # a baseline named in the file: the other level is measured against it
    _set_spec(out, "seed = 7\n", 'seed = 7\n[experiment.baseline]\n"target.settings.synchronous_commit" = "off"\n')
    html = write_report(out).read_text()
    assert re.search(r"<li>synchronous_commit = on against off: tps x0\.5\d+, 95% CI \[0\.5\d+, 0\.[56]\d+\]: worse</li>",
                     html)
    assert "the baseline is the level named in [experiment.baseline]" in html


def test_a_baseline_that_is_no_level_is_refused(tmp_path: Path, run_cli) -> None:
    f = tmp_path / "e.toml"
    f.write_text('[experiment]\nname = "b"\n[experiment.baseline]\n"workload.iterations" = 3\n[target]\n'
                 'kind = "postgres"\n[workload]\nkind = "sql"\nstatements = ["SELECT 1"]\n'
                 '[factors]\n"workload.iterations" = [1, 2]\n')
    proc = run_cli("check", f, check=False)
    assert proc.returncode == 2
    assert 'experiment.baseline."workload.iterations": got 3; allowed: one of its levels, [1, 2]' in proc.stderr


def test_a_default_level_shows_as_default(tmp_path: Path) -> None:
    out = build_store(tmp_path / "out", clients=[1, 2], sync=["", "off"], repetitions=3, histograms=False)
    html = write_report(out).read_text()
    assert "synchronous_commit = off against default" in html
    assert "<td>default</td>" in html
    assert not re.search(r"synchronous_commit=(?:[,<)\s]|$)", html)
    # the scaling lines too, in their legend (an SVG text) and in the best-point table
    assert "<td>synchronous_commit=default</td>" in html


def test_no_interval_of_a_positive_figure_goes_below_zero(tmp_path: Path) -> None:
    """Three spread runs (a noisy disk): the t interval of their mean TPS would
    start below zero; the interval of the geometric mean cannot. Wider still,
    the report says "too few runs" instead of bounds."""
    import sqlite3

    out = build_store(tmp_path / "out", clients=[1, 2, 4], sync=["on"], repetitions=3, histograms=False)
    db = sqlite3.connect(out / "perflab.sqlite")
    values = (350.0, 800.0, 500.0, 340.0, 780.0, 520.0, 293.0, 977.0, 100.0)
    with db:
        for run_id, tps in zip(range(1, 10), values, strict=True):
            db.execute("UPDATE metric SET value = ? WHERE run_id = ? AND name = 'tps'", (tps, run_id))
    db.close()
    html = write_report(out).read_text()
    combos = _embedded(html)["combinations"]
    for combo, tps in zip(combos, (values[0:3], values[3:6]), strict=False):
        y = np.log(tps)
        assert scipy_stats.t.interval(0.95, 2, loc=np.mean(tps), scale=scipy_stats.sem(tps))[0] < 0
        low = np.exp(scipy_stats.t.interval(0.95, 2, loc=y.mean(), scale=scipy_stats.sem(y))[0])
        assert combo["summaries"]["tps"]["ci_low"] == pytest.approx(low) and low > 0
    # 293, 977, 100: the interval would span x1,000; it is not printed
    assert combos[2]["summaries"]["tps"]["ci_too_wide"] and combos[2]["summaries"]["tps"]["ci_low"] is None
    results = html[html.index('id="results"'):html.index('id="scaling"')]
    assert ">too few runs</td>" in results and f"too few runs: an interval spans more than x{WIDE_FACTOR:g}" in results
    assert not re.search(r"\[-\d", html)  # no printed interval starts below zero


def test_two_runs_a_level_print_no_interval_draw_no_band_give_no_verdict(tmp_path: Path) -> None:
    from perflab.analysis.scaling import scaling_curves
    from perflab.report.data import load
    from perflab.report.figures import scaling_figure

    out = build_store(tmp_path / "out", clients=[1, 2, 4], sync=["on", "off"], repetitions=2, histograms=False)
    html = write_report(out).read_text()
    results = html[html.index('id="results"'):html.index('id="scaling"')]
    # the values themselves, and how many runs an interval needs; no bounds
    assert results.count("the runs&#x27; values: an interval needs 3 runs") == 12  # 6 combinations x 2 metrics
    assert len(re.findall(r">n=2: [\d,.]+; [\d,.]+</td>", results)) == 12
    assert "[" not in re.sub(r"<[^>]+>", "", results.split("<table")[1].split("</table>")[0])
    assert re.search(r"n=2: no interval \(needs 3 runs\); about \d+ repetitions for \+-5%", results)
    assert all(s["ci_low"] is None for c in _embedded(html)["combinations"] for s in c["summaries"].values())
    # no verdict: every comparison says too few runs, and the answers say how many were not tested
    effects_html = html[html.index('id="effects"'):html.index('id="results"')]
    assert ">better<" not in effects_html and ">worse<" not in effects_html
    # 2 metrics x (2 clients levels x 2 sync contexts + 1 sync level x 3 clients contexts)
    assert effects_html.count(">too few runs<") == 2 * (2 * 2 + 3)
    assert "tps: not tested: 7 comparison(s) with fewer than 3 runs a side" in effects_html
    # no band in the scaling figure: only the runs as points, and the mean line
    store = Store.open(out)
    try:
        data = load(store)
    finally:
        store.close()
    rows = [(r["factors"], data.values[r["id"]]["tps"]) for r in data.runs]
    fig = scaling_figure(scaling_curves(rows, "workload.clients"), "workload.clients", "tps", "95% CI")
    ax = fig.axes[0]
    kinds = {type(c).__name__ for c in ax.collections}
    assert kinds == {"PathCollection"}  # scatter points; fill_between would add a PolyCollection
    assert sum(len(c.get_offsets()) for c in ax.collections) == len(rows)  # every run is a point
    fig.clear()


def test_a_scaling_axis_fits_the_runs_not_the_bands() -> None:
    from perflab.analysis.scaling import scaling_curves
    from perflab.report.figures import scaling_figure

    # 3 runs a point, one of them wide (its band is not drawn) and one narrow (drawn)
    rows = [({"workload.clients": 1}, v) for v in (100.0, 110.0, 105.0)]
    rows += [({"workload.clients": 2}, v) for v in (150.0, 400.0, 60.0)]
    fig = scaling_figure(scaling_curves(rows, "workload.clients"), "workload.clients", "tps", "95% CI")
    ax = fig.axes[0]
    low, high = ax.get_ylim()
    assert 0 <= low <= 60.0 and 400.0 <= high <= 400.0 * 1.1
    assert {type(c).__name__ for c in ax.collections} >= {"PathCollection"}
    fig.clear()


def test_a_zero_over_zero_ratio_says_undefined(tmp_path: Path) -> None:
    out = build_store(tmp_path / "out", clients=[1], sync=["on", "off"], repetitions=3, histograms=False,
                      zero_failures=True)
    html = write_report(out).read_text()
    effects_html = html[html.index('id="effects"'):html.index('id="results"')]
    row = re.search(r"<tr[^>]*>(?:(?!</tr>).)*queries_failed(?:(?!</tr>).)*</tr>", effects_html, re.S)
    assert row and ">undefined<" in row.group(0)
    assert "better" not in row.group(0) and "worse" not in row.group(0) and "nan" not in row.group(0)


def test_levels_that_resolve_to_one_set_up_give_the_noise_floor(tmp_path: Path) -> None:
    """synchronous_commit = true is "on" as the server reports it: two levels,
    one set-up. The report finds them from the stored target descriptions,
    pools their runs into the noise floor and calls no change between them."""
    out = build_store(tmp_path / "out", clients=[2], sync=["on", "true", "off"], repetitions=3, histograms=False,
                      sync_described={"true": "on"}, tps_noise=0.02)
    html = write_report(out).read_text()
    results = html[html.index('id="results"'):html.index('id="scaling"')]
    assert "Noise floor" in results and "ISO 5725-6" in results
    assert "1 group(s) of combinations resolve to the same set-up" in results
    assert re.search(r"<li>#1 clients=2, synchronous_commit=on; #2 clients=2, synchronous_commit=true: largest "
                     r"ratio tps x1\.\d+", results)
    # the floor's figure is that of the pooled groups, computed here with numpy
    store = Store.open(out)
    try:
        tps = {r["id"]: m["value"] for r in store.runs() for m in store.metrics(r["id"]) if m["name"] == "tps"}
    finally:
        store.close()
    groups = [[tps[i] for i in range(1, 7)], [tps[i] for i in range(7, 10)]]
    ss = sum(((np.log(g) - np.log(g).mean()) ** 2).sum() for g in groups)
    sd = np.sqrt(ss / (5 + 2))
    assert f"x{np.exp(-2.8 * sd):.3f} - x{np.exp(2.8 * sd):.3f}" in results
    effects_html = html[html.index('id="effects"'):html.index('id="results"')]
    # "true" against "on" is no effect: it is not tested, and says why
    assert "tps: not tested: 1 comparison(s) between levels that ran one set-up" in effects_html
    row = re.search(r"<tr[^>]*><td>synchronous_commit</td><td>true</td><td>on</td>(?:(?!</tr>).)*tps(?:(?!</tr>).)*"
                    r"</tr>", effects_html, re.S)
    assert row and ">same set-up<" in row.group(0) and "[" not in row.group(0)
    assert re.search(r"<li>synchronous_commit = off against on: tps x1\.\d+, 95% CI \[[^]]+\]: better</li>",
                     effects_html)
    assert "adjusted for the false discovery rate (Benjamini &amp; Hochberg 1995)" in effects_html


def test_zero_rules_of_two_types_are_one_set_up(tmp_path: Path) -> None:
    """The netfilter study's 0 rules under two rule types: the router's own
    description (as stored per run) says the type did not change what ran."""
    from perflab.report.data import setup_key
    from perflab.targets.router import RouterSettings, RouterTarget

    def run(count: int, kind: str, frame: int = 256) -> dict:
        target = RouterTarget(RouterSettings(kind="router", rules={"count": count, "type": kind, "backend": "nft"}),
                              tmp_path)
        target.install_s = 0.01 * count  # a timing differs run to run
        return {"factors": {"target.rules.count": count, "target.rules.type": kind, "workload.frame_size": frame},
                "target": json.loads(json.dumps(target.describe()))}

    assert setup_key(run(0, "nomatch-address")) == setup_key(run(0, "nomatch-port"))
    assert setup_key(run(500, "nomatch-address")) != setup_key(run(500, "nomatch-port"))
    assert setup_key(run(0, "nomatch-address")) != setup_key(run(500, "nomatch-address"))
    assert setup_key(run(0, "nomatch-address")) != setup_key(run(0, "nomatch-port", frame=1518))


def test_a_figure_measured_in_fewer_runs_says_its_own_n(tmp_path: Path) -> None:
    """A load is measured once and reused by the other repetitions: its cell
    must not suggest an interval over the combination's three runs."""
    import sqlite3

    out = build_store(tmp_path / "out", clients=[1], sync=["on"], repetitions=3, histograms=False)
    db = sqlite3.connect(out / "perflab.sqlite")
    with db:
        db.execute("INSERT INTO metric VALUES (1, 'load.total_s', 12.5, 's', 'load phase total', 0, 'measured')")
        db.execute("""UPDATE run SET headline_json = '["tps", "latency_mean_ms", "load.total_s"]'""")
    db.close()
    html = write_report(out).read_text()
    results = html[html.index('id="results"'):html.index('id="scaling"')]
    assert ">n=1: 12.5</td>" in results


def test_settings_perflab_sets_per_run_are_not_differences(tmp_path: Path) -> None:
    import sqlite3

    out = build_store(tmp_path / "out", clients=[1, 2], sync=["on", "off"], repetitions=1, histograms=False)
    db = sqlite3.connect(out / "perflab.sqlite")
    with db:
        for run_id, target_json in db.execute("SELECT id, target_json FROM run").fetchall():
            target = json.loads(target_json)
            target["connection_settings"] = {"unix_socket_directories": f"/tmp/perflab-pg-{run_id}"}
            db.execute("UPDATE run SET target_json = ? WHERE id = ?", (json.dumps(target), run_id))
    db.close()
    html = write_report(out).read_text()
    differ = html[html.index("Settings that differ between combinations"):]
    differ = differ[:differ.index("</table>")]
    assert "synchronous_commit" in differ and "unix_socket_directories" not in differ


def test_telemetry_leaves_out_a_partial_last_sample(tmp_path: Path) -> None:
    """vmstat's last sample, taken at stop 0.12 s after the one before, is not
    drawn (the store keeps it)."""
    from perflab.model import RunResult, SeriesPoint
    from perflab.report.telemetry import _load

    out = build_store(tmp_path / "out", clients=[1], sync=["on"], repetitions=1, series_points=5, histograms=False)
    store = Store.open(out)
    try:
        store.finish_run(1, RunResult(series=[SeriesPoint("vmstat", "us_pct", 10.12, 99.0)]), status="done",
                         seconds=10.0, target=None)
        ts, values = _load(store, 1, "vmstat")["us_pct"]
        assert ts == [2.0, 4.0, 6.0, 8.0, 10.0] and 99.0 not in values
        assert 10.12 in [s["t"] for s in store.series(1, "vmstat") if s["name"] == "us_pct"]
    finally:
        store.close()


def test_a_scaling_axis_of_clients_has_integer_ticks() -> None:
    from perflab.analysis.scaling import scaling_curves
    from perflab.report.figures import scaling_figure

    rows = [({"workload.clients": c}, 100.0 * c + r) for c in (1, 2, 3, 4) for r in range(3)]
    fig = scaling_figure(scaling_curves(rows, "workload.clients"), "workload.clients", "tps", "95% CI")
    ticks = list(fig.axes[0].get_xticks())
    assert ticks == [1, 2, 3, 4]
    fig.clear()


def test_tpch_query_columns_and_bars_are_labelled_by_factor_values() -> None:
    from perflab.workloads.tpch.report import run_labels

    runs = [{"id": i, "repetition": rep, "factors": {"target.kind": kind}}
            for i, (kind, rep) in enumerate([("postgres", 1), ("postgres", 2), ("duckdb", 1), ("duckdb", 2)], 1)]
    assert run_labels(runs) == {1: "postgres #1", 2: "postgres #2", 3: "duckdb #1", 4: "duckdb #2"}
    once = [{"id": 1, "repetition": 1, "factors": {"target.kind": "postgres"}},
            {"id": 2, "repetition": 1, "factors": {"target.kind": "duckdb"}}]
    assert run_labels(once) == {1: "postgres", 2: "duckdb"}
    assert run_labels([{"id": 7, "repetition": 1, "factors": {}}]) == {7: "run 7"}
    # a run's marks (resumed, retried, fresh load) follow its label, as every table that lists runs shows them
    marked = [{"id": 3, "repetition": 1, "factors": {}, "status": "done", "flags": ["noisy-host", "resumed"]},
              {"id": 4, "repetition": 1, "factors": {}, "status": "failed", "flags": ["retried", "fresh load"]}]
    assert run_labels(marked) == {3: "run 3 (resumed)", 4: "run 4 (failed, retried, fresh load)"}


def test_tpcc_tables_without_a_flags_column_mark_a_resumed_run_in_its_status(tmp_path: Path) -> None:
    from perflab.report.data import load
    from perflab.workloads.tpcc import report as tpcc_report

    out = build_store(tmp_path / "out", clients=[1], sync=["on"], repetitions=2)
    store = Store.open(out)
    store.conn.execute("INSERT INTO attempt (run_id, attempt, status, started_at, error) "
                       "VALUES (2, 1, 'killed', '2026-01-01T00:00:00', 'killed: pid 1 died')")
    sections = tpcc_report.sections(store, load(store).runs)
    store.close()
    tables = [b for s in sections for b in s.blocks if isinstance(b, Table) and b.headers[:3] == ["run", "factors",
                                                                                                  "status"]]
    assert len(tables) == 4 and tables[0].headers[-1] == "flags" and "resumed" in tables[0].rows[1][-1]
    for table in tables[1:]:
        assert [row[2] for row in table.rows] == ["done", "done (resumed)"], table.caption


def test_every_run_mark_the_store_gives_has_its_meaning_in_the_report() -> None:
    from perflab.report.sections.base import MARK_MEANING
    from perflab.store import RUN_MARKS

    assert list(MARK_MEANING) == list(RUN_MARKS)


def test_tpcc_metrics_table_has_late_and_skipped_columns_only_where_a_run_has_them(tmp_path: Path) -> None:
    from perflab.report.data import load
    from perflab.workloads.tpcc import report as tpcc_report

    def metrics_table(store: Store) -> Table:
        sections = tpcc_report.sections(store, load(store).runs)
        return next(b for s in sections for b in s.blocks if isinstance(b, Table) and b.caption == "TPC-C metrics per run")

    out = build_store(tmp_path / "out", clients=[1], sync=["on"], repetitions=2)
    store = Store.open(out)
    assert "late" not in metrics_table(store).headers
    store.conn.execute("INSERT INTO metric (run_id, name, value, unit) VALUES (2, 'late', 7, 'transactions')")
    late = metrics_table(store)
    store.conn.execute("INSERT INTO metric (run_id, name, value, unit) VALUES (2, 'skipped', 0, 'transactions')")
    both = metrics_table(store)
    store.close()
    assert late.headers[-2:] == ["late", "flags"] and [row[-2] for row in late.rows] == [None, 7.0]
    assert both.headers[-3:] == ["late", "skipped", "flags"] and [row[-2] for row in both.rows] == [None, 0.0]


def test_resumed_retried_and_fresh_load_runs_are_marked_in_every_table(tmp_path: Path) -> None:
    """A durability study whose run 3 was killed and run again, whose run 4
    failed (retried, failed again), and whose run 5 ran on a fresh load: the
    plan, degradation (summary and per run), failures and summary say so, the
    degradation table keeps each run at its repetition, and the history lists
    the sessions."""
    out = build_store(tmp_path / "out", clients=[1], sync=["on"], repetitions=6, fail_runs=(4,))
    store = Store.open(out)
    first = store.begin_session("run")
    store.conn.execute("UPDATE session SET ended = 'killed', note = 'it died without ending' WHERE id = ?", (first,))
    second = store.begin_session("resume --retry-failed", "run 3 was in flight; failed run 4 run again")
    store.end_session(second, "finished (3 done, 1 failed)")
    store.conn.execute("INSERT INTO attempt (run_id, attempt, status, started_at, error, files) "
                       "VALUES (3, 1, 'killed', '2026-01-01T00:00:00', 'killed: pid 1 died', 'runs/003/attempt-1')")
    store.conn.execute("INSERT INTO attempt (run_id, attempt, status, started_at, error) "
                       "VALUES (4, 1, 'failed', '2026-01-01T00:00:00', 'server closed the connection')")
    store.add_effect(5, "load", {"data_key": "k", "reload": True})
    store.close()
    html = write_report(out).read_text()
    plain = re.sub(r"<[^>]+>", " ", html)
    assert re.search(r"\b3\b.*resumed", plain)
    # the degradation summary: what it stands on, and which run has no value
    assert "no value: #4 (failed)" in plain and "resumed: #3" in plain and "retried: #4" in plain
    assert "fresh load: #5" in plain
    # per run, each at its repetition number, the failed one's gap shown
    rows = re.findall(r"<tr><td>#(\d)</td><td[^>]*>(\d)</td>.*?</tr>", html[html.find('id="degradation"'):])
    assert [(int(a), int(b)) for a, b in rows[:6]] == [(n, n) for n in range(1, 7)]
    assert "failed: no value, retried" in plain
    assert "repetition 4, retried)" in plain  # the failure's heading
    assert "resumed: 1 run(s)" in plain and "fresh load: 1 run(s)" in plain  # the summary's flags
    assert "resumed: an earlier attempt of the run was interrupted or killed" in plain
    history = plain[plain.find("Experiment history"):]
    assert "resume --retry-failed" in history and "killed" in history and "runs/003/attempt-1" in history
