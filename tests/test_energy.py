"""Energy per query and per component: the sharing arithmetic, perf's
interval lines (the fake powercap tree is in test_collectors.py), counters
that do not count (a fake `perf` on PATH, a powercap tree that stays), the model on the real /proc (a busy query against an idle
sleep of the same length), the idle baseline, and per-query energy stored
by TPC-H, SSB and `queries` runs through the CLI."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from perflab.collectors.base import CollectorContext
from perflab.collectors.energy import (
    EnergyCollector,
    EnergySettings,
    Span,
    parse_perf_interval_line,
    share_out,
)
from perflab.context import NullSink, RunContext, SeriesSink
from perflab.model import Flag, QueryTime, RunResult


def test_sharing_splits_concurrent_queries_and_leaves_the_gaps() -> None:
    spans = [Span(0.0, 1.0, {"cpu": 10.0, "dram": 2.0}), Span(1.0, 2.0, {"cpu": 20.0, "dram": 2.0})]
    # q0 alone on [0.5, 1.0); q0 and q1 together on [1.0, 1.5); gap [0, 0.5) and [1.5, 2.0)
    shares = share_out(spans, [(0.5, 1.5), (1.0, 1.5)], ("cpu", "dram"), {"cpu": 4.0, "dram": 2.0})
    (e0, above0), (e1, above1) = shares
    assert e0["cpu"] == pytest.approx(10 * 0.5 + 20 * 0.5 / 2)
    assert e1["cpu"] == pytest.approx(20 * 0.5 / 2)
    assert e0["dram"] + e1["dram"] == pytest.approx(2.0 * 1.0)
    assert above0 == pytest.approx((12 - 6) * 0.5 + (22 - 6) * 0.25)
    assert above1 == pytest.approx((22 - 6) * 0.25)
    total = sum(s.watts["cpu"] * (s.t1 - s.t0) for s in spans)
    gaps = 10 * 0.5 + 20 * 0.5
    assert e0["cpu"] + e1["cpu"] + gaps == pytest.approx(total)
    # no baseline: no above-idle figure
    assert share_out(spans, [(0.0, 2.0)], ("cpu",))[0][1] is None


def test_perf_interval_lines_are_parsed() -> None:
    assert parse_perf_interval_line("     1.000530829,12.84,Joules,power/energy-pkg/,1000581637,100.00,,") == (
        pytest.approx(1.000530829), "energy-pkg", pytest.approx(12.84))
    assert parse_perf_interval_line("2.001,1.5,Joules,power/energy-ram/,1000,100.00,,")[1] == "energy-ram"
    assert parse_perf_interval_line("1.0,<not counted>,Joules,power/energy-pkg/,0,0.00,,") is None
    assert parse_perf_interval_line("# started on Mon") is None
    assert parse_perf_interval_line("1.0,5,,cycles,1000,100.00,,") is None


def _start(collector: EnergyCollector) -> RunContext:
    ctx = RunContext(run_number=1, run_dir=Path("."), t0_ns=time.monotonic_ns())
    collector.start(CollectorContext(run=ctx, endpoint=None, target=None))
    return ctx


def test_model_gives_a_busy_query_more_energy_than_an_idle_sleep(pg_target: Any, scratch_db: Any) -> None:
    """On a real PostgreSQL: a query that computes against pg_sleep for as
    long. The machine is shared with other work, so the model counts the
    server's own CPU (cpu_scope = "target") above the idle power."""
    target, _ = pg_target
    collector = EnergyCollector("energy", EnergySettings(source="model", interval=0.05, idle_baseline=0.3,
                                                         cpu_scope="target"))
    ctx = RunContext(run_number=1, run_dir=Path("."), t0_ns=time.monotonic_ns())
    runs: list[QueryTime] = []
    with scratch_db.connect() as conn:
        collector.start(CollectorContext(run=ctx, endpoint=scratch_db, target=target))

        def timed(name: str, sql: str) -> None:
            start = ctx.now_s()
            conn.execute(sql).fetchall()
            runs.append(QueryTime(0, len(runs) + 1, name, ctx.now_s() - start, started_s=start, text=sql))

        timed("busy", "select sum(x) from generate_series(1, 6000000) as g(x)")
        time.sleep(0.1)
        timed("sleep", f"select pg_sleep({runs[0].seconds})")
        result = collector.stop()
    result.queries = runs
    collector.annotate(result)
    busy_q, sleep_q = runs
    assert busy_q.energy_source == sleep_q.energy_source == "model"
    assert busy_q.energy is not None and sleep_q.energy is not None
    assert busy_q.energy["cpu"] > sleep_q.energy["cpu"]
    assert (busy_q.energy_j or 0) > (sleep_q.energy_j or 0)
    assert (busy_q.energy_above_idle_j or 0) > (sleep_q.energy_above_idle_j or 0)
    m = result.metrics
    # the per-query energy sums to the run's total within the gaps between queries
    in_queries = sum(q.energy_j or 0.0 for q in runs)
    assert 0 < in_queries < m["energy.joules"].value
    assert in_queries + m["energy.gaps.joules"].value == pytest.approx(m["energy.joules"].value, rel=1e-9)
    assert m["energy.gaps.joules"].value > 0  # the 0.1 s between the queries at least
    # above idle = total - idle power x the run's length; every figure names the model
    assert m["energy.idle_baseline_s"].value == pytest.approx(0.3)
    assert m["energy.joules_above_idle"].value < m["energy.joules"].value
    for name in ("energy.joules", "energy.idle_watts", "energy.component.cpu.joules", "energy.queries.joules"):
        assert m[name].method.startswith("model: ")
    method = m["energy.joules"].method
    assert "Cloud Carbon Footprint" in method and "assumed" in method and "target's processes" in method


