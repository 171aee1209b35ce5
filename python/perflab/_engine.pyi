"""Typed stub of perflab._engine, the Rust extension (crates/engine-py)."""

from collections.abc import Callable
from typing import Any, Protocol, TypedDict, final

__version__: str
build_profile: str

# ---- Errors (crates/engine-py/src/errors.rs): every engine error is one of these.

class ConfigError(ValueError):
    """Bad settings for the engine; the message says what is allowed."""

class EngineConnectionError(ConnectionError):
    """The target could not be reached, refused, or failed during set-up."""

class Interrupted(BaseException):
    """SIGINT, SIGTERM or the caller's cancel (perflab.errors.Interrupted is this class)."""

class EngineError(RuntimeError):
    """The engine failed for a reason that is neither the settings nor the target."""

# ---- Results (crates/engine-py/src/results.rs): frozen, typed. DriverResult,
# TxTypeResult and Interval are each declared once there (`record!`); a test
# there holds these classes' fields to it, name, type and order.

@final
class LatencySummary:
    """Count, mean, spread and percentiles of one HDR histogram, in µs."""
    count: int
    mean_us: float
    stddev_us: float
    min_us: int
    p50_us: int
    p90_us: int
    p95_us: int
    p99_us: int
    p999_us: int
    max_us: int

@final
class Interval:
    """One second of a run; t_s is its end, seconds since t0_ns on CLOCK_MONOTONIC."""
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
    clients_running: int
    transactions_by_type: list[int]
    # This second's latency histogram (encoded) in a gated run (on_connected), else None.
    latency_histogram: bytes | None
    # Scheduled transactions whose lag lag_mean_ms is the mean of.
    lag_count: int

@final
class DriverEvent:
    t_s: float
    kind: str
    message: str

@final
class TxTypeResult:
    """One transaction type over the measured window; `histogram` is its
    latency histogram, encoded as DriverResult.histogram_encoding says."""
    name: str
    committed: int
    # bytes of the response bodies its committed transactions received (HTTP; else 0)
    body_bytes: int
    failed: int
    latency: LatencySummary
    histogram: bytes

@final
class DriverResult:
    """Everything a harness run measured, over the measured window (warm-up
    and connection set-up excluded)."""
    transactions: int
    # bytes of the response bodies the committed transactions received (HTTP; else 0)
    body_bytes: int
    failed: int
    skipped: int
    late: int
    retries: int
    retried: int
    errors_by_kind: dict[str, int]
    measured_s: float
    measure_start_t_s: float
    tps: float
    latency: LatencySummary
    lag: LatencySummary
    failed_latency: LatencySummary
    latency_histogram: bytes
    lag_histogram: bytes | None
    failed_histogram: bytes | None
    histogram_encoding: str
    by_type: list[TxTypeResult]
    # Per operation type (oltp's statements), the committed transactions' operations
    # (`committed` counts them); empty for a protocol that does not time them.
    operations: list[TxTypeResult]
    clients: int
    threads: int
    lost_clients: int
    connect_total_s: float
    connect_max_s: float
    connect_phase_s: float
    driver_cpu_s: float
    process_cpu_s: float
    cpu_given_s: float
    client_bound: bool
    io: str
    io_enters_per_tx: float
    # Server processes sampled once a second against their client's pinned driver
    # thread (a PostgreSQL server on this machine), and the samples that found one
    # on another CPU.
    server_sampled: int
    server_off_cpu: int
    series: list[Interval]
    events: list[DriverEvent]

@final
class LoadReport:
    """Each load step's seconds, in the order they ran, and rows per table."""
    steps: list[tuple[str, float]]
    rows: dict[str, int]

@final
class TableLoad:
    table: str
    rows: int
    bytes: int  # COPY data sent, in the format used
    parts: int
    busy_s: float

def parse_duration_s(text: str) -> float:
    """Seconds in "90s", "1h30m", "250ms"; ValueError says what is allowed."""

# ---- TPC-H (crates/engine-py/src/tpch.rs); every call releases the GIL.

