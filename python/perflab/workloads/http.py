"""The `http` workload: a SPECweb99-like static file set and HTTP/1.1 GETs
of it from the engine's own client (crates/engine/src/http).

Load phase: the file set (4 classes x 9 files a directory, about 5.12 MB,
incompressible, deterministic from `fileset.seed`) is generated once into a
cache keyed by its parameters (`fileset.cache_dir`, default
perflab's cache, `perflab.cache.cache_root()`/filesets) and reused across
runs and experiments; its size on disk is checked, and a managed server is
pointed at it. A run that adds a set to the cache says how much; the set is
marked in use (perflab/cache.py) while the experiment runs, so `perflab
cache prune` leaves it. An external server (target `http`) must hold the
same layout already.

Run phase: the harness with the HTTP protocol. Each request picks a class
35/50/14/1 %, a directory by Zipf(1) and a file by Zipf(1) in SPECweb99's
order; the four classes are the transaction types, each with its own HDR
histogram. Every response's status and body length are checked against the
file's known size; an error is counted by kind (connect, timeout, 4xx, 5xx,
short-body, long-body, bad-response, closed), never ignored. Closed loop
(with `think_time`), or open loop at `rate` with latency from each
request's intended send time. `requests_per_connection` closes and re-opens
a connection after that many requests (the Haboob test used 5); the
re-connection is inside the next request's latency.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from perflab import _engine, cache
from perflab.context import RunContext
from perflab.drivers import engine_run
from perflab.endpoints import Capability, HttpEndpoint
from perflab.errors import RunFailure, UserError
from perflab.model import Event, Flag, Histogram, LoadResult, RunResult
from perflab.settings_model import StrictModel
from perflab.units import Duration, Size, format_size
from perflab.workloads.base import Workload, WorkloadSettings
from perflab.workloads.stalls import StallWatch, interval_value

CLASSES = ("class0", "class1", "class2", "class3")
CLASS_SHARE = (0.35, 0.50, 0.14, 0.01)
DEFAULT_DURATION_S = 30.0
SERIES_SOURCE = "http"
SERIES_FIELDS = ("tps", "latency_mean_ms", "latency_p99_ms", "failed", "lag_mean_ms")
MAX_CLIENTS = 10_000
# The seed's Table 10 (Flash/DeBox): 5%, median, 95% and mean.
QUANTILES = (("p5", 0.05, "5%"), ("p50", 0.50, "median"), ("p95", 0.95, "95%"), ("p99", 0.99, "99%"),
             ("p99_9", 0.999, "99.9%"))


def default_cache_dir() -> Path:
    """Where file sets go unless `fileset.cache_dir` says: perflab's cache."""
    return cache.kind_dir(cache.FILESETS)


def fileset_entry(cache_dir: Path, dirs: int, seed: int) -> Path:
    """The set's directory in the cache (the engine's `cache_name`)."""
    return cache_dir / f"perflab-fileset-v1-{dirs}d-seed{seed}"


class FileSetSettings(StrictModel):
    # The set's size ("1.5GB"): directories of about 5.12 MB up to at least it.
    size: Size | None = Field(default=None, gt=0)
    # Or SPECweb99's rule from connections: int(25 + (400000/122000 x connections)/5)
    # directories. Neither given: the rule with workload.clients.
    connections: int | None = Field(default=None, ge=1, le=1_000_000)
    seed: int = Field(default=1, ge=0)
    cache_dir: str | None = None
    # Generator threads (default: the CPUs perflab may use).
    jobs: int | None = Field(default=None, ge=1, le=256)

    @model_validator(mode="after")
    def _one_rule(self) -> FileSetSettings:
        if self.size is not None and self.connections is not None:
            raise ValueError("got both size and connections; allowed: one of them")
        return self


