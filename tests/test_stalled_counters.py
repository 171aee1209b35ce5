"""A cumulative counter that does not advance where it must is not a
measurement (issue 44): vmstat's /proc/stat counters over a second, the
server's CPU time over a busy run. Each is left out and the run flagged
counter-stalled. The broken source is simulated where it is read (a /proc
that does not count, as some containers' is); the working case reads the
real one. Energy's counters (RAPL, perf) are in test_energy.py."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest

from perflab.collectors import process as process_module
from perflab.collectors import vmstat as vmstat_module
from perflab.collectors.process import ProcessCollector, ProcessSettings
from perflab.collectors.vmstat import MUST_ADVANCE_S, VmstatCollector, VmstatSettings
from perflab.model import Flag, Metric, RunResult
from test_collectors import collect


def _stalled_events(result: RunResult) -> list[str]:
    return [e.message for e in result.events if e.kind == "counter-stalled"]


def test_vmstat_counts_a_live_host() -> None:
    _, result = collect(VmstatCollector("vmstat", VmstatSettings(interval=0.2)),
                        lambda: time.sleep(MUST_ADVANCE_S + 0.2))
    assert {"vmstat.us_pct", "vmstat.id_pct", "vmstat.cs_per_s", "vmstat.in_per_s"} <= set(result.metrics)
    assert Flag.COUNTER_STALLED not in result.flags and not _stalled_events(result)


def test_a_proc_stat_that_does_not_advance_is_left_out_and_flagged(monkeypatch: pytest.MonkeyPatch) -> None:
    frozen = vmstat_module.read_text("/proc/stat")
    real = vmstat_module.read_text

    def read_text(path: Any) -> str:
        return frozen if str(path) == "/proc/stat" else real(path)

    monkeypatch.setattr(vmstat_module, "read_text", read_text)
    _, result = collect(VmstatCollector("vmstat", VmstatSettings(interval=0.2)),
                        lambda: time.sleep(MUST_ADVANCE_S + 0.2))
    m = result.metrics
    assert not {"vmstat.us_pct", "vmstat.id_pct", "vmstat.cs_per_s", "vmstat.in_per_s"} & set(m)
    assert "vmstat.bi_kib_per_s" in m  # /proc/vmstat's own counters stay
    assert result.flags == [Flag.COUNTER_STALLED]
    [message] = _stalled_events(result)
    assert all(f"/proc/stat {c}" in message for c in ("cpu", "intr", "ctxt")), message


def _busy_server(pg_target: Any) -> tuple[RunResult, ProcessCollector]:
    """The process collector around real work on a real PostgreSQL, and the
    run's result as the runner merges it: 20,000 transactions."""
    target, endpoint = pg_target

    def work() -> None:
        with endpoint.connect() as conn:
            conn.execute("SELECT count(*) FROM generate_series(1, 3000000)").fetchall()

    collector = ProcessCollector("process", ProcessSettings(interval=0.2))
    _, result = collect(collector, work, target=target, endpoint=endpoint)
    result.metrics["transactions"] = Metric("transactions", 20_000.0, "transactions")
    collector.annotate(result)
    return result, collector


def test_a_busy_servers_cpu_time_is_counted(pg_target: Any) -> None:
    result, _ = _busy_server(pg_target)
    assert result.metrics["process.backend.cpu_s"].value > 0
    assert Flag.COUNTER_STALLED not in result.flags and not _stalled_events(result)


def test_a_busy_server_whose_cpu_time_never_advances_is_left_out_and_flagged(
        pg_target: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    real = process_module.read_proc

    def read_proc(pid: int, with_io: bool) -> process_module.ProcSample | None:
        sample = real(pid, with_io)
        return None if sample is None else dataclasses.replace(
            sample, user_ticks=0, system_ticks=0, children_user_ticks=0, children_system_ticks=0)

    monkeypatch.setattr(process_module, "read_proc", read_proc)
    result, _ = _busy_server(pg_target)
    assert not [name for name in result.metrics if name.endswith(".cpu_s") and not name.startswith("process.driver")]
    assert "process.backend.count_max" in result.metrics  # what was counted stays
    assert Flag.COUNTER_STALLED in result.flags
    [message] = _stalled_events(result)
    assert "/proc/PID/stat" in message