def tpch_load_postgres(
    conninfo: str,
    scale_factor: float,
    tables: list[str],
    connections: int,
    copy_format: str = "binary",
    *,
    cancel: _Cancel | None = None,
) -> list[TableLoad]:
    """Generate `tables` at `scale_factor` and COPY them into PostgreSQL over
    `connections` parallel connections (libpq key=value conninfo), in COPY's
    "binary" format (the default: cheaper for the server to parse) or "text".
    A signal or a set `cancel` stops the load between chunks (Interrupted);
    the COPYs in flight are rolled back, the parts already copied stay.
    EngineConnectionError names the table that failed; ConfigError: a bad
    conninfo."""

def tpch_arrow_stream(table_name: str, scale_factor: float, threads: int) -> object:
    """One table as an Arrow C stream PyCapsule ("arrow_array_stream"),
    generated by `threads` threads while it is read. Read it once."""

def tpch_parts(scale_factor: float, tables: list[str]) -> list[tuple[str, int, int]]:
    """(table, part, parts) of every part of `tables` at `scale_factor`, the
    biggest first: the jobs of a parallel load through tpch_write_text."""

def tpch_write_text(
    path: str,
    table_name: str,
    scale_factor: float,
    part: int,
    parts: int,
    *,
    insert_rows: int | None = None,
    cancel: _Cancel | None = None,
) -> int:
    """Part `part` of `parts` of one table as text rows ('|' between fields,
    as COPY text; what LOAD DATA ... FIELDS TERMINATED BY '|' reads) written
    to `path`: a pipe, a FIFO or a file that exists, never created. With
    `insert_rows`, the same rows as multi-row INSERT INTO t VALUES ...
    statements of at most that many rows (and about 1 MiB), one a line,
    every field a quoted literal and a NULL field NULL. The rows
    written. A signal or a set `cancel` stops it between chunks
    (Interrupted); EngineConnectionError: `path` cannot be opened or its
    reader went away."""

def tpch_refresh_pair(pair: int, seed: int) -> tuple[int, int, int]:
    """(block 1..1000, RF1's key slot, RF2's key slot) of refresh pair `pair` (from 1)."""

def tpch_rf1_rows(scale_factor: float, pair: int, seed: int) -> tuple[bytes, bytes, int, int]:
    """RF1's rows as '|'-delimited COPY text: (orders, lineitem, n orders, n lineitems)."""

def tpch_rf2_keys(scale_factor: float, pair: int, seed: int) -> list[int]:
    """RF2's order keys."""

def tpch_official_answer_sf1(query: int) -> str | None:
    """The TPC's SF 1 answer to query 1..22 with the validation parameters
    (from the tpchgen crate); None for any other number."""

# ---- SSB (crates/engine-py/src/ssb.rs): the loaders TPC-H uses; release the GIL.

def ssb_load_postgres(
    conninfo: str,
    scale_factor: float,
    tables: list[str],
    connections: int,
    copy_format: str = "binary",
    *,
    cancel: _Cancel | None = None,
) -> list[TableLoad]:
    """Generate SSB `tables` (date, customer, supplier, part, lineorder) at
    `scale_factor` and COPY them into PostgreSQL over `connections` parallel
    connections, in `copy_format`, stopped by `cancel`, as tpch_load_postgres.
    ConfigError names an unknown table or a bad conninfo."""

def ssb_arrow_stream(table_name: str, scale_factor: float, threads: int) -> object:
    """One SSB table as an Arrow C stream PyCapsule ("arrow_array_stream"),
    generated by `threads` threads while it is read. Read it once."""

def ssb_parts(scale_factor: float, tables: list[str]) -> list[tuple[str, int, int]]:
    """(table, part, parts) of every part of SSB `tables`, as tpch_parts."""

def ssb_write_text(
    path: str,
    table_name: str,
    scale_factor: float,
    part: int,
    parts: int,
    *,
    insert_rows: int | None = None,
    cancel: _Cancel | None = None,
) -> int:
    """Part `part` of `parts` of an SSB table as text rows written to `path`,
    as tpch_write_text (`insert_rows` too); the rows written."""

