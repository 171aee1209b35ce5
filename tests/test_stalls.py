"""A stall in closed loop is named (issue 34): the server SIGSTOPped for 3 s
in a closed-loop tpcb or oltp run flags the run `stalled`, with an event naming the
seconds, and no second without completions stores a latency of 0."""

from __future__ import annotations

import math
import sqlite3
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import server_stalled
from perflab.context import RunContext, SeriesSink
from perflab.model import Flag, RunResult
from perflab.report import figures, write_report
from perflab.workloads.oltp import OltpSettings, OltpWorkload
from perflab.workloads.stalls import StallWatch, interval_value
from perflab.workloads.tpcb import TpcbSettings, TpcbWorkload
from synthetic_store import build_store


class Recorder(SeriesSink):
    def __init__(self) -> None:
        self.points: list[tuple[str, str, float, float | None]] = []

    def add(self, source: str, name: str, t: float, value: float | None) -> None:
        self.points.append((source, name, t, value))


def second(t: float, transactions: int, warmup: bool = False) -> SimpleNamespace:
    return SimpleNamespace(t_s=t, interval_s=1.0, warmup=warmup, transactions=transactions,
                           latency_p99_ms=0.0, latency_mean_ms=0.0, lag_count=0, lag_mean_ms=0.0)


def test_a_second_without_completions_has_no_latency_and_flags_closed_loop() -> None:
    assert interval_value(second(3, 0), "latency_p99_ms") is None
    assert interval_value(second(3, 0), "transactions") == 0.0
    watch = StallWatch(closed_loop=True)
    for t, n in enumerate([100, 110, 0, 0, 0, 105, 98], start=1):
        watch.add(second(t, n))
    result = RunResult()
    watch.annotate(result)
    assert result.flags == [Flag.STALLED]
    assert result.metrics["stall.longest_s"].value == 3
    assert "the longest gap 3 s from 2 s" in result.events[0].message
    # Open loop shows a stall as latency: no flag; a steady closed loop: none either.
    for closed, counts in ((False, [100, 0, 0, 100]), (True, [100, 95, 60, 104, 99])):
        watch = StallWatch(closed_loop=closed)
        for t, n in enumerate(counts, start=1):
            watch.add(second(t, n))
        result = RunResult()
        watch.annotate(result)
        assert result.flags == []


def test_closed_loop_throughput_under_a_tenth_of_its_median_for_over_a_second_is_a_stall() -> None:
    """Seconds that completed something, but under STALL_FRACTION of the
    median: two in a row are a stall, one alone is not."""
    for counts, flagged, where in (([100, 104, 6, 5, 99, 101, 97], True, "at 2-4 s"),
                                   ([100, 98, 102, 97, 4, 3], True, "at 4-6 s"),
                                   ([100, 5, 100, 102, 98], False, ""),
                                   ([100, 12, 11, 99, 101], False, "")):  # 11% and 12% of the median: above
        watch = StallWatch(closed_loop=True)
        for t, n in enumerate(counts, start=1):
            watch.add(second(t, n))
        result = RunResult()
        watch.annotate(result)
        assert (result.flags == [Flag.STALLED]) is flagged, counts
        if flagged:
            assert result.metrics["stall.longest_s"].value == 2
            [event] = result.events
            assert event.kind == "stalled" and where in event.message and "the longest gap 2 s" in event.message


def test_the_server_log_s_cause_leads_the_message(tmp_path: Path) -> None:
    """A PANIC leads (before a FATAL that came first), a shutdown's FATAL
    is no cause, and a full disk is named by its device and path, with the fix."""
    from perflab.hostctl.mounts import device_of
    from perflab.runner import server_cause

    symptom = "tpcb load failed: connection lost: Broken pipe (os error 32)"
    log = ("LOG:  checkpoint starting\n"
           "FATAL:  role \"nobody\" does not exist\n"
           "PANIC:  could not write to file \"pg_wal/xlogtemp.42\": No space left on device\n"
           "FATAL:  the database system is shutting down\n")
    (tmp_path / "pg_wal").mkdir()
    said = server_cause(symptom, log, [tmp_path])
    device, mount = device_of(tmp_path / "pg_wal" / "xlogtemp.42")
    first, fix, then = said.splitlines()
    assert first == (f"no space left on {device} ({tmp_path / 'pg_wal' / 'xlogtemp.42'}; the filesystem at {mount}): "
                     "PANIC: could not write to file \"pg_wal/xlogtemp.42\": No space left on device")
    assert fix.startswith(f"  fix: free space on {device}, or put the server's data (target.storage) on a larger")
    assert then == f"  then: {symptom}"
    crash = server_cause(symptom, "FATAL:  role \"x\" does not exist\nPANIC:  could not locate a valid checkpoint "
                         "record\n", [tmp_path])
    assert crash == f"server PANIC: could not locate a valid checkpoint record\n  then: {symptom}"
    shutdown = "FATAL:  terminating connection due to administrator command\n"
    assert server_cause(symptom, shutdown, [tmp_path]) == symptom
    assert server_cause(symptom, None, [tmp_path]) == symptom


