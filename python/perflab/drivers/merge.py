"""Several drivers' results as one: exact, never from percentiles.

A worker of a distributed driver (perflab.drivers.ray) runs the engine's
harness and ships its figures as a `WorkerResult` (plain data: the engine's
result objects do not cross processes). `merge` makes one result with the
fields a workload reads of `_engine.DriverResult`, so a workload's metrics
code is the same for one driver or many:

- HDR histograms are merged from their encoded form (`_engine.hdr_merge`:
  the same bucket layout everywhere, so bucket counts add and the merged
  histogram is the histogram of the union of the samples); every latency
  figure is read from the merged histogram;
- counts, errors and body bytes (HTTP responses') are summed, in total and per type;
- per-second series are summed per second: every worker started its run at
  one instant and cut its seconds from it, so second k of each worker is the
  same second of the run's clock; each second's latency histogram is merged
  too (its p99 is exact), means are weighted by their counts;
- driver CPU and the client-bound flag are kept per worker (`workers`), and
  the merged result is client-bound when any worker was.

The record's fields are the engine's: read from `_engine.DriverResult`
itself (`RECORD`), never declared again here. Each has one merge rule
(`SUMMED`, `LARGEST` or `MERGED`); `unmerged()` names a field the engine
has and no rule covers (tests/test_merge.py fails on it), so a figure added
to the engine is never silently dropped by a distributed run.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, replace
from typing import Any

from perflab import _engine

# Seconds of two workers whose ends differ by less than this are the same
# second (their edges are computed from one start instant; only float
# rounding separates them).
SAME_SECOND_S = 1e-3


def record_fields(cls: type) -> tuple[str, ...]:
    """The fields of an engine result class, from the class itself (its getters)."""
    return tuple(name for name, _ in inspect.getmembers(cls, inspect.isdatadescriptor) if not name.startswith("_"))


# The engine's result record: every field a harness run returns.
RECORD = record_fields(_engine.DriverResult)
# Figures of the workers that add up, and those of which the run's is the largest.
SUMMED = ("failed", "skipped", "late", "retries", "retried", "clients", "threads", "lost_clients",
          "connect_total_s", "driver_cpu_s", "process_cpu_s", "cpu_given_s", "body_bytes", "server_sampled",
          "server_off_cpu")
LARGEST = ("connect_max_s", "connect_phase_s")
# Merged by `merge` itself: from the merged histograms, the window, per type,
# per second, or (the workers' own) structured values.
MERGED = ("transactions", "errors_by_kind", "measured_s", "measure_start_t_s", "tps", "latency", "lag",
          "failed_latency", "latency_histogram", "lag_histogram", "failed_histogram", "histogram_encoding",
          "client_bound", "io", "io_enters_per_tx", "by_type", "operations", "series", "events")
# What a worker ships as plain data, by the record's names.
STRUCTURED = ("latency", "lag", "failed_latency", "tps", "by_type", "operations", "series", "events")


def unmerged() -> list[str]:
    """Fields of the engine's record that no merge rule covers (none, or a bug)."""
    return [f for f in RECORD if f not in SUMMED + LARGEST + MERGED]


@dataclass(frozen=True)
class WorkerInterval:
    t_s: float  # end of the second, on the run's clock
    interval_s: float
    transactions: int
    failed: int
    skipped: int
    latency_sum_ms: float  # latency_mean_ms x transactions
    lag_sum_ms: float  # lag_mean_ms x lag_count
    lag_count: int
    clients_running: int
    transactions_by_type: tuple[int, ...]
    latency_histogram: bytes | None


class _Record:
    """The engine record's plain fields (`figures`), read as attributes, as on
    `_engine.DriverResult`."""

    figures: dict[str, Any]

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["figures"][name]
        except KeyError:
            raise AttributeError(name) from None


def _plain(value: Any) -> Any:
    """An engine value as plain, picklable data (bytes, dict)."""
    if value is None or isinstance(value, (int, float, str, bool)):
        return value
    if isinstance(value, dict):
        return dict(value)
    return bytes(value)


