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

Any server's URLs: `request_mix` (a list of { path, weight, method, headers,
body }) or `request_mix_file` (a request a line, `[METHOD] PATH [weight]`)
instead of the file set. No file set is made or probed for them (a managed
server serves `root`, else the file set); a response is good with any status
below 400, its size unchecked; each entry is a transaction type ("r1", "r2",
... in the mix's order) with its own counts and latency.

Connection churn: the engine counts the connections every client opened
and the time their connects took, and the responses that ended their
connection (Connection: close, HTTP/1.0). A server that ends a connection
without saying so is counted too: the connections opened that no close,
error or `requests_per_connection` explains. A run where most responses
ended their connection is flagged `server-closes` (and `http/1.0`): each of
its requests paid a connect.

Errors by class (4xx, 5xx, timeouts, resets, closes, ...): each class's
count and share of the measured requests are figures of the run
(`errors_class.*`, `error_share.*`), in `show`'s notes and the report's run
table; a run where more than `ERROR_FLAG_SHARE` of the requests failed is
flagged `http-errors`, with an event naming the classes.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from perflab import _engine, cache
from perflab.context import RunContext
from perflab.drivers import engine_run
from perflab.endpoints import Capability, HttpEndpoint
from perflab.errors import RunFailure, UserError
from perflab.model import Event, Flag, Histogram, LoadResult, RunResult
from perflab.section import Section
from perflab.settings_model import StrictModel
from perflab.units import Duration, Size, format_size
from perflab.workloads import WORKLOADS, harness
from perflab.workloads.base import Workload, WorkloadSettings
from perflab.workloads.stalls import StallWatch

if TYPE_CHECKING:
    from perflab.store import Store
    from perflab.targets.base import TargetSettings

CLASSES = ("class0", "class1", "class2", "class3")
CLASS_SHARE = (0.35, 0.50, 0.14, 0.01)
DEFAULT_DURATION_S = 30.0
SERIES_SOURCE = "http"
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
    # Seed of the file set's generator: the same seed, the same files.
    seed: int = Field(default=1, ge=0)
    # Where generated file sets are kept and reused (default: perflab's cache, PERFLAB_CACHE).
    cache_dir: str | None = None
    # Generator threads (default: the CPUs perflab may use).
    jobs: int | None = Field(default=None, ge=1, le=256)

    @model_validator(mode="after")
    def _one_rule(self) -> FileSetSettings:
        if self.size is not None and self.connections is not None:
            raise ValueError("got both size and connections; allowed: one of them")
        return self


# A mix is at most this many requests (each is a transaction type of its own).
MAX_MIX = 256
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
# A run is flagged when more than this share of its responses ended their connection.
CHURN_FLAG_SHARE = 0.5
# A run is flagged `http-errors` when more than this share of its requests failed.
ERROR_FLAG_SHARE = 0.01
# The engine's error kinds by class, in the order they are shown (a kind not
# named here is a wrong status of the file set, "2xx" or "3xx": "status").
ERROR_CLASSES = {"4xx": ("4xx",), "5xx": ("5xx",), "timeouts": ("timeout",), "resets": ("reset",),
                 "closes": ("closed", "short-body"), "connects": ("connect",),
                 "malformed": ("bad-response", "long-body")}
# What each class is, for the figures' descriptions.
ERROR_CLASS_WORDS = {
    "4xx": "a 4xx status (the server refused the request)", "5xx": "a 5xx status (the server failed)",
    "timeouts": "no whole response within request_timeout",
    "resets": "the connection reset by the server (RST)",
    "closes": "the connection closed by the server before the whole response",
    "connects": "a connection that could not be made (refused aside) or timed out",
    "malformed": "a response perflab could not read (bad header, more bytes than its length)",
    "status": "a status other than 200 for a file of the set",
}


# A URL with a scheme ("http://...", "https:", "ftp:") or a host ("//host/..."):
# not a path under the target's URL.
ABSOLUTE_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*:|//)")


def mix_path_problem(path: str) -> tuple[str, str] | None:
    """Why `path` is not a path under the target's URL (it names a scheme or
    a host) and what is allowed; None when it is a path. Requests go to the
    target only: such a URL would otherwise become a path on it."""
    if not ABSOLUTE_URL.match(path):
        return None
    rest = re.sub(r"^[A-Za-z][A-Za-z0-9+.-]*:", "", path)
    where = re.sub(r"^//[^/?#]*", "", rest) if rest.startswith("//") else rest
    where = where if where.startswith("/") else "/" + where
    return (f"got {path!r}: a URL with its own scheme or host, and perflab sends every request to the target "
            "(target.url, or the server it starts)",
            f"a path under the target's URL, e.g. {where!r}; to test that server, make it the target "
            "(target.kind = \"http\" and target.url, on loopback)")


class MixRequest(StrictModel):
    """One request of `request_mix`: its path under the target's URL."""

    # The request's path under the target's URL ("/index.html").
    path: str = Field(min_length=1, max_length=8192, pattern=r"^[^\s]+$")
    # Its share of the requests, relative to the other entries' weights.
    weight: float = Field(default=1.0, gt=0, le=1e9)
    # The HTTP method.
    method: Literal["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"] = "GET"
    # Extra request headers, name = value.
    headers: dict[str, str] = Field(default_factory=dict)
    # The request body (for POST, PUT, PATCH).
    body: str = ""

    @field_validator("path")
    @classmethod
    def _a_path(cls, value: str) -> str:
        problem = mix_path_problem(value)
        if problem is not None:
            raise ValueError(f"{problem[0]}; allowed: {problem[1]}")
        return value


def read_mix_file(path: Path) -> list[MixRequest]:
    """`[METHOD] PATH [weight]` a line, as vegeta's and wrk's users keep their
    URL lists; blank lines and lines starting with # are skipped. UserError
    names the line."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"workload.request_mix_file: cannot read {path}: {exc}",
                        "give a readable text file, a request a line: [METHOD] PATH [weight]") from None
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        method = words.pop(0).upper() if words[0].upper() in METHODS else "GET"
        weight = 1.0
        if len(words) == 2:
            try:
                weight = float(words.pop())
            except ValueError:
                words.append("?")
        if len(words) != 1 or not (weight > 0 and weight < 1e9):
            raise UserError(f"workload.request_mix_file: {path} line {number}: got {line.strip()!r}",
                            "write a request a line: [METHOD] PATH [weight], e.g. \"GET /index.html 3\"")
        problem = mix_path_problem(words[0])
        if problem is not None:
            raise UserError(f"workload.request_mix_file: {path} line {number}: {problem[0]}", problem[1])
        out.append(MixRequest(path=words[0], weight=weight, method=method))  # type: ignore[arg-type]
    if not out or len(out) > MAX_MIX:
        raise UserError(f"workload.request_mix_file: {path} holds {len(out)} requests",
                        f"give 1..{MAX_MIX} requests, one a line: [METHOD] PATH [weight]")
    return out


class HttpSettings(harness.HarnessSettings):
    kind: Literal["http"]
    # The SPECweb99-like file set the server serves (its size, or SPECweb99 rule from connections).
    fileset: FileSetSettings = Field(default_factory=FileSetSettings)
    clients: int = Field(default=16, ge=1, le=harness.MAX_CLIENTS)
    # Requests per client (instead of a duration).
    requests: int | None = Field(default=None, ge=1, le=10**12)
    # A pause between a client's response and its next request (closed loop only).
    think_time: Duration | None = Field(default=None, gt=0)
    # Close and reopen each client's connection after this many requests (default: keep-alive for the whole
    # run).
    requests_per_connection: int | None = Field(default=None, ge=1)
    # A connect that takes longer is an error of kind "connect".
    connect_timeout: Duration = Field(default=5.0, gt=0)
    # A response that takes longer is an error of kind "timeout".
    request_timeout: Duration = Field(default=30.0, gt=0)
    # Ask for one file every time ("dir00000/class1_0", 1 KiB): the raw request rate.
    only: str | None = Field(default=None, pattern=r"^dir\d{5}/class[0-3]_[0-8]$")
    # Socket I/O: "epoll" (the default), "uring" (fails without io_uring) or
    # "auto" (io_uring where the kernel and process allow it, else epoll with
    # the reason). On the ring every ready connection's send and receive go
    # to the kernel in one io_uring_enter. Unlike tpcb's, io_uring has not
    # earned http's default: benchmarks/http_vs_wrk.py measured the same CPU
    # per request on both (the kernel's loopback TCP path is three quarters
    # of it), and no soak has run it against a failing server. Recorded as
    # the run's "io" event.
    io: Literal["auto", "uring", "epoll"] = "epoll"
    # Any server's URLs instead of the file set: requests drawn by weight, or
    # read from a file (relative to the experiment file), one a line.
    request_mix: list[MixRequest] | None = Field(default=None, min_length=1, max_length=MAX_MIX)
    # A file of requests, one a line: [METHOD] PATH [weight] (relative to the experiment file).
    request_mix_file: str | None = Field(default=None, min_length=1)
    # With a mix, the directory a managed server (nginx, process) serves;
    # default: the file set.
    root: str | None = Field(default=None, min_length=1)
    # A request is never tried again (HarnessSettings' latency_limit counts one late
    # from its intended start; under a rate, a request whose slot is already later is skipped, not sent).
    max_tries: int = Field(default=1, ge=1, le=1)

    @model_validator(mode="after")
    def _consistent(self) -> HttpSettings:
        if self.request_mix is not None and self.request_mix_file is not None:
            raise ValueError("got both request_mix and request_mix_file; allowed: one of them")
        if self.only is not None and self.has_mix():
            raise ValueError("got only with a request mix; allowed: only for the file set")
        if self.root is not None and not self.has_mix():
            raise ValueError("got root without a request mix; allowed: root with request_mix or request_mix_file")
        if self.duration is not None and self.requests is not None:
            raise ValueError("got both duration and requests; allowed: one of them")
        if self.think_time is not None and self.rate is not None:
            raise ValueError("got think_time with rate; allowed: think_time in closed loop only")
        return self

    def has_mix(self) -> bool:
        return self.request_mix is not None or self.request_mix_file is not None

    def mix(self, base_dir: Path) -> list[MixRequest]:
        """The mix's requests (the file read from `base_dir` on)."""
        if self.request_mix is not None:
            return self.request_mix
        assert self.request_mix_file is not None
        return read_mix_file(base_dir / Path(self.request_mix_file).expanduser())

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


CHURN_WORDS = re.compile(r"(\w+)=(\d+)")


def silent_closes(sums: dict[str, int], errors_by_kind: dict[str, int], clients: int,
                  requests_per_connection: int | None) -> int:
    """Connections the server ended without saying so (no Connection: close):
    the engine's count where it gives one ("closed_silently"), else the
    reconnections nothing else explains. A client reconnects after its first
    connect only when the server said close, after `requests_per_connection`
    requests, after an error that ends the connection, or when a request
    found its kept-alive connection closed and was sent again on a new one:
    that last is the silent close."""
    if "closed_silently" in sums:
        return sums["closed_silently"]
    opened, responses = sums.get("opened", 0), sums.get("responses", 0)
    explained = clients + sums.get("closed_by_server", 0)
    explained += sum(n for kind, n in errors_by_kind.items() if kind not in ("4xx", "5xx"))
    if requests_per_connection:
        explained += responses // requests_per_connection
    return max(0, opened - explained)


def churn(out: _engine.DriverResult, result: RunResult, clients: int = 0,
          requests_per_connection: int | None = None) -> None:
    """The engine's "http-connections" events (one per driver) summed as
    metrics; a run where most responses ended their connection (with
    Connection: close, HTTP/1.0, or silently) is flagged, and says so in an event."""
    sums: dict[str, int] = {}
    for e in out.events:
        if e.kind == "http-connections":
            for key, value in CHURN_WORDS.findall(e.message):
                sums[key] = sums.get(key, 0) + int(value)
    opened, responses = sums.get("opened", 0), sums.get("responses", 0)
    if not opened:
        return
    add = result.add_metric
    add("connections_opened", opened, "conns", "connections the clients opened over the run (warm-up and set-up "
        "included)")
    add("connect_mean_ms", sums.get("connect_ns", 0) / opened / 1e6, "ms", "mean time of one connect, every "
        "reconnection included (a reconnection's is inside its request's latency)", higher_is_better=False)
    if not responses:
        return
    add("connections_per_req", opened / responses, "conns", "connections opened per response read (1: the server "
        "closes every connection; near 0: kept alive)", higher_is_better=False)
    said, http10 = sums.get("closed_by_server", 0), sums.get("http10", 0)
    silent = silent_closes(sums, dict(out.errors_by_kind), clients, requests_per_connection)
    closed = said + silent
    add("closed_by_server", closed, "conns", "connections the server ended after a response (Connection: close, "
        "HTTP/1.0, or without a word: the next request found it closed and was sent again on a new one)",
        higher_is_better=False)
    add("closed_silently", silent, "conns", "connections the server ended without Connection: close (the next "
        "request found it closed and was sent again on a new connection)", higher_is_better=False)
    add("server_closed_share", closed / responses, "ratio", "responses after which the server ended the connection "
        "(Connection: close, HTTP/1.0, or without a word)", higher_is_better=False)
    add("http10_share", http10 / responses, "ratio", "responses with an HTTP/1.0 status line")
    at = out.measure_start_t_s + out.measured_s
    if closed > CHURN_FLAG_SHARE * responses:
        result.flags.append(Flag.SERVER_CLOSES)
        why = ("HTTP/1.0" if http10 > CHURN_FLAG_SHARE * responses else "Connection: close" if said >= silent
               else "without a Connection: close header: each next request found it closed and was sent again")
        result.events.append(Event(at, "connection-churn", f"the server ended the connection after {closed} of "
                                   f"{responses} responses ({why}): {opened / responses:.2f} connections a request, "
                                   f"each connect {sums.get('connect_ns', 0) / opened / 1e6:.3f} ms on average"))
    if http10 > CHURN_FLAG_SHARE * responses:
        result.flags.append(Flag.HTTP10)


def error_class(kind: str) -> str:
    """The class of one of the engine's error kinds (ERROR_CLASSES)."""
    return next((c for c, kinds in ERROR_CLASSES.items() if kind in kinds), "status")


def error_classes(out: _engine.DriverResult, result: RunResult) -> None:
    """The measured window's failed requests by class: each class's count
    and its share of the requests sent (good and failed); a run where more
    than ERROR_FLAG_SHARE failed is flagged `http-errors`, and an event
    names the classes."""
    counts: dict[str, int] = {}
    for kind, n in out.errors_by_kind.items():
        counts[error_class(kind)] = counts.get(error_class(kind), 0) + n
    sent = out.transactions + out.failed
    if not sent:
        return
    order = [*ERROR_CLASSES, "status"]
    for name in sorted(counts, key=order.index):
        words = ERROR_CLASS_WORDS[name]
        result.add_metric(f"errors_class.{name}", counts[name], "req", f"requests that failed with {words}",
                          higher_is_better=False)
        result.add_metric(f"error_share.{name}", counts[name] / sent, "ratio", f"share of the requests sent "
                          f"that failed with {words}", higher_is_better=False)
    if out.failed > ERROR_FLAG_SHARE * sent:
        result.flags.append(Flag.HTTP_ERRORS)
        parts = ", ".join(f"{name} {counts[name]} ({counts[name] / sent:.1%})"
                          for name in sorted(counts, key=order.index))
        result.events.append(Event(out.measure_start_t_s + out.measured_s, "http-errors",
                                   f"{out.failed} of {sent} requests failed ({out.failed / sent:.1%}, above "
                                   f"{ERROR_FLAG_SHARE:.0%}): {parts}"))


@WORKLOADS.declare(
    "http",
    "HTTP/1.1 GETs of a SPECweb99-like file set from a Rust driver: req/s, Mb/s, latency per class",
)
class HttpWorkload(Workload[HttpEndpoint]):
    Settings: ClassVar[type[WorkloadSettings]] = HttpSettings
    example: ClassVar[dict[str, Any]] = {"duration": "1s"}
    sample_factor: ClassVar[str] = "clients"
    data_fields: ClassVar[tuple[str, ...]] = ("fileset",)
    needs: ClassVar[frozenset[Capability]] = frozenset({Capability.HTTP})
    headline: ClassVar[tuple[str, ...]] = ("req_per_s", "throughput_mbps", "latency_p95_ms")
    metrics: ClassVar[tuple[str, ...]] = (
        "req_per_s", "throughput_mbps", "requests", "body_bytes", "errors", "latency_p5_ms", "latency_p50_ms",
        "latency_p95_ms", "latency_p99_ms", "latency_p99_9_ms", "latency_mean_ms", "latency_max_ms", "latency.*",
        "errors.*", "errors_class.*", "error_share.*", "requests.*", "mix.*", "throughput_mbps.*",
        "fileset_dirs", "fileset_bytes", "connections_opened", "connect_mean_ms", "connections_per_req",
        "closed_by_server", "closed_silently", "server_closed_share", "http10_share", *harness.METRICS)
    distributable: ClassVar[bool] = True
    # the engine's per-second "tps" of an HTTP run counts requests
    series_labels: ClassVar[dict[str, str]] = {"tps": "req/s"}

    settings: HttpSettings

    def writes(self) -> bool:
        return False

    @classmethod
    def preflight(cls, settings: HttpSettings, base_dir: Path) -> list[tuple[str, str]]:
        problems = []
        if settings.request_mix_file is not None:
            try:
                settings.mix(base_dir)
            except UserError as exc:
                problems.append(exc.as_problem("workload.request_mix_file"))
        if settings.root is not None and not (base_dir / Path(settings.root).expanduser()).is_dir():
            problems.append(("workload.root", f"got {settings.root!r}, not a directory; allowed: the directory "
                             "a managed server serves for the mix"))
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
    def cache_additions(cls, settings: HttpSettings, target: TargetSettings, base_dir: Path) -> dict[Path, int]:
        """The file set a run would generate into the cache (a server perflab
        starts; an external one must hold it already), with its size from its
        parameters: {} when the cache holds it whole."""
        from perflab.targets import TARGETS
        from perflab.targets.webserver import ManagedWebServer

        if not issubclass(TARGETS.get(target.kind), ManagedWebServer) or settings.root is not None:
            return {}
        entry = fileset_entry(cls.cache_dir_of(settings, base_dir), settings.dirs(), settings.fileset.seed)
        if (entry / cache.FILESET_COMPLETE).is_file():
            return {}
        return {entry: settings.dirs() * _engine.fileset_dir_bytes()}

    # ------------------------------------------------------------ load

    def prepare(self, endpoint: HttpEndpoint, ctx: RunContext) -> LoadResult:
        s = self.settings
        if s.has_mix():
            mix = s.mix(ctx.base_dir)
            if s.root is not None and endpoint.publish is not None:
                endpoint.publish((ctx.base_dir / Path(s.root).expanduser()).resolve())
            if s.root is not None or endpoint.publish is None:
                # any server's own URLs: nothing to make or to probe
                return LoadResult(steps={}, rows={"requests": len(mix)}, reused=True)
        dirs = s.dirs()
        if endpoint.publish is None:
            # perflab never uploads to a server it did not start: the set must be there.
            # (A mix of the server's own URLs needs none: it returned above.)
            self._probe(endpoint, dirs)
            return LoadResult(steps={}, rows={"directories": dirs}, reused=True)
        jobs = s.fileset.jobs or max(1, len(os.sched_getaffinity(0)))
        where = self._cache_dir(ctx)
        ctx.status(f"file set: {dirs} directories (seed {s.fileset.seed}) in {where}")
        # In use until this process exits: `perflab cache prune` leaves it.
        cache.use(fileset_entry(where, dirs, s.fileset.seed))
        with harness.engine_errors("http", settings="workload.fileset"):
            report = _engine.fileset_prepare(str(where), dirs=dirs, seed=s.fileset.seed, jobs=jobs,
                                             cancel=ctx.cancel)
        want = dirs * _engine.fileset_dir_bytes()
        if report.size_bytes != want or (s.fileset.size is not None and report.size_bytes < s.fileset.size):
            raise RunFailure(f"http: the file set holds {report.size_bytes} bytes, {want} were asked for")
        if report.generated:
            ctx.note(f"cache: added {format_size(cache.disk_bytes(Path(report.root)))} of file set under "
                     f"{report.root}")
        endpoint.publish(Path(report.root))
        step = "fileset_generate" if report.generated else "fileset_verify_cached"
        # a set found whole in the cache is the same files: nothing was loaded (no "fresh load")
        return LoadResult(steps={step: report.seconds}, reused=not report.generated,
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
                    f"server it did not start: copy a set perflab generated there ({default_cache_dir()}, made by "
                    "a run on a managed nginx), or give workload.request_mix with the server's own URLs"
                )

    # ------------------------------------------------------------ run

    def run(self, endpoint: HttpEndpoint, ctx: RunContext) -> RunResult:
        s = self.settings
        result = RunResult(headline=list(self.headline))
        threads = s.effective_threads()
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
            harness.store_second(ctx, SERIES_SOURCE, interval, scheduled=s.rate is not None)

        ctx.status(f"http: connecting {s.clients} clients on {threads} threads to {endpoint.display()}")
        if s.has_mix():
            mix = s.mix(ctx.base_dir)
            what: dict[str, Any] = {"request_mix": [
                (r.method, endpoint.prefix + r.path.lstrip("/"), list(r.headers.items()), r.body.encode(), r.weight)
                for r in mix]}
        else:
            mix = []
            what = {"dirs": s.dirs(), "prefix": endpoint.prefix, "only": s.only_file()}
        with harness.engine_errors("http"):
            out = engine_run(
                ctx, _engine.http_run, endpoint.address, host=endpoint.host_header, **what,
                harness=s.engine_settings(threads=threads, duration=duration, transactions=s.requests, seed=seed),
                t0_ns=ctx.t0_ns, requests_per_connection=s.requests_per_connection,
                connect_timeout_s=s.connect_timeout, request_timeout_s=s.request_timeout,
                think_time_s=s.think_time, progress=progress,
            )
        harness.take_run(ctx, result, out, clients=s.clients, seed=seed, any_loss_fails=True, steady_max_s=s.steady_max, window_from=s.window,
                         lost=f"http: {out.lost_clients} of {s.clients} clients lost the server (server down?)")
        self._metrics(out, result, mix)
        if mix:  # what each request type of the metrics (requests.r1, latency.r1_p99_ms) asked: for the export
            result.events.append(Event(0.0, "request-mix", json.dumps(
                {t.name: {"method": r.method, "path": r.path, "weight": r.weight}
                 for t, r in zip(out.by_type, mix, strict=False)})))
        churn(out, result, clients=s.clients, requests_per_connection=s.requests_per_connection)
        error_classes(out, result)
        stalls.annotate(result)
        return result

    def _metrics(self, out: _engine.DriverResult, result: RunResult, mix: list[MixRequest]) -> None:
        s = self.settings
        add = result.add_metric
        measured = out.measured_s
        good = ("responses with a status below 400" if mix else "responses with status 200 and the file's exact size")
        add("req_per_s", out.tps, "req/s", f"{good} per second over the measured window (connection set-up "
            "excluded)", higher_is_better=True)
        if not mix:  # a mix's body sizes are not known: no Mb/s is claimed
            add("throughput_mbps", out.body_bytes * 8 / measured / 1e6 if measured > 0 else 0.0, "Mb/s",
                "body bytes of the good responses per second, in megabits (10^6 bits)", higher_is_better=True)
        add("requests", out.transactions, "req", "good responses in the measured window")
        if not mix:
            add("body_bytes", out.body_bytes, "B", "body bytes of the good responses")
        add("errors", out.failed, "req", "requests that failed (every kind)", higher_is_better=False)
        for kind, n in out.errors_by_kind.items():
            add(f"errors.{kind}", n, "req", f"requests that failed with {kind}", higher_is_better=False)
        base = s.latency_origin()
        histograms: list[tuple[str, bytes, Any]] = [("all", bytes(out.latency_histogram), out.latency)]
        histograms += [(t.name, bytes(t.histogram), t.latency) for t in out.by_type]
        total = sum(t.committed + t.failed for t in out.by_type)
        for name, data, summary in histograms:
            prefix = "latency" if name == "all" else f"latency.{name}"
            what = "response time" if name == "all" else f"{name} response time"
            if summary.count == 0:
                continue
            for label, q, words in QUANTILES:
                add(f"{prefix}_{label}_ms", harness.ms(_engine.hdr_quantile_us(data, q)), "ms", f"{what} {words}, {base}",
                    higher_is_better=False)
            add(f"{prefix}_mean_ms", harness.ms(summary.mean_us), "ms", f"{what} mean, {base}", higher_is_better=False)
            add(f"{prefix}_max_ms", harness.ms(summary.max_us), "ms", f"{what} max", higher_is_better=False)
            result.histograms.append(Histogram(prefix, "us", out.histogram_encoding, data))
        weights = sum(r.weight for r in mix)
        for i, t in enumerate(out.by_type):
            if mix:
                r = mix[i]
                add(f"requests.{t.name}", t.committed + t.failed, "req", f"requests {r.method} {r.path} sent "
                    f"(good or failed; weight {r.weight:g})")
                if total:
                    add(f"mix.{t.name}", (t.committed + t.failed) / total, "ratio",
                        f"share of requests for {r.method} {r.path} (realised; asked: {r.weight / weights:.1%})")
                continue
            if total:
                add(f"mix.{t.name}", (t.committed + t.failed) / total, "ratio",
                    f"share of requests for {t.name} (realised; asked: "
                    f"{CLASS_SHARE[CLASSES.index(t.name)]:.0%})")
            add(f"throughput_mbps.{t.name}", t.body_bytes * 8 / measured / 1e6 if measured > 0 else 0.0, "Mb/s",
                f"body bytes of {t.name} per second, in megabits")
        if not mix:
            add("fileset_dirs", s.dirs(), "dirs")
            add("fileset_bytes", s.dirs() * _engine.fileset_dir_bytes(), "B")
        # the harness's own figures, and its lag and failed-latency histograms after the workload's
        harness.harness_metrics(result, out, per=("req", "good response"), scheduled=s.rate is not None,
                                latency_limit_s=s.latency_limit, rate=s.rate)

    # ------------------------------------------------------------ report

    @classmethod
    def report_sections(cls, store: Store, runs: list[dict[str, Any]]) -> list[Section]:
        """The Flash/DeBox study's Table 10, aggregated per factor level over
        repetitions: Mb/s with a row per data set and a column per server or
        configuration, and the 5%/median/95%/mean response times per data set
        x configuration; the per-run rows follow, folded into their own
        section. From the store only."""
        from perflab.analysis import pivot
        from perflab.section import Section, Table, Text
        from perflab.workloads import webstudy

        if not runs:
            return []
        values = {r["id"]: {m["name"]: m["value"] for m in store.metrics(r["id"])} for r in runs}

        def metric(name: str) -> Any:
            return lambda run: values.get(run["id"], {}).get(name)

        done = pivot.done(runs)
        factors = pivot.varied(done)
        data_set = [f for f in factors if "fileset" in f]
        config = [f for f in factors if f not in data_set]
        # A request mix's body sizes are not known (no Mb/s is stored): its runs are compared by req/s.
        by_bytes = any("throughput_mbps" in values.get(r["id"], {}) for r in done)
        unit, by = ("Mb/s", "throughput_mbps") if by_bytes else ("req/s", "req_per_s")
        sections = []
        if done and by_bytes and webstudy.server_factors(config):
            # the server is a factor: the study's Table 10 and Figure 12, a column and a line per server
            sections += webstudy.sections(store, done, values, data_set, config)
        elif done:
            headers, rows = pivot.pivot(done, metric(by), data_set, config)
            if not data_set:
                headers[0] = "data set" if by_bytes else "request mix"
                rows = [["as set" if by_bytes else "as given", *row[1:]] for row in rows]
            if not config:
                headers[1:] = [unit]
            lat_cols = [(label, metric(name)) for name, label in (
                ("latency_p5_ms", "5% ms"), ("latency_p50_ms", "median ms"),
                ("latency_p95_ms", "95% ms"), ("latency_mean_ms", "mean ms"))]
            lat_headers, lat_rows = pivot.per_level(done, lat_cols, data_set + config)
            counted = ("Throughput counts the body bytes of good responses (status 200 and the file's exact size) "
                       "over the measured window, in megabits per second; rows are data sets, columns the servers "
                       "or configurations, as the Flash/DeBox study's Table 10. " if by_bytes else
                       "Throughput counts the good responses of the request mix (any status below 400; their "
                       "sizes are not known, so no Mb/s is claimed) per second over the measured window; "
                       "columns are the servers or configurations. ")
            sections.append(Section("Web server: throughput and response time", [
                Text(counted + pivot.INTERVAL_NOTE.format(center="mean")),
                Table(headers, rows, f"{unit} per {'data set' if by_bytes else 'request mix'} and configuration "
                      "(mean over repetitions)"),
                Text("Response times run from send (closed loop) or from each request's intended send time "
                     "(with a rate): each run's 5%, median, 95% and mean, averaged over the repetitions."),
                Table(lat_headers, lat_rows, "Response time (ms) per data set and configuration"),
            ], headline=True))
        columns = (("fileset_bytes", "data set B"), ("throughput_mbps", "Mb/s"), ("req_per_s", "req/s"),
                   ("latency_p5_ms", "5% ms"), ("latency_p50_ms", "median ms"), ("latency_p95_ms", "95% ms"),
                   ("latency_mean_ms", "mean ms"), ("errors", "errors"),
                   *((f"error_share.{c}", f"{c} %") for c in [*ERROR_CLASSES, "status"]),
                   ("connections_per_req", "conns/req"), ("closed_silently", "silent closes"),
                   ("driver_cpu_per_req_us", "driver us/req"))
        # columns no run has a value of (a mix's Mb/s and data set) are left out, and error classes
        # and silent closes no run has
        percent = {f"error_share.{c}" for c in [*ERROR_CLASSES, "status"]}
        shown = [c for c in columns if any(v.get(c[0]) if c[0] in percent | {"closed_silently"} else c[0] in v
                                           for v in values.values())]
        shown_values = {run: {k: (x * 100 if k in percent and x is not None else x) for k, x in v.items()}
                        for run, v in values.items()}
        headers, rows = pivot.run_rows(runs, shown_values, shown)
        parts: list[Any] = [Table(headers, rows, "Each HTTP run (on the SPECweb99-like file set, or a request "
                                  "mix); errors by class in % of the requests sent")]
        flagged = [r["id"] for r in runs if "http-errors" in r.get("flags", [])]
        if flagged:
            parts.insert(0, Text(
                f"http-errors: in run {', '.join(map(str, flagged))} more than {ERROR_FLAG_SHARE:.0%} of the "
                "requests failed; the classes: 4xx and 5xx (the server's status), timeouts (no whole response "
                "within request_timeout), resets and closes (the server ended the connection mid-request), "
                "connects, malformed (a response perflab could not read), status (not 200 for a file of the set). "
                "Their throughput and response times count good responses only."))
        sections.append(Section("Web server runs", parts))
        return sections