def test_a_run_shorter_than_a_clock_tick_still_gets_its_energy() -> None:
    """The model reads CPU time from /proc/stat, which moves once per clock
    tick. A run of a few fast queries can start and stop between two ticks;
    the stop sample then waits for the next tick instead of leaving the run
    and its queries with no energy at all."""
    collector = EnergyCollector("energy", EnergySettings(source="model", interval=10.0, idle_baseline=0.0))
    ctx = _start(collector)
    start = ctx.now_s()
    runs = [QueryTime(0, 1, "q", ctx.now_s() - start, started_s=start, text="nothing")]
    result = collector.stop()
    result.queries = runs
    collector.annotate(result)
    assert collector.spans, "no span: the stop sample did not wait for a tick"
    assert runs[0].energy_source == "model" and runs[0].energy_j is not None
    assert result.metrics["energy.joules"].value > 0


ENERGY = '\n[collect]\nenergy = { interval = "100ms", idle_baseline = "300ms", source = "model" }\n'


@pytest.mark.parametrize("workload", [
    'kind = "tpch"\nscale_factor = 0.01\ntests = ["power"]\nseed = 1',
    'kind = "ssb"\nscale_factor = 0.01',
    'kind = "queries"\nqueries = { a = "select count(*) from range(2000000)", b = "select 1" }\nrepetitions = 2',
])
def test_runs_store_each_querys_energy(run_cli: Any, workdir: Path, workload: str) -> None:
    exp = workdir / "e.toml"
    exp.write_text(f'[experiment]\nname = "energy"\n\n[target]\nkind = "duckdb"\n\n[workload]\n{workload}\n{ENERGY}')
    out = workdir / "out"
    run_cli("run", exp, "--out", out, "--quiet")
    db = sqlite3.connect(out / "perflab.sqlite")
    rows = db.execute("select query, seconds, energy_j, energy_above_idle_j, energy_json, energy_source "
                      "from query where status = 'ok'").fetchall()
    metric = dict(db.execute("select name, value from metric").fetchall())
    db.close()
    assert rows
    for _, _, energy_j, above, components, source in rows:
        assert source == "model" and energy_j is not None and above is not None
        parts = json.loads(components)
        assert set(parts) == {"cpu", "dram", "disk"}
        assert sum(parts.values()) == pytest.approx(energy_j, rel=1e-6, abs=1e-9)
    in_queries = sum(r[2] for r in rows)
    assert in_queries <= metric["energy.joules"] * (1 + 1e-9)
    assert metric["energy.queries.joules"] == pytest.approx(in_queries, rel=1e-6)
    html = (out / "report.html").read_text()
    assert "Energy per query" in html and "model" in html


