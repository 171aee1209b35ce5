"""The HTML report from stores written through the real Store API."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import cli_command
from perflab.analysis.stats import t_interval
from perflab.errors import UserError
from perflab.report import write_report
from perflab.report.figures import new_figure
from perflab.report.html import fmt, fmt_pct
from perflab.report.section import Figure, Section, Table, Text
from perflab.store import Store
from perflab.workloads.sql import SqlWorkload
from synthetic_store import build_store

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
    ci = t_interval(tps)
    data = _embedded(html)
    combo = next(c for c in data["combinations"] if c["index"] == 3)
    summary = combo["summaries"]["tps"]
    assert summary["n"] == 5 and summary["ci_method"] == "student-t"
    assert summary["ci_low"] == pytest.approx(ci.low) and summary["ci_high"] == pytest.approx(ci.high)
    assert f"[{fmt(ci.low)}, {fmt(ci.high)}]" in html
    assert len(data["runs"]) == 40


def test_failures_flags_and_degradation_are_shown(durability_report: tuple[Path, str]) -> None:
    _, html = durability_report
    assert "server closed the connection unexpectedly" in html
    assert "terminated by signal 9" in html  # the log tail
    assert "client-bound" in html
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
    assert "Degradation needs 3 or more" in html


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
    assert list((out / "figures").glob("degradation-*"))


def test_a_series_that_is_zero_throughout_gets_a_line_not_a_figure(tpcb_report: tuple[Path, str]) -> None:
    out, html = tpcb_report
    assert "0 throughout, in every run shown: tpcb.failed" in html
    assert not list((out / "figures").glob("series-tpcb-failed.*"))
    assert list((out / "figures").glob("series-tpcb-tps.svg"))
