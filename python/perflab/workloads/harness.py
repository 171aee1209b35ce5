"""What every workload on the engine's load harness gets for free.

- `HarnessSettings`: the settings the harness itself reads (clients, threads,
  duration, warm-up, rate and its schedule, the seed, socket I/O); a workload's
  settings derive from it and add their own.
- `engine_errors()`: an engine error as perflab's, in one place: bad settings
  are the user's (exit 2), a target or engine failure fails the run.
- `take_run()`: the measured window on the run's clock, the seed, io and the
  engine's events, the client-bound flag, and the run failed when its clients
  were lost; where its rate settled (MSER-5), and the `Window` from there that
  a workload's rates and counts are over.
- `harness_metrics()`: the harness's own figures, the same for every workload:
  the measured window, retries, late and skipped transactions, schedule lag,
  connection set-up, lost clients, driver CPU and its share, io_uring enters,
  and the lag and failed-latency histograms.

A workload then adds only its own figures (tps, tpmC, Mb/s, goodput).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

from pydantic import Field, model_validator

from perflab import _engine
from perflab.analysis import precision, steady
from perflab.context import RunContext
from perflab.errors import RunFailure, UserError
from perflab.model import Event, Flag, Histogram, RunResult
from perflab.units import Duration
from perflab.workloads.base import WorkloadSettings
from perflab.workloads.stalls import interval_value

if TYPE_CHECKING:
    from perflab._engine import _HarnessSettings

# Bounds past any real run, below the engine's 32-bit counts: 10,000 clients
# is 10,000 server backends.
MAX_CLIENTS = 10_000
MAX_RATE_TPS = 1e9
MAX_TRIES = 1_000
# The most driver threads a per-thread bound on clients gives by default
# (each thread owns a runtime and an io_uring ring). That bound was measured
# up to 16 threads (oltp on MariaDB); thousands of clients stay on at most
# this many threads, unless `threads` says otherwise.
MAX_DEFAULT_THREADS = 64
# The metrics harness_metrics() and the stall watch store (a workload's
# `metrics` adds these to its own).
METRICS = ("measured_s", "retries", "retried", "lag_mean_ms", "lag_p99_ms", "lag_max_ms", "late", "skipped",
           "lost_connections", "connect_time_mean_ms", "connect_phase_s", "driver_cpu_s", "driver_cpu_per_*_us",
           "driver_cpu_share", "process_cpu_s", "io_enters_per_*", "server_off_cpu_share", "clients", "threads",
           "stall.longest_s", "steady_start_s", "rate_rse", "rate_target")
# The fewest seconds a run's within-run standard error is estimated from.
MIN_RSE_SECONDS = 5

# The settings the engine's harness reads, by their one name: HarnessSettings'
# fields, and `transactions` (a workload's count per client). The engine's
# list is _engine.harness_settings(); tests/test_settings_layers.py holds them equal.
ENGINE_SETTINGS = ("clients", "threads", "duration", "transactions", "warmup", "rate", "schedule", "latency_limit",
                   "max_tries", "seed", "io", "pin", "follow")


class HarnessSettings(WorkloadSettings):
    # Clients (connections), and the driver's runtime threads (default: min(clients, cores);
    # a workload may default to more for a server, and says so as a "threads" event).
    clients: int = Field(default=1, ge=1, le=MAX_CLIENTS)
    threads: int | None = Field(default=None, ge=1)
    # Run length (each workload says its default), and the warm-up before it.
    duration: Duration | None = Field(default=None, gt=0)
    warmup: Duration = Field(default=0.0, ge=0)
    # The longest the per-second rate may take to settle after the warm-up
    # (MSER-5; the warm-up is the minimum): a run whose rate settles later is
    # flagged no-steady-state. Default: half the measured window.
    steady_max: Duration | None = Field(default=None, gt=0)
    # What a run's rates and counts (tps, qps, tpmC, transactions) are over:
    # "steady", from where its per-second rate settled (MSER-5, steady_start_s)
    # to the end of the measured window; "measured", the whole measured window
    # from the end of the warm-up, as pgbench, sysbench and go-tpc report
    # theirs (for a comparison with them). The steady start is found and
    # stored either way; latency percentiles are always the whole window's.
    window: Literal["steady", "measured"] = "steady"
    # Total transactions (requests) per second, open loop: latency from each intended start.
    rate: float | None = Field(default=None, gt=0, le=MAX_RATE_TPS)
    # Spacing of the intended starts under a rate: exponential gaps (a Poisson
    # process, as pgbench -R) or equal gaps (wrk2's constant throughput).
    schedule: Literal["poisson", "constant"] = "poisson"
    # Random seed of the draws; default: a new one per run (recorded as an event).
    seed: int | None = Field(default=None, ge=0)
    # Socket I/O of the measured round trips: "epoll" (tokio's reactor), "uring"
    # (io_uring, one submission per runtime tick for all ready clients; the run
    # fails if io_uring is unavailable), "auto" (io_uring where this kernel and
    # process allow it, else epoll, with the reason). Recorded as the run's "io" event.
    io: Literal["auto", "uring", "epoll"] = "auto"
    # Whether each driver thread runs on a CPU of its own: "auto" pins when
    # every transaction only reads and the run has one thread per CPU perflab
    # may use (pinned, a thread keeps more of the backends it wakes on its own
    # CPU, so fewer round trips wake a task on another CPU: the faster of a
    # shared machine's two speeds comes more often, benchmarks/README.md),
    # "on" whenever there is a CPU per thread, "off" never. Recorded as the
    # run's "pin" event, with the reason.
    pin: Literal["auto", "on", "off"] = "auto"
    # With pinned threads in a closed loop against a PostgreSQL server on this
    # machine (tpcb, oltp): move each client, between transactions, to the driver
    # thread on the CPU its backend runs on, so that no round trip wakes a process
    # on another CPU wherever the scheduler puts the backends (benchmarks/README.md,
    # "A driver that follows its backends"). Recorded as the run's "follow" event.
    follow: bool = True
    # A transaction later than this counts as late; under a rate, a slot already
    # later is skipped (pgbench -L).
    latency_limit: Duration | None = Field(default=None, gt=0)
    # Tries of a transaction after a retryable error (PostgreSQL: serialization
    # failure or deadlock; pgbench --max-tries); a protocol that never retries
    # (http) tries once whatever it says.
    max_tries: int = Field(default=1, ge=1, le=MAX_TRIES)

    @model_validator(mode="after")
    def _threads_have_clients(self) -> HarnessSettings:
        clients = self.effective_clients()
        if self.threads is not None and self.threads > clients:
            raise ValueError(
                f"threads = {self.threads} is more than clients = {clients}; "
                "allowed: 1..clients (each thread drives at least one client)"
            )
        return self

    def engine_settings(self, **effective: Any) -> _HarnessSettings:
        """The harness's settings as the engine takes them: one object
        (`harness=`), each setting by its one name, durations in seconds,
        every one given (the engine has no defaults of its own,
        crates/engine-py/src/harness.rs). `effective` are the values this run
        derived (clients, threads, seed, duration) and the count per client
        (`transactions`, http's `requests`)."""
        given = {name: getattr(self, name, None) for name in ENGINE_SETTINGS}
        unknown = set(effective) - set(ENGINE_SETTINGS)
        if unknown:
            raise ValueError(f"not harness settings: {sorted(unknown)}")
        return cast("_HarnessSettings", given | effective)

    def effective_clients(self) -> int:
        """The clients a run drives (a workload may derive them from its data set)."""
        return self.clients

    def effective_threads(self, clients_per_thread: int | None = None) -> int:
        """`threads`, else min(clients, the CPUs perflab may use); with
        `clients_per_thread`, at least enough threads that none drives more
        clients than that, up to MAX_DEFAULT_THREADS (a workload's default
        for a server that runs fastest so, see `threads_reason`)."""
        if self.threads is not None:
            return self.threads
        threads = self._plain_threads()
        if clients_per_thread is not None:
            threads = max(threads, min(-(-self.effective_clients() // clients_per_thread), MAX_DEFAULT_THREADS))
        return threads

    def _plain_threads(self) -> int:
        """The default without a per-thread bound: min(clients, the CPUs perflab may use)."""
        return max(1, min(self.effective_clients(), cores()))

    def threads_reason(self, threads: int, why: str) -> str | None:
        """The "threads" event's message for a default thread count above
        min(clients, CPUs): how many clients each thread drives and why
        (None when `threads` was given or the plain default held)."""
        if self.threads is not None or threads <= self._plain_threads():
            return None
        clients = self.effective_clients()
        return (f"{clients} clients on {threads} driver threads, at most {-(-clients // threads)} per thread "
                f"(threads not set): {why}")

    def latency_origin(self, closed: str = "from send (closed loop)") -> str:
        """Where latency runs from, for a metric's description: the intended
        start under a rate, naming the schedule actually used."""
        if self.rate is None:
            return closed
        return f"from the intended start (open loop, {'Poisson' if self.schedule == 'poisson' else 'constant'} schedule)"


def engine_settings_of(**given: Any) -> _HarnessSettings:
    """The harness object for a direct call of a binding (tests, benchmarks):
    HarnessSettings' defaults and checks, then `given` by the same names;
    threads min(clients, cores) and seed 0 unless given."""
    fields = {k: v for k, v in given.items() if k in HarnessSettings.model_fields}
    s = HarnessSettings(kind="harness", **fields)
    derived = {"threads": s.effective_threads(), "seed": 0 if s.seed is None else s.seed}
    return s.engine_settings(**derived | {k: v for k, v in given.items() if k not in fields})


@contextmanager
def engine_errors(name: str, *, failed: str | None = None, settings: str | None = None,
                  hint: str | None = None) -> Iterator[None]:
    """Engine errors of the calls inside as perflab's: a ConfigError is bad
    settings (UserError, "workload NAME: ..." or `settings`: ..., exit 2); an
    EngineConnectionError or EngineError fails the run (RunFailure, "NAME: ..."
    or `failed`: ...). Interrupted (a BaseException) passes through."""
    try:
        yield
    except _engine.ConfigError as exc:
        raise UserError(f"{settings or f'workload {name}'}: {exc}", hint) from None
    except (_engine.EngineConnectionError, _engine.EngineError) as exc:
        raise RunFailure(f"{failed or name}: {exc}") from None


def take_run(ctx: RunContext, result: RunResult, out: _engine.DriverResult, *, clients: int, lost: str,
             seed: int | None = None, any_loss_fails: bool = False, steady_max_s: float | None = None,
             window_from: Literal["steady", "measured"] = "steady") -> Window:
    """What every harness run hands on, in one place: the measured window on
    the run's clock (collectors use it too), the seed and io events and the
    engine's own, the client-bound flag. The run fails when every client was
    lost (or any, with `any_loss_fails`): `lost` is the message, followed by
    the first loss; a partial loss flags the run. Returned: the window the
    run's rates and counts are over (from its steady start, or the whole
    measured window with `window_from="measured"`)."""
    ctx.measure_start_s = out.measure_start_t_s
    ctx.measure_end_s = out.measure_start_t_s + out.measured_s
    if seed is not None:
        result.events.append(Event(out.measure_start_t_s, "seed", f"random seed {seed}"))
    result.events.append(Event(out.measure_start_t_s, "io", f"io: {out.io}"))
    for e in out.events:
        result.events.append(Event(e.t_s, e.kind, e.message))
    if out.lost_clients and (any_loss_fails or out.lost_clients >= clients):
        first = next((e.message for e in out.events if e.kind == "lost-connection"), "")
        raise RunFailure(f"{lost}: {first}")
    if out.lost_clients:
        result.flags.append(Flag.LOST_CONNECTIONS)
    if out.client_bound:
        result.flags.append(Flag.CLIENT_BOUND)
    found = steady_window(result, out.series, steady_max_s)
    return window(out, found if window_from == "steady" else None)


@dataclass(frozen=True)
class Window:
    """What a run's rate figures are over: the measured window from where
    its per-second rate settled (steady_window), or the whole measured
    window when the rule cut nothing or found no steady state (then the
    engine's own figures, exactly). Latency percentiles stay the whole
    measured window's: the engine keeps one histogram a run."""

    cut_s: float  # measured seconds left out at the start (0: none)
    seconds: float  # from the window's start to the last completion
    transactions: int
    failed: int
    by_type: tuple[int, ...]  # committed per transaction type, in out.by_type's order
    rate: float  # transactions per second of the window

    def per_type(self, out: _engine.DriverResult) -> dict[str, int]:
        """Committed per transaction type by name, over the window."""
        return {t.name: n for t, n in zip(out.by_type, self.by_type, strict=True)}


# Said of a rate or count over the window (metric descriptions).
OVER_WINDOW = ("over the run's window (workload.window: \"steady\", from where the per-second rate settled, "
               "MSER-5, steady_start_s; \"measured\", the whole measured window)")


def window(out: _engine.DriverResult, found: steady.SteadyState | None) -> Window:
    """The run's window: its seconds before a steady start that was reached
    taken out of the engine's totals (each completion is in one second)."""
    whole = Window(0.0, out.measured_s, out.transactions, out.failed, tuple(t.committed for t in out.by_type),
                   out.tps)
    if found is None or not found.reached or found.truncated == 0:
        return whole
    cut = [iv for iv in out.series if not iv.warmup and iv.t_s < found.start_s]
    cut_s = sum(iv.interval_s for iv in cut)
    seconds = out.measured_s - cut_s
    if not cut or seconds <= 0:
        return whole
    transactions = out.transactions - sum(iv.transactions for iv in cut)
    by_type = tuple(n - sum(iv.transactions_by_type[i] for iv in cut if i < len(iv.transactions_by_type))
                    for i, n in enumerate(whole.by_type))
    return Window(cut_s, seconds, transactions, out.failed - sum(iv.failed for iv in cut), by_type,
                  transactions / seconds)


def steady_window(result: RunResult, seconds: list[_engine.Interval],
                  max_s: float | None = None) -> steady.SteadyState | None:
    """Where the run's per-second rate settled after the configured warm-up
    (the minimum), by MSER-5 (analysis.steady): stored as `steady_start_s`
    (seconds after the warm-up's end) and a "steady-state" event at that
    time; a rate that had not settled by half the measured window, or by
    `max_s` after the warm-up (the workload's steady_max), flags the run
    no-steady-state. Nothing (None) with fewer than 20 measured seconds.
    What it found is returned: the run's rates are over the window from
    the steady start (`window`). With
    MIN_RSE_SECONDS or more seconds from the steady start (the measured
    window's start when none was found), the relative standard error of
    the mean rate over them by batch means (analysis.precision.run_mean_rse):
    `rate_rse`, the within-run part of the noise."""
    measured = [iv for iv in seconds if not iv.warmup]
    found = steady.steady_state([iv.t_s for iv in measured], [iv.tps for iv in measured], max_s)
    window = [iv.tps for iv in measured if found is None or iv.t_s >= found.start_s]
    rse = precision.run_mean_rse(window) if len(window) >= MIN_RSE_SECONDS else None
    if rse is not None:
        result.add_metric("rate_rse", rse, "ratio", "relative standard error of the run's mean rate from its "
                          f"per-second rates over {len(window)} s (batch means; the within-run noise that "
                          "precision takes apart from the between-run noise)", higher_is_better=False)
    if found is None:
        return None
    after = max(0.0, found.start_s - measured[0].t_s)
    result.add_metric("steady_start_s", after, "s", f"where the per-second rate settled, after the warm-up "
                      f"({found.method})")
    said = (f"steady from {after:g} s after the warm-up ({found.method})" if found.reached else
            f"no steady state: {found.method} puts the end of the warm-up at {after:g} s, beyond steady_max "
            f"({max_s:g} s)" if max_s is not None and after > max_s else
            f"no steady state: {found.method} puts the end of the warm-up in the second half of the window")
    result.events.append(Event(found.start_s, "steady-state", said))
    if not found.reached:
        result.flags.append(Flag.NO_STEADY_STATE)
    return found


def ms(us: float) -> float:
    """Microseconds (the engine's unit) as milliseconds (the metrics')."""
    return us / 1000.0


# A run's latency summary (LatencySummary) as figures: its field, and the label
# of the metric (`latency_p99_9_ms`). Each workload stores the labels it names.
LATENCY_FIGURES = (("mean_us", "mean"), ("stddev_us", "stddev"), ("p50_us", "p50"), ("p90_us", "p90"),
                   ("p95_us", "p95"), ("p99_us", "p99"), ("p999_us", "p99_9"), ("max_us", "max"))


def latency_metrics(result: RunResult, summary: _engine.LatencySummary, *, what: str, base: str,
                    labels: tuple[str, ...], prefix: str = "latency") -> None:
    """The `labels` of LATENCY_FIGURES of `summary` as `{prefix}_{label}_ms`,
    described "{what} {label}, {base}" (base: where latency runs from)."""
    for key, label in LATENCY_FIGURES:
        if label in labels:
            result.add_metric(f"{prefix}_{label}_ms", ms(getattr(summary, key)), "ms", f"{what} {label}, {base}",
                              higher_is_better=False)


def harness_metrics(result: RunResult, out: _engine.DriverResult, *, per: tuple[str, str] = ("tx", "committed transaction"),
                    scheduled: bool = False, latency_limit_s: float | None = None, rate: float | None = None) -> None:
    """The harness's own figures of a run, named and described alike for every
    workload. `per` names what one unit of work is ("tx", "committed
    transaction"): CPU and io_uring enters are per unit; `scheduled`: a rate set
    the intended starts (then lag is stored); `latency_limit_s`: late and
    skipped transactions are stored; `rate`: the requested rate (stored as
    `rate_target`, per second of `per`'s unit)."""
    add = result.add_metric
    unit, what = per
    if rate is not None:
        add("rate_target", rate, f"{unit}/s", "requested rate (open loop)")
    add("measured_s", out.measured_s, "s", "measured window: end of warm-up to the last completion")
    add("retries", out.retries, "tries", "retries after a retryable error (PostgreSQL: serialization failure "
        "or deadlock)")
    add("retried", out.retried, unit, f"{what}s retried at least once")
    if scheduled:
        add("lag_mean_ms", ms(out.lag.mean_us), "ms", "schedule lag: actual minus intended start",
            higher_is_better=False)
        add("lag_p99_ms", ms(out.lag.p99_us), "ms", "schedule lag p99", higher_is_better=False)
        add("lag_max_ms", ms(out.lag.max_us), "ms", "schedule lag max", higher_is_better=False)
    if latency_limit_s is not None:
        add("late", out.late, unit, f"completed later than latency_limit ({latency_limit_s * 1000:g} ms)",
            higher_is_better=False)
        if scheduled:
            add("skipped", out.skipped, unit, "schedule slots skipped: already later than latency_limit",
                higher_is_better=False)
    add("lost_connections", out.lost_clients, "clients", "clients whose connection was lost",
        higher_is_better=False)
    add("connect_time_mean_ms", out.connect_total_s / max(1, out.clients) * 1000, "ms",
        "mean time to open (and prepare) one client connection; not part of any rate", higher_is_better=False)
    add("connect_phase_s", out.connect_phase_s, "s", "wall time to connect all clients")
    add("driver_cpu_s", out.driver_cpu_s, "s", "CPU time of the driver's threads in the measured window")
    if out.transactions:
        add(f"driver_cpu_per_{unit}_us", out.driver_cpu_s / out.transactions * 1e6, "us",
            f"driver CPU time per {what}", higher_is_better=False)
    if out.cpu_given_s > 0:
        add("driver_cpu_share", out.driver_cpu_s / out.cpu_given_s, "ratio",
            f"driver CPU over the CPU its {out.threads} threads could use; above 0.8 the run is client-bound",
            higher_is_better=False)
    add("process_cpu_s", out.process_cpu_s, "s", "CPU time of the whole perflab process in the window")
    if out.io.startswith("io_uring") and out.transactions:
        add(f"io_enters_per_{unit}", out.io_enters_per_tx, "calls",
            f"io_uring_enter calls per {what} ({out.io})", higher_is_better=False)
    if out.server_sampled:
        add("server_off_cpu_share", out.server_off_cpu / out.server_sampled, "ratio",
            "share of the once-a-second samples of the clients' server processes (on this machine) that found "
            "one on another CPU than its client's pinned driver thread: its round trips then wake across CPUs",
            higher_is_better=False)
    add("clients", out.clients, "clients")
    add("threads", out.threads, "threads")
    for data, name in ((out.lag_histogram, "lag"), (out.failed_histogram, "failed_latency")):
        if data is not None:
            result.histograms.append(Histogram(name, "us", out.histogram_encoding, bytes(data)))


# The harness's per-second figures stored as the run's series (name -> unit in the name).
SERIES_FIELDS = ("tps", "latency_mean_ms", "latency_p99_ms", "failed", "lag_mean_ms")


def store_second(ctx: RunContext, source: str, interval: _engine.Interval, *, scheduled: bool) -> None:
    """A second's harness figures as series of `source`, the warm-up's too:
    the run's measure-start event divides them (the export labels each
    sample's phase; the report draws the measured ones), and only measured
    seconds count for stalls. Lag only under a schedule: without one there is no lag."""
    if not interval.warmup:
        ctx.second(interval)
    for name in SERIES_FIELDS:
        if name != "lag_mean_ms" or scheduled:
            ctx.series.add(source, name, interval.t_s, interval_value(interval, name))


def cores() -> int:
    """The CPUs perflab may use (its affinity)."""
    return len(os.sched_getaffinity(0))