# ---- Declared workloads (crates/engine-py/src/workloads.rs): each engine
# module with a `pub static WORKLOAD` (crates/engine/src/harness/registry.rs)
# is `NAME_run` (the harness keywords, then its own) and, with a loader,
# `NAME_load`; its stubs follow here. Runs and loads release the GIL
# (crates/engine-py/src/glue.rs); every ~200 ms they check signals (and
# `cancel.is_set()`), stopping every client or loader within about a second.
# A bad own setting (missing, wrong type, out of range) is a ConfigError.

def workloads() -> list[str]:
    """The workloads the engine declares, by name."""

class _Cancel(Protocol):
    def is_set(self) -> bool: ...

class _HarnessSettings(TypedDict):
    """The harness's settings, one object, as every driver binding takes it
    (`harness`; crates/engine-py/src/harness.rs): each by its one name, the
    field of HarnessSettings (python/perflab/workloads/harness.py, which
    declares each default once), durations in seconds. Every key is given:
    the engine has no defaults; a missing or unknown key is a ConfigError."""

    clients: int
    threads: int
    duration: float | None
    transactions: int | None  # per client; http's `requests`
    warmup: float
    rate: float | None  # transactions (requests) per second, all clients
    schedule: str  # "poisson" or "constant"
    latency_limit: float | None
    max_tries: int
    seed: int
    io: str  # "epoll", "uring" or "auto"
    pin: str  # "auto", "on" or "off"
    follow: bool

def harness_settings() -> list[tuple[str, str]]:
    """The harness settings the engine reads from `harness`: (name, unit)."""

# TPC-B (crates/engine/src/tpcb/mod.rs's WORKLOAD).

def tpcb_load(
    conninfo: str,
    *,
    scale: int,
    fillfactor: int = 100,
    on_step: Callable[[str], object] | None = None,
    cancel: _Cancel | None = None,
) -> LoadReport:
    """Load pgbench's data set (drop_tables, create_tables, generate with COPY,
    vacuum, primary_keys). `conninfo` is libpq key=value. A signal or a set
    `cancel` stops it between chunks (Interrupted). ConfigError: bad
    settings; EngineConnectionError: the server refused or failed."""

def tpcb_run(
    conninfo: str,
    *,
    script: str,
    scale: int,
    protocol: str,
    harness: _HarnessSettings,
    t0_ns: int,
    progress: Callable[[Interval], object] | None = None,
    cancel: _Cancel | None = None,
    on_connected: Callable[[], int] | None = None,
) -> DriverResult:
    """Drive pgbench's `script` ("tpcb-like", "simple-update", "select-only")
    with `protocol` ("simple", "extended", "prepared") through the engine's
    load harness, under the harness's settings (`harness`). `progress` gets
    one Interval per second. Under a `rate` the `schedule` ("poisson" or
    "constant") spaces the intended starts and latency runs from them. `io`:
    "epoll", "uring" (ConfigError when io_uring
    is unavailable) or "auto" (io_uring where available, else epoll; the
    result's `io` says which, and why epoll). EngineConnectionError: a client could not
    connect or prepare; Interrupted: a signal or `cancel`. With `on_connected`
    the run is one of several drivers: once every client is connected it calls
    `on_connected()` (the shared barrier), which returns the CLOCK_MONOTONIC ns
    to start at; seconds are cut from that instant and each keeps its encoded
    latency histogram."""

# A workload registered by declaration (crates/engine/src/harness/registry.rs)
# binds NAME_load and NAME_run, and its own Python module states their
# arguments (workloads/ycsb.py: YcsbLoad, YcsbRun), so that a new workload
# needs no line here; tests/test_engine_names.py holds every engine name
# perflab uses to the built engine (a misspelt one fails there, not at a run).
def __getattr__(name: str) -> Any: ...

# ---- HDR histograms and the clock (crates/engine-py/src/measure.rs).