@dataclass(frozen=True)
class WorkerResult(_Record):
    """One worker's `_engine.DriverResult`, on the run's clock once `shifted`:
    every plain field of the record in `figures`, by its name."""

    figures: dict[str, Any]
    index: int
    node: str  # "ip (host, node id, pid)"
    by_type: tuple[tuple[str, int, int, bytes, int], ...]  # name, committed, failed, histogram, body bytes
    operations: tuple[tuple[str, int, int, bytes, int], ...]  # as by_type, per operation type
    series: tuple[WorkerInterval, ...]
    events: tuple[tuple[float, str, str], ...]

    @classmethod
    def of(cls, index: int, node: str, out: _engine.DriverResult) -> WorkerResult:
        """From the engine's result, times on the worker's own clock since its t0."""
        return cls(
            figures={name: _plain(getattr(out, name)) for name in RECORD if name not in STRUCTURED},
            index=index, node=node,
            by_type=_types(out.by_type), operations=_types(out.operations),
            series=tuple(
                WorkerInterval(
                    t_s=i.t_s, interval_s=i.interval_s, transactions=i.transactions, failed=i.failed,
                    skipped=i.skipped, latency_sum_ms=i.latency_mean_ms * i.transactions,
                    lag_sum_ms=i.lag_mean_ms * i.lag_count, lag_count=i.lag_count,
                    clients_running=i.clients_running, transactions_by_type=tuple(i.transactions_by_type),
                    latency_histogram=None if i.latency_histogram is None else bytes(i.latency_histogram),
                )
                for i in out.series
            ),
            events=tuple((e.t_s, e.kind, e.message) for e in out.events),
        )

    def shifted(self, shift_s: float) -> WorkerResult:
        """The same result with every time moved by `shift_s` (onto the run's clock)."""
        return replace(
            self, figures={**self.figures, "measure_start_t_s": self.figures["measure_start_t_s"] + shift_s},
            series=tuple(replace(i, t_s=i.t_s + shift_s) for i in self.series),
            events=tuple((t + shift_s, kind, message) for t, kind, message in self.events),
        )


@dataclass(frozen=True)
class MergedInterval:
    """One second of the run, every worker's summed (the fields of `_engine.Interval`)."""

    t_s: float
    interval_s: float
    warmup: bool
    transactions: int
    tps: float
    latency_mean_ms: float
    latency_p99_ms: float
    failed: int
    skipped: int
    lag_mean_ms: float
    lag_count: int
    clients_running: int
    transactions_by_type: list[int]
    latency_histogram: bytes | None
    workers: int  # how many workers' seconds were summed into this one


@dataclass(frozen=True)
class MergedType:
    name: str
    committed: int
    failed: int
    latency: _engine.LatencySummary
    histogram: bytes
    body_bytes: int


@dataclass(frozen=True)
class Event:
    """A driver event on the run's clock (the fields of `_engine.DriverEvent`)."""

    t_s: float
    kind: str
    message: str


@dataclass(frozen=True)
class MergedResult(_Record):
    """The fields of `_engine.DriverResult` (every one of `RECORD`), for
    every worker together: the plain ones in `figures`."""

    figures: dict[str, Any]
    by_type: list[MergedType]
    operations: list[MergedType]
    series: list[MergedInterval]
    events: list[Event]
    workers: list[WorkerResult]


def _types(types: list[_engine.TxTypeResult]) -> tuple[tuple[str, int, int, bytes, int], ...]:
    return tuple((t.name, t.committed, t.failed, bytes(t.histogram), t.body_bytes) for t in types)


def _merged_types(per_worker: list[tuple[tuple[str, int, int, bytes, int], ...]]) -> list[MergedType]:
    """Each type's figures over the workers (who all have the same types, in order)."""
    merged = []
    for k, (name, *_rest) in enumerate(per_worker[0]):
        hist = _merged([w[k][3] for w in per_worker])
        merged.append(MergedType(name, sum(w[k][1] for w in per_worker), sum(w[k][2] for w in per_worker),
                                 _summary(hist), hist, sum(w[k][4] for w in per_worker)))
    return merged


def _merged(parts: list[bytes]) -> bytes:
    return parts[0] if len(parts) == 1 else _engine.hdr_merge(parts)


def _optional(parts: list[bytes | None]) -> bytes | None:
    present = [p for p in parts if p is not None]
    return _merged(present) if present else None