class HttpSettings(WorkloadSettings):
    kind: Literal["http"]
    fileset: FileSetSettings = Field(default_factory=FileSetSettings)
    clients: int = Field(default=16, ge=1, le=MAX_CLIENTS)
    threads: int | None = Field(default=None, ge=1)
    duration: Duration | None = Field(default=None, gt=0)
    # Requests per client (instead of a duration).
    requests: int | None = Field(default=None, ge=1, le=10**12)
    warmup: Duration = Field(default=0.0, ge=0)
    # Total requests per second (open loop); latency from each intended send time.
    rate: float | None = Field(default=None, gt=0, le=1e9)
    schedule: Literal["poisson", "constant"] = "poisson"
    think_time: Duration | None = Field(default=None, gt=0)
    requests_per_connection: int | None = Field(default=None, ge=1)
    connect_timeout: Duration = Field(default=5.0, gt=0)
    request_timeout: Duration = Field(default=30.0, gt=0)
    # Ask for one file every time ("dir00000/class1_0", 1 KiB): the raw request rate.
    only: str | None = Field(default=None, pattern=r"^dir\d{5}/class[0-3]_[0-8]$")
    seed: int | None = Field(default=None, ge=0)
    # Socket I/O: "epoll" (the default), "uring" (fails without io_uring) or
    # "auto" (io_uring where the kernel and process allow it, else epoll with
    # the reason). On the ring every ready connection's send and receive go
    # to the kernel in one io_uring_enter. Unlike tpcb's, io_uring has not
    # earned http's default: benchmarks/http_vs_wrk.py measured the same CPU
    # per request on both (the kernel's loopback TCP path is three quarters
    # of it), and no soak has run it against a failing server. Recorded as
    # the run's "io" event.
    io: Literal["auto", "uring", "epoll"] = "epoll"

    @model_validator(mode="after")
    def _consistent(self) -> HttpSettings:
        if self.duration is not None and self.requests is not None:
            raise ValueError("got both duration and requests; allowed: one of them")
        if self.threads is not None and self.threads > self.clients:
            raise ValueError(f"threads = {self.threads} is more than clients = {self.clients}; "
                             "allowed: 1..clients")
        if self.think_time is not None and self.rate is not None:
            raise ValueError("got think_time with rate; allowed: think_time in closed loop only")
        return self

    def dirs(self) -> int:
        f = self.fileset
        if f.size is not None:
            return _engine.fileset_dirs(size_bytes=f.size)
        return _engine.fileset_dirs(connections=f.connections or self.clients)

    def only_file(self) -> tuple[int, int, int] | None:
        if self.only is None:
            return None
        d, rest = self.only.split("/")
        c, f = rest.removeprefix("class").split("_")
        return int(d.removeprefix("dir")), int(c), int(f)


def _ms(us: float) -> float:
    return us / 1000.0