def hdr_merge(parts: list[bytes]) -> bytes:
    """Merge V2-encoded HDR histograms exactly (same bucket layout)."""

def hdr_summary(data: bytes) -> LatencySummary:
    """Count, mean, stddev and percentiles (µs) of an encoded histogram."""

def hdr_quantile_us(data: bytes, quantile: float) -> int:
    """Latency in µs at `quantile` (0..1)."""

def hdr_encode(latencies_us: list[int]) -> bytes:
    """An encoded histogram of the given latencies (µs)."""

def hdr_values(data: bytes) -> list[tuple[int, int]]:
    """Every recorded value (µs; its bucket's value) with its count, lowest first."""

def monotonic_clock_ns() -> int:
    """CLOCK_MONOTONIC as the engine reads it (the clock of time.monotonic_ns())."""

# ---- sysbench OLTP (crates/engine-py/src/oltp.rs); loads and runs release the GIL
# as tpcb's do.

def oltp_load(
    conninfo: str,
    *,
    tables: int,
    table_size: int,
    rand_type: str,
    workers: int = 2,
    seed: int = 0,
    server: str = "postgres",
    mysql_method: str = "local_infile",
    on_step: Callable[[str], object] | None = None,
    cancel: _Cancel | None = None,
) -> LoadReport:
    """Load sysbench's sbtest1..`tables` (drop, create, binary COPY of
    `table_size` rows with k drawn by `rand_type`, the k index, analyze) over
    `workers` connections; `on_step` hears each table as it starts; one step,
    "tables", is the wall time. `server` "mysql": `conninfo` is the MySQL
    client's (MysqlWireEndpoint.wire_conninfo()), the DDL sysbench's for
    MySQL (InnoDB), the rows sent by `mysql_method` ("local_infile": LOAD
    DATA LOCAL INFILE streamed; "insert": multi-row INSERTs). ConfigError:
    bad settings; EngineConnectionError: the server refused or failed."""

def oltp_run(
    conninfo: str,
    *,
    script: str,
    tables: int,
    table_size: int,
    rand_type: str,
    server: str = "postgres",
    harness: _HarnessSettings,
    t0_ns: int,
    progress: Callable[[Interval], object] | None = None,
    cancel: _Cancel | None = None,
    on_connected: Callable[[], int] | None = None,
) -> DriverResult:
    """Drive sysbench's `script` ("point_select", "read_only", "read_write",
    "write_only", "update_index", "update_non_index", "insert") on sbtest1..
    `tables` with ids by `rand_type` ("uniform", "gaussian", "special",
    "pareto") through the load harness, as tpcb_run; one transaction type,
    the script. `server`: "postgres" (a libpq conninfo; deadlocks,
    serialization failures and duplicate keys are retried up to `max_tries`)
    or "mysql" (MysqlWireEndpoint.wire_conninfo(), sysbench's MySQL SQL;
    errors 1213, 1205 and 1020 are retried, others counted by their code)."""

# ---- TPC-C (crates/engine-py/src/tpcc.rs); loads and runs release the GIL
# and check signals and `cancel.is_set()` every ~200 ms.

def tpcc_load(
    conninfo: str,
    *,
    warehouses: int,
    jobs: int,
    seed: int,
    c_last: int,
    copy_format: str = "binary",
    on_step: Callable[[str], object] | None = None,
    cancel: _Cancel | None = None,
) -> LoadReport:
    """COPY the TPC-C initial database (clause 4.3.3.1) for `warehouses` into
    the nine EXISTING empty tables (warehouse, district, customer, history,
    new_order, orders, order_line, item, stock) over `jobs` parallel
    connections, through the engine's one parallel loader (as
    tpch_load_postgres), in `copy_format` "binary" (the default) or "text";
    keys and indexes are the caller's, after the load. The data depends on
    `seed` only (not on `jobs`); `c_last` is the load's C of
    NURand(255, 0, 999) for last names (0..255). Step: "generate_and_copy";
    rows: per table, as the server counted them. A set `cancel` stops the
    load between chunks (Interrupted); the COPYs in flight are rolled back.
    ConfigError: bad settings; EngineConnectionError: the server refused or a
    COPY failed."""