def test_report_plots_energy_delay_across_factors(run_cli: Any, workdir: Path) -> None:
    exp = workdir / "ed.toml"
    exp.write_text(
        '[experiment]\nname = "energy-delay"\nrepetitions = 2\n\n[target]\nkind = "duckdb"\n\n'
        '[workload]\nkind = "queries"\nqueries = { a = "select count(*) from range(3000000)" }\n\n'
        '[factors]\n"target.threads" = [1, 2]\n' + ENERGY
    )
    out = workdir / "out"
    run_cli("run", exp, "--out", out, "--quiet")
    html = (out / "report.html").read_text()
    assert "energy-delay" in html
    # energy per run and per query set are headline metrics: Results and
    # Effects give them like the workload's own figures, with their intervals
    db = sqlite3.connect(out / "perflab.sqlite")
    headlines = [json.loads(h) for (h,) in db.execute("select headline_json from run")]
    db.close()
    assert all(h[-2:] == ["energy.joules", "energy.queries.joules"] for h in headlines), headlines
    results = html[html.index('id="results"'):]
    assert "energy.joules (J)" in results and "energy.queries.joules (J)" in results
    assert (out / "figures" / "energy-delay.png").stat().st_size > 0
    assert (out / "figures" / "energy-per-query.png").stat().st_size > 0
    assert (out / "figures" / "energy-power-over-time.png").stat().st_size > 0
    # the headline table: a row per thread count and component, not per run (issue 27)
    from test_headline_tables import table_with

    table = table_with(html, "Energy (J) per query set, component and resource combination")
    assert table["headers"][:2] == ["threads", "component"]
    assert [r[:2] for r in table["rows"]][:2] == [["1", "total"], ["1", "in queries"]]
    assert {r[0] for r in table["rows"]} == {"1", "2"}
    assert all(r[2].startswith("n=2: ") for r in table["rows"])  # 2 repetitions: the values, no interval


def test_an_idle_baseline_can_be_left_out() -> None:
    collector = EnergyCollector("energy", EnergySettings(source="model", interval=0.05, idle_baseline=0))
    _start(collector)
    time.sleep(0.2)
    result: RunResult = collector.stop()
    assert "energy.joules" in result.metrics and "energy.idle_watts" not in result.metrics


# perf stat -a -x, -I MS -e power/energy-psys/, as a VM without RAPL gives it:
# an interval line every 50 ms, each JOULES joules, until SIGINT.
FAKE_PERF = """#!/bin/sh
trap 'exit 0' INT TERM
i=0
while :; do
  sleep 0.05
  i=$((i + 1))
  echo "$i.0,JOULES,Joules,power/energy-psys/,50000000,100.00,," >&2
done
"""


def _fake_perf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, joules: str) -> dict[str, str]:
    """A `perf` first on PATH whose power/energy-psys/ reads `joules` per
    interval, a power PMU with that one event, and no RAPL: the settings."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    perf = bin_dir / "perf"
    perf.write_text(FAKE_PERF.replace("JOULES", joules))
    perf.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    events = tmp_path / "power-events"
    events.mkdir()
    (events / "energy-psys").write_text("event=0x05\n")
    return {"rapl_root": str(tmp_path / "no-powercap"), "perf_events": str(events)}


class _Sink(SeriesSink):
    def __init__(self) -> None:
        self.names: list[str] = []

    def add(self, source: str, name: str, t: float, value: float | None) -> None:
        self.names.append(name)


def _run_for(collector: EnergyCollector, seconds: float, sink: SeriesSink | None = None) -> RunResult:
    ctx = RunContext(run_number=1, run_dir=Path("."), t0_ns=time.monotonic_ns(), series=sink or NullSink())
    collector.start(CollectorContext(run=ctx, endpoint=None, target=None))
    time.sleep(seconds)
    return collector.stop()


def test_a_perf_counter_that_reads_zero_is_no_measurement_the_model_stands_in_and_the_run_is_flagged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 44: a VM's energy-psys read 0 J and was stored as a measurement."""
    settings = EnergySettings(interval=0.1, idle_baseline=0.2, **_fake_perf(tmp_path, monkeypatch, "0.00"))
    sink = _Sink()
    result = _run_for(EnergyCollector("energy", settings), 0.5, sink)
    assert "watts" not in sink.names  # the counter's zeros were never the run's power
    joules = result.metrics["energy.joules"]
    assert joules.method.startswith("model: ") and joules.value > 0
    assert result.metrics["energy.idle_watts"].method == joules.method
    assert Flag.COUNTER_STALLED in result.flags
    [stalled] = [e for e in result.events if e.kind == "counter-stalled"]
    assert "power/energy-psys/" in stalled.message and "collect.energy.source" in stalled.message
    # the stored power is the model's, not the counter's zeros
    watts = [p.value for p in result.series if p.name == "watts"]
    assert watts and all(w > 0 for w in watts)
    assert {p.name for p in result.series} >= {"model.cpu.watts", "model.dram.watts"}