_EMPTY: bytes | None = None


def _summary(data: bytes | None) -> _engine.LatencySummary:
    global _EMPTY
    if data is None:
        _EMPTY = _EMPTY or _engine.hdr_encode([])
        data = _EMPTY
    return _engine.hdr_summary(data)


def merge_series(workers: list[WorkerResult]) -> list[MergedInterval]:
    """Second by second: each second of the run's clock once, with every
    worker's figures of that second (a worker that ended earlier adds none)."""
    seconds: list[list[WorkerInterval]] = []
    for interval in sorted((i for w in workers for i in w.series), key=lambda i: i.t_s):
        if seconds and abs(seconds[-1][0].t_s - interval.t_s) < SAME_SECOND_S:
            seconds[-1].append(interval)
        else:
            seconds.append([interval])
    out = []
    for same in seconds:
        tx = sum(i.transactions for i in same)
        lag_count = sum(i.lag_count for i in same)
        hists = [i.latency_histogram for i in same]
        hist = _optional(hists) if all(h is not None for h in hists) else None
        width = max(len(i.transactions_by_type) for i in same)
        out.append(MergedInterval(
            t_s=min(i.t_s for i in same), interval_s=same[0].interval_s, warmup=False, transactions=tx,
            tps=tx / same[0].interval_s, latency_mean_ms=sum(i.latency_sum_ms for i in same) / tx if tx else 0.0,
            latency_p99_ms=_engine.hdr_quantile_us(hist, 0.99) / 1000.0 if hist is not None and tx else 0.0,
            failed=sum(i.failed for i in same), skipped=sum(i.skipped for i in same),
            lag_mean_ms=sum(i.lag_sum_ms for i in same) / lag_count if lag_count else 0.0, lag_count=lag_count,
            clients_running=sum(i.clients_running for i in same),
            transactions_by_type=[sum(i.transactions_by_type[k] for i in same if k < len(i.transactions_by_type))
                                  for k in range(width)],
            latency_histogram=hist, workers=len(same),
        ))
    return out


def merge(workers: list[WorkerResult]) -> MergedResult:
    """One result of several workers' (see the module's docstring)."""
    if not workers:
        raise ValueError("no worker results to merge")
    latency = _merged([w.latency_histogram for w in workers])
    lag = _optional([w.lag_histogram for w in workers])
    failed = _optional([w.failed_histogram for w in workers])
    start = min(w.measure_start_t_s for w in workers)
    end = max(w.measure_start_t_s + w.measured_s for w in workers)
    measured_s = end - start
    tx = sum(w.transactions for w in workers)
    errors: dict[str, int] = {}
    for w in workers:
        for kind, n in w.errors_by_kind.items():
            errors[kind] = errors.get(kind, 0) + n
    by_type = _merged_types([w.by_type for w in workers])
    operations = _merged_types([w.operations for w in workers])
    ios = sorted({w.io for w in workers})
    enters = sum(w.io_enters_per_tx * w.transactions for w in workers)
    events = sorted((Event(t, kind, f"driver worker {w.index} ({w.node}): {message}")
                     for w in workers for t, kind, message in w.events), key=lambda e: e.t_s)
    summed = {name: sum(getattr(w, name) for w in workers) for name in SUMMED}
    largest = {name: max(getattr(w, name) for w in workers) for name in LARGEST}
    figures = dict(
        **summed, **largest, transactions=tx, errors_by_kind=errors, measured_s=measured_s, measure_start_t_s=start,
        tps=tx / measured_s if measured_s > 0 else 0.0,
        latency=_summary(latency), lag=_summary(lag), failed_latency=_summary(failed),
        latency_histogram=latency, lag_histogram=lag, failed_histogram=failed,
        histogram_encoding=workers[0].histogram_encoding,
        client_bound=any(w.client_bound for w in workers),
        io=ios[0] if len(ios) == 1 else "; ".join(f"worker {w.index}: {w.io}" for w in workers),
        io_enters_per_tx=enters / tx if tx else 0.0,
    )
    return MergedResult(figures=figures, by_type=by_type, operations=operations, series=merge_series(workers), events=list(events),
                        workers=list(workers))