def tpcc_parts(warehouses: int, tables: list[str]) -> list[tuple[str, int, int]]:
    """(table, part, parts) of every part of `tables` (TPC-C's table names)
    at `warehouses`, the biggest first: the jobs of a parallel load through
    tpcc_write_text. ConfigError: an unknown table, or no warehouses."""

def tpcc_write_text(
    path: str,
    table_name: str,
    warehouses: int,
    part: int,
    parts: int,
    *,
    seed: int,
    c_last: int,
    now_s: int,
    insert_rows: int | None = None,
    cancel: _Cancel | None = None,
) -> int:
    """Part `part` of `parts` of TPC-C table `table_name` at `warehouses` as
    text rows ('|' between fields, \\N for NULL: what MySQL's LOAD DATA reads
    with FIELDS TERMINATED BY '|') written to `path` (a pipe, a FIFO, or a
    file that exists; never created), or with `insert_rows` as multi-row
    INSERTs, as tpch_write_text; the rows written. The rows are
    tpcc_load's for the same `seed`, `c_last` (0..255) and load time `now_s`
    (seconds since 1970, UTC). A set `cancel` stops it between chunks
    (Interrupted). ConfigError: bad arguments; EngineError: the pipe's
    reader went away."""

def tpcc_run(
    conninfo: str,
    *,
    warehouses: int,
    harness: _HarnessSettings,
    t0_ns: int,
    mode: str = "statements",
    c_last: int,
    c_id: int,
    ol_i_id: int,
    keying: bool = False,
    weights: list[float] | None = None,
    progress: Callable[[Interval], object] | None = None,
    cancel: _Cancel | None = None,
    on_connected: Callable[[], int] | None = None,
) -> DriverResult:
    """Drive TPC-C's five transactions through the engine's load harness.
    `mode`: "statements" (prepared statements, pipelined) or "procedures"
    (one `SELECT tpcc_xxx(...)` per transaction; crates/engine/src/tpcc/PROCEDURES.md).
    Client n's home warehouse is n % warehouses + 1 and its Stock-Level
    district (n // warehouses) % 10 + 1. Types come from a 23-card deck per
    client (10/10/1/1/1) or from `weights` (5 values: new_order, payment,
    order_status, delivery, stock_level). `c_last`, `c_id`, `ol_i_id` are
    the run's NURand C constants (0..255, 0..1023, 0..8191). `keying`: keying
    and think times around each transaction (clause 5.2.5), outside the
    latency. `by_type`: new_order, new_order_rollback (the 1% whose expected
    rollback counts as committed), payment, order_status, delivery,
    stock_level. Errors: 40001/40P01 retried up to `max_tries`, other SQLSTATEs
    counted by code; other arguments as tpcb_run."""

def tpcc_mysql_run(
    conninfo: str,
    *,
    warehouses: int,
    harness: _HarnessSettings,
    t0_ns: int,
    isolation: str = "read committed",
    c_last: int,
    c_id: int,
    ol_i_id: int,
    keying: bool = False,
    weights: list[float] | None = None,
    progress: Callable[[Interval], object] | None = None,
    cancel: _Cancel | None = None,
    on_connected: Callable[[], int] | None = None,
) -> DriverResult:
    """tpcc_run's transactions, draws and figures on MySQL or MariaDB through
    the engine's MySQL client (`conninfo` as MysqlWireEndpoint.wire_conninfo()
    gives it), statements mode only: prepared statements, several per round
    trip, SELECT ... FOR UPDATE where PostgreSQL's use UPDATE ... RETURNING,
    autocommit off and COMMIT sent once every answer is in. `isolation`:
    "read committed", "repeatable read" or "serializable". Errors: deadlock
    (1213) and lock wait timeout (1205) retried up to `max_tries`, other
    error codes counted by code."""