class HttpWorkload(Workload[HttpEndpoint]):
    Settings: ClassVar[type[WorkloadSettings]] = HttpSettings
    data_fields: ClassVar[tuple[str, ...]] = ("fileset",)
    needs: ClassVar[frozenset[Capability]] = frozenset({Capability.HTTP})
    headline: ClassVar[tuple[str, ...]] = ("req_per_s", "throughput_mbps", "latency_p95_ms")
    distributable: ClassVar[bool] = True
    # the engine's per-second "tps" of an HTTP run counts requests
    series_labels: ClassVar[dict[str, str]] = {"tps": "req/s"}

    settings: HttpSettings

    def writes(self) -> bool:
        return False

    @classmethod
    def preflight(cls, settings: Any, base_dir: Path) -> list[tuple[str, str]]:
        problems = []
        only = settings.only_file()
        if only is not None and only[0] >= settings.dirs():
            problems.append(("workload.only", f"got {settings.only!r}; the file set has {settings.dirs()} "
                             "directories; allowed: a directory inside it"))
        return problems

    def _cache_dir(self, ctx: RunContext) -> Path:
        return self.cache_dir_of(self.settings, ctx.base_dir)

    @staticmethod
    def cache_dir_of(settings: HttpSettings, base_dir: Path) -> Path:
        given = settings.fileset.cache_dir
        return (base_dir / Path(given).expanduser()).resolve() if given else default_cache_dir()

    @classmethod
    def cache_additions(cls, settings: Any, target: Any, base_dir: Path) -> dict[Path, int]:
        """The file set a run would generate into the cache (a server perflab
        starts; an external one must hold it already), with its size from its
        parameters: {} when the cache holds it whole."""
        from perflab.targets import TARGETS
        from perflab.targets.webserver import ManagedWebServer

        if not issubclass(TARGETS.get(target.kind), ManagedWebServer):
            return {}
        entry = fileset_entry(cls.cache_dir_of(settings, base_dir), settings.dirs(), settings.fileset.seed)
        if (entry / cache.FILESET_COMPLETE).is_file():
            return {}
        return {entry: settings.dirs() * _engine.fileset_dir_bytes()}

    # ------------------------------------------------------------ load

    def prepare(self, endpoint: HttpEndpoint, ctx: RunContext) -> LoadResult:
        s = self.settings
        dirs = s.dirs()
        if endpoint.publish is None:
            # perflab never uploads to a server it did not start: the set must be there.
            self._probe(endpoint, dirs)
            return LoadResult(steps={}, rows={"directories": dirs}, reused=True)
        jobs = s.fileset.jobs or max(1, len(os.sched_getaffinity(0)))
        where = self._cache_dir(ctx)
        ctx.status(f"file set: {dirs} directories (seed {s.fileset.seed}) in {where}")
        # In use until this process exits: `perflab cache prune` leaves it.
        cache.use(fileset_entry(where, dirs, s.fileset.seed))
        try:
            report = _engine.fileset_prepare(str(where), dirs=dirs, seed=s.fileset.seed, jobs=jobs,
                                             cancel=ctx.cancel)
        except _engine.ConfigError as exc:
            raise UserError(f"workload.fileset: {exc}") from None
        except _engine.EngineError as exc:
            raise RunFailure(f"http: {exc}") from None
        want = dirs * _engine.fileset_dir_bytes()
        if report.size_bytes != want or (s.fileset.size is not None and report.size_bytes < s.fileset.size):
            raise RunFailure(f"http: the file set holds {report.size_bytes} bytes, {want} were asked for")
        if report.generated:
            ctx.note(f"cache: added {format_size(cache.disk_bytes(Path(report.root)))} of file set under "
                     f"{report.root}")
        endpoint.publish(Path(report.root))
        step = "fileset_generate" if report.generated else "fileset_verify_cached"
        return LoadResult(steps={step: report.seconds},
                          rows={"files": report.files, "bytes": report.size_bytes, "directories": report.dirs})

    @staticmethod
    def _probe(endpoint: HttpEndpoint, dirs: int) -> None:
        """An external server holds the set: its first and last files answer
        with their sizes (a HEAD each)."""
        import http.client

        host, _, port = endpoint.address.rpartition(":")
        for d, c, f in ((0, 0, 0), (dirs - 1, 3, 8)):
            path = f"{endpoint.prefix}dir{d:05}/class{c}_{f}"
            conn = http.client.HTTPConnection(host.strip("[]"), int(port), timeout=10)
            try:
                conn.request("HEAD", path, headers={"Host": endpoint.host_header})
                response = conn.getresponse()
                length = response.getheader("Content-Length")
                status = response.status
            except (OSError, http.client.HTTPException) as exc:
                raise RunFailure(f"http: {endpoint.display()} does not answer: {exc}") from None
            finally:
                conn.close()
            want = _engine.fileset_file_size(c, f)
            if status != 200 or length != str(want):
                raise RunFailure(
                    f"http: {endpoint.display()} does not hold the file set of {dirs} directories: {path} "
                    f"answered {status} with {length} bytes ({want} expected); perflab never uploads to a "
                    "server it did not start: copy a set perflab generated (its cache) there"
                )

    # ------------------------------------------------------------ run

    def _threads(self) -> int:
        s = self.settings
        return s.threads if s.threads is not None else max(1, min(s.clients, len(os.sched_getaffinity(0))))

    def run(self, endpoint: HttpEndpoint, ctx: RunContext) -> RunResult:
        s = self.settings
        result = RunResult(headline=list(self.headline))
        threads = self._threads()
        seed = s.seed if s.seed is not None else secrets.randbits(63)
        duration = s.duration
        if duration is None and s.requests is None:
            duration = DEFAULT_DURATION_S

        # Back to back (no rate, no think time) is closed loop.
        stalls = StallWatch(closed_loop=s.rate is None and s.think_time is None)

        def progress(interval: _engine.Interval) -> None:
            stalls.add(interval)
            phase = "warm-up" if interval.warmup else "progress"
            ctx.status(f"{phase}: {interval.t_s:.1f} s, {interval.tps:.0f} req/s, "
                       f"p99 {interval.latency_p99_ms:.2f} ms, {interval.failed} errors")
            if not interval.warmup:
                for name in SERIES_FIELDS:
                    if name != "lag_mean_ms" or s.rate is not None:
                        ctx.series.add(SERIES_SOURCE, name, interval.t_s, interval_value(interval, name))

        ctx.status(f"http: connecting {s.clients} clients on {threads} threads to {endpoint.display()}")
        try:
            out = engine_run(
                ctx, "http_run", endpoint.address, host=endpoint.host_header, prefix=endpoint.prefix, dirs=s.dirs(),
                clients=s.clients, threads=threads, t0_ns=ctx.t0_ns, duration_s=duration,
                transactions=s.requests, warmup_s=s.warmup, rate_tps=s.rate, schedule=s.schedule,
                seed=seed, requests_per_connection=s.requests_per_connection,
                connect_timeout_s=s.connect_timeout, request_timeout_s=s.request_timeout,
                think_time_s=s.think_time, only=s.only_file(), io=s.io, progress=progress,
            )
        except _engine.ConfigError as exc:
            raise UserError(f"workload http: {exc}") from None
        except _engine.EngineError as exc:
            raise RunFailure(f"http: {exc}") from None
        ctx.measure_start_s = out.measure_start_t_s
        ctx.measure_end_s = out.measure_start_t_s + out.measured_s
        result.events.append(Event(out.measure_start_t_s, "seed", f"random seed {seed}"))
        result.events.append(Event(out.measure_start_t_s, "io", f"io: {out.io}"))
        for e in out.events:
            result.events.append(Event(e.t_s, e.kind, e.message))
        if out.lost_clients:
            first = next((e.message for e in out.events if e.kind == "lost-connection"), "")
            raise RunFailure(f"http: {out.lost_clients} of {s.clients} clients lost the server "
                             f"(server down?): {first}")
        if out.client_bound:
            result.flags.append(Flag.CLIENT_BOUND)
        self._metrics(out, result, threads)
        stalls.annotate(result)
        return result

    def _metrics(self, out: _engine.DriverResult, result: RunResult, threads: int) -> None:
        s = self.settings
        add = result.add_metric
        measured = out.measured_s
        add("req_per_s", out.tps, "req/s", "responses with status 200 and the file's exact size per second "
            "over the measured window (connection set-up excluded)", higher_is_better=True)
        add("throughput_mbps", out.payload_bytes * 8 / measured / 1e6 if measured > 0 else 0.0, "Mb/s",
            "body bytes of the good responses per second, in megabits (10^6 bits)", higher_is_better=True)
        add("requests", out.transactions, "req", "good responses in the measured window")
        add("body_bytes", out.payload_bytes, "B", "body bytes of the good responses")
        add("errors", out.failed, "req", "requests that failed (every kind)", higher_is_better=False)
        for kind, n in out.errors_by_kind.items():
            add(f"errors.{kind}", n, "req", f"requests that failed with {kind}", higher_is_better=False)
        add("measured_s", measured, "s", "measured window: end of warm-up to the last completion")
        base = "from the intended send time (open loop)" if s.rate else "from send (closed loop)"
        histograms: list[tuple[str, bytes, Any]] = [("all", bytes(out.latency_histogram), out.latency)]
        histograms += [(t.name, bytes(t.histogram), t.latency) for t in out.by_type]
        total = sum(t.committed + t.failed for t in out.by_type)
        for name, data, summary in histograms:
            prefix = "latency" if name == "all" else f"latency.{name}"
            what = "response time" if name == "all" else f"{name} response time"
            if summary.count == 0:
                continue
            for label, q, words in QUANTILES:
                add(f"{prefix}_{label}_ms", _ms(_engine.hdr_quantile_us(data, q)), "ms", f"{what} {words}, {base}",
                    higher_is_better=False)
            add(f"{prefix}_mean_ms", _ms(summary.mean_us), "ms", f"{what} mean, {base}", higher_is_better=False)
            add(f"{prefix}_max_ms", _ms(summary.max_us), "ms", f"{what} max", higher_is_better=False)
            result.histograms.append(Histogram(prefix, "us", out.histogram_encoding, data))
        for t in out.by_type:
            if total:
                add(f"mix.{t.name}", (t.committed + t.failed) / total, "ratio",
                    f"share of requests for {t.name} (realised; asked: "
                    f"{CLASS_SHARE[CLASSES.index(t.name)]:.0%})")
            add(f"throughput_mbps.{t.name}", t.payload_bytes * 8 / measured / 1e6 if measured > 0 else 0.0, "Mb/s",
                f"body bytes of {t.name} per second, in megabits")
        if s.rate is not None:
            add("rate_target", s.rate, "req/s", "requested rate (open loop)")
            add("lag_p99_ms", _ms(out.lag.p99_us), "ms", "schedule lag p99", higher_is_better=False)
        add("driver_cpu_s", out.driver_cpu_s, "s", "CPU time of the driver's threads in the measured window")
        if out.transactions:
            add("driver_cpu_per_req_us", out.driver_cpu_s / out.transactions * 1e6, "us",
                "driver CPU time per good response", higher_is_better=False)
            if out.io.startswith("io_uring"):
                add("io_enters_per_req", out.io_enters_per_tx, "calls",
                    f"io_uring_enter calls per good response ({out.io})", higher_is_better=False)
        if out.cpu_given_s > 0:
            add("driver_cpu_share", out.driver_cpu_s / out.cpu_given_s, "ratio",
                f"driver CPU over what its {threads} threads could use; above 0.8 the run is client-bound",
                higher_is_better=False)
        add("connect_time_mean_ms", out.connect_total_s / max(1, out.clients) * 1000, "ms",
            "mean time to open one connection at the start", higher_is_better=False)
        add("clients", s.clients, "clients")
        add("threads", threads, "threads")
        add("fileset_dirs", s.dirs(), "dirs")
        add("fileset_bytes", s.dirs() * _engine.fileset_dir_bytes(), "B")

    # ------------------------------------------------------------ report

    @classmethod
    def report_sections(cls, store: Any, runs: list[dict[str, Any]]) -> list[Any]:
        """The Flash/DeBox study's Table 10, aggregated per factor level over
        repetitions: Mb/s with a row per data set and a column per server or
        configuration, and the 5%/median/95%/mean response times per data set
        x configuration; the per-run rows follow, folded into their own
        section. From the store only."""
        from perflab.analysis import pivot
        from perflab.section import Section, Table, Text

        if not runs:
            return []
        values = {r["id"]: {m["name"]: m["value"] for m in store.metrics(r["id"])} for r in runs}

        def metric(name: str) -> Any:
            return lambda run: values.get(run["id"], {}).get(name)

        done = pivot.done(runs)
        factors = pivot.varied(done)
        data_set = [f for f in factors if "fileset" in f]
        config = [f for f in factors if f not in data_set]
        sections = []
        if done:
            headers, rows = pivot.pivot(done, metric("throughput_mbps"), data_set, config)
            if not data_set:
                headers[0] = "data set"
                rows = [["as set", *row[1:]] for row in rows]
            if not config:
                headers[1:] = ["Mb/s"]
            lat_cols = [(label, metric(name)) for name, label in (
                ("latency_p5_ms", "5% ms"), ("latency_p50_ms", "median ms"),
                ("latency_p95_ms", "95% ms"), ("latency_mean_ms", "mean ms"))]
            lat_headers, lat_rows = pivot.per_level(done, lat_cols, data_set + config)
            sections.append(Section("Web server: throughput and response time", [
                Text("Throughput counts the body bytes of good responses (status 200 and the file's exact size) "
                     "over the measured window, in megabits per second; rows are data sets, columns the servers "
                     "or configurations, as the Flash/DeBox study's Table 10. " + pivot.INTERVAL_NOTE.format(
                         center="mean")),
                Table(headers, rows, "Mb/s per data set and configuration (mean over repetitions)"),
                Text("Response times run from send (closed loop) or from each request's intended send time "
                     "(with a rate): each run's 5%, median, 95% and mean, averaged over the repetitions."),
                Table(lat_headers, lat_rows, "Response time (ms) per data set and configuration"),
            ], headline=True))
        columns = (("fileset_bytes", "data set B"), ("throughput_mbps", "Mb/s"), ("req_per_s", "req/s"),
                   ("latency_p5_ms", "5% ms"), ("latency_p50_ms", "median ms"), ("latency_p95_ms", "95% ms"),
                   ("latency_mean_ms", "mean ms"), ("errors", "errors"), ("driver_cpu_per_req_us", "driver us/req"))
        headers, rows = pivot.run_rows(runs, values, columns)
        sections.append(Section("Web server runs", [
            Table(headers, rows, "Each HTTP run on the SPECweb99-like file set"),
        ]))
        return sections