CLOSED_LOOP = {
    "tpcb": lambda: TpcbWorkload(TpcbSettings.model_validate({
        "kind": "tpcb", "scale": 1, "script": "select-only", "clients": 2, "threads": 1, "duration": "8s"})),
    "oltp": lambda: OltpWorkload(OltpSettings.model_validate({
        "kind": "oltp", "tables": 1, "table_size": 1000, "script": "point_select", "clients": 2, "threads": 1,
        "duration": "8s"})),
}


@pytest.mark.parametrize("kind", sorted(CLOSED_LOOP))
def test_a_3s_sigstop_in_closed_loop_is_flagged_stalled(pg_target, scratch_db, tmp_path: Path, kind: str) -> None:
    target, _ = pg_target
    w = CLOSED_LOOP[kind]()
    sink = Recorder()
    ctx = RunContext(run_number=1, run_dir=tmp_path, t0_ns=time.monotonic_ns(), series=sink)
    w.prepare(scratch_db, ctx)
    with server_stalled(lambda: list(target.processes()), after_s=2.0, for_s=3.0):
        result = w.run(scratch_db, ctx)
    assert Flag.STALLED in result.flags
    stalled = [e for e in result.events if e.kind == "stalled"]
    assert len(stalled) == 1 and "longest gap" in stalled[0].message
    assert result.metrics["stall.longest_s"].value >= 2
    p99 = [(t, v) for source, name, t, v in sink.points if name == "latency_p99_ms"]
    tps = {t: v for source, name, t, v in sink.points if name == "tps"}
    assert p99 and all(v is None or v > 0 for _, v in p99), "no per-second p99 of 0"
    assert [t for t, v in p99 if v is None] == [t for t, v in sorted(tps.items()) if v == 0]
    assert any(v is None for _, v in p99), "the stalled seconds store no p99"


def test_a_disk_filled_during_the_load_is_named_with_its_path(workdir: Path, run_cli) -> None:
    """The server's data on a small tmpfs (perflab's scratch filesystem) that
    the tpcb load fills: the failure names "No space left on device", the
    device and the path, and the fix, before the client's symptom."""
    f = workdir / "full.toml"
    f.write_text("""
[experiment]
name = "disk-full"

[target]
kind = "postgres"
[target.storage.data_fs]
type = "tmpfs"
size = "72MB"

[workload]
kind = "tpcb"
scale = 12
duration = "2s"

[collect]
""")
    out = workdir / "out"
    proc = run_cli("run", f, "--out", out, "--no-report", check=False, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    import sqlite3

    error = sqlite3.connect(out / "perflab.sqlite").execute("SELECT error FROM run WHERE id = 1").fetchone()[0]
    first = error.splitlines()[0]
    assert first.startswith("no space left on "), error
    assert "No space left on device" in first and str(out) in first, error
    assert "fix: free space on" in error


def test_the_per_second_figure_breaks_its_line_where_nothing_completed(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:

    out = tmp_path / "out"
    build_store(out, clients=[1], sync=["on"], repetitions=1, series_points=10, histograms=False)
    # seconds 4 and 5 of the run completed nothing: the store holds NULL latency there (as the engine writes it)
    with sqlite3.connect(out / "perflab.sqlite") as conn:
        conn.execute("UPDATE series SET value = NULL WHERE name = 'latency_p99_ms' AND t IN (4.0, 5.0)")
    drawn: dict[str, list[tuple[str, list[float], list[float]]]] = {}
    real = figures.series_figure

    def spy(lines, ylabel, title):  # type: ignore[no-untyped-def]
        drawn[ylabel] = [(label, list(t), list(v)) for label, t, v in lines]
        return real(lines, ylabel, title)

    monkeypatch.setattr(figures, "series_figure", spy)
    html = write_report(out).read_text()
    [(_, t, v)] = drawn["latency_p99_ms"]
    # the two seconds are in the line as NaN (matplotlib breaks a line at NaN), not left out, which
    # would join their neighbours and hide the stall, and not 0
    assert [math.isnan(x) for x in v] == [s in (4.0, 5.0) for s in t] and 4.0 in t and 5.0 in t
    assert "A gap in a line is a second in which nothing completed" in html