@final
class FileSetReport:
    """A SPECweb99-like file set found in the cache or generated into it."""
    root: str
    dirs: int
    files: int
    size_bytes: int
    generated: bool
    seconds: float

def fileset_dirs(*, size_bytes: int | None = None, connections: int | None = None) -> int:
    """Directories of a file set: at least `size_bytes`, or SPECweb99's rule
    int(25 + (400000/122000 x connections)/5). ConfigError: neither or both."""

def fileset_dir_bytes() -> int:
    """Bytes of one directory of the file set (4 classes x 9 files)."""

def fileset_file_size(class_: int, file: int) -> int:
    """Size in bytes of file `file` (0..8) of class `class_` (0..3)."""

def fileset_request_paths(dirs: int, seed: int, count: int) -> list[str]:
    """The first `count` request paths ("dir00003/class1_4") the driver's
    chooser draws from `seed` (class 35/50/14/1 %, Zipf directory and file)."""

def fileset_prepare(
    cache_dir: str, *, dirs: int, seed: int, jobs: int, cancel: _Cancel | None = None
) -> FileSetReport:
    """The file set of `dirs` directories from `seed` under `cache_dir`:
    reused when complete with every file of its size, else generated on `jobs`
    threads (incompressible, deterministic) and renamed into place when whole.
    EngineConnectionError/EngineError: the cache cannot be written."""

def http_run(
    address: str,
    *,
    host: str,
    harness: _HarnessSettings,
    t0_ns: int,
    dirs: int | None = None,
    request_mix: list[tuple[str, str, list[tuple[str, str]], bytes, float]] | None = None,
    prefix: str = "/",
    requests_per_connection: int | None = None,
    connect_timeout_s: float = 5.0,
    request_timeout_s: float = 30.0,
    think_time_s: float | None = None,
    only: tuple[int, int, int] | None = None,
    client: str = "own",
    progress: Callable[[Interval], object] | None = None,
    cancel: _Cancel | None = None,
    on_connected: Callable[[], int] | None = None,
) -> DriverResult:
    """`client`: "own" (perflab's client) or "hyper" (hyper 1.x, only in an
    engine built with the hyper-client feature; ConfigError otherwise).
    `io`: "epoll", "uring" or "auto", as for tpcb_run (hyper: epoll only).
    HTTP/1.1 GETs of the file set of `dirs` directories at `address`
    ("127.0.0.1:8080") through the load harness; by_type: class0..class3,
    each with its body bytes. Or, with `request_mix` instead of `dirs`, its
    requests (method, whole path, headers, body, weight) drawn by weight;
    by_type: r1, r2, ... in its order; a status below 400 is good, no size
    is checked (ConfigError names a bad entry). The events end with one
    "http-connections": "opened=N connect_ns=N responses=N
    closed_by_server=N closed_silently=N http10=N" over the whole run
    (client "own"; closed_silently: kept-alive connections the server ended
    without Connection: close). `only` = (dir, class, file) asks for one
    file every time. Errors are counted by kind (connect, timeout, 4xx, 5xx,
    short-body, long-body, bad-response, reset, closed); a refused
    connection loses the client."""

@final
class DelayRelay:
    """A TCP relay holding each chunk delay_s ± jitter_s in each direction;
    its threads live in the network namespace of the thread that made it."""

    def __new__(cls, listen: str, upstream: str, delay_s: float, jitter_s: float = 0.0, seed: int = 1) -> DelayRelay: ...
    @property
    def port(self) -> int: ...
    def stop(self) -> dict[str, float]: ...

def stream_run(
    *, protocol: str, receiver: str, address: str, flows: int, size: int, t0_ns: int, duration: float,
    warmup: float = 0.0, rate_pps: float | None = None, threads: int | None = None,
    server_netns: str | None = None, drain_s: float = 0.3, mss: int | None = None, progress: Callable[[Interval], object] | None = None,
    cancel: _Cancel | None = None,
) -> tuple[DriverResult, dict[str, object]]:
    """Senders (the caller's namespace) to a receiver in server_netns; the
    senders' DriverResult and the receiver's counts."""