def test_a_perf_counter_that_advances_is_the_measurement(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """energy-psys alone (no energy-pkg, no energy-ram) is the total, not 0 J."""
    settings = EnergySettings(interval=0.1, idle_baseline=0, **_fake_perf(tmp_path, monkeypatch, "0.50"))
    sink = _Sink()
    result = _run_for(EnergyCollector("energy", settings), 1.0, sink)
    m = result.metrics
    assert m["energy.joules"].method == "perf"
    assert m["energy.joules"].value > 0
    assert m["energy.joules"].value == pytest.approx(m["energy.component.psys.joules"].value)
    assert Flag.COUNTER_STALLED not in result.flags
    assert not [e for e in result.events if e.kind == "counter-stalled"]
    assert "watts" in sink.names and "psys.watts" in sink.names  # live, as the counter advanced


def test_a_rapl_package_that_stays_put_is_no_measurement(tmp_path: Path) -> None:
    zone = tmp_path / "powercap" / "intel-rapl:0"
    zone.mkdir(parents=True)
    (zone / "name").write_text("package-0\n")
    (zone / "max_energy_range_uj").write_text("262143328850\n")
    (zone / "energy_uj").write_text("123456789\n")  # never moves
    settings = EnergySettings(interval=0.1, idle_baseline=0, rapl_root=str(tmp_path / "powercap"))
    result = _run_for(EnergyCollector("energy", settings), 0.4)
    assert result.metrics["energy.joules"].method.startswith("model: ")
    assert "energy.package-0.joules" not in result.metrics
    assert Flag.COUNTER_STALLED in result.flags
    [stalled] = [e for e in result.events if e.kind == "counter-stalled"]
    assert str(zone / "energy_uj") in stalled.message


def test_a_model_asked_for_says_so_on_a_machine_with_power_events(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 44: source = "model" said "no perf power events" where perf had them."""
    settings = EnergySettings(source="model", interval=0.1, idle_baseline=0,
                              **_fake_perf(tmp_path, monkeypatch, "0.50"))
    result = _run_for(EnergyCollector("energy", settings), 0.2)
    notes = [e.message for e in result.events if e.kind == "collector-info"]
    assert notes and all('source = "model"' in n for n in notes), notes
    assert not any("no perf power events" in n for n in notes), notes
    assert result.metrics["energy.joules"].method.startswith("model: ")
    assert Flag.COUNTER_STALLED not in result.flags


def test_the_energy_section_names_the_runs_whose_counter_stalled() -> None:
    from perflab.collectors.energy_report import sections
    from perflab.section import RunGroup, Text

    runs = [{"id": 1, "factors": {}, "flags": [Flag.COUNTER_STALLED.value],
             "metrics": {"energy.joules": 40.0, "energy.seconds": 4.0}},
            {"id": 2, "factors": {}, "flags": [], "metrics": {"energy.joules": 50.0, "energy.seconds": 4.0}}]
    [section] = [s for s in sections([RunGroup(1, "all runs", runs)]) if s.title == "Energy per query"]
    [text] = [b.text for b in section.blocks if isinstance(b, Text) and Flag.COUNTER_STALLED.value in b.text]
    assert text.endswith(": run 1.")
