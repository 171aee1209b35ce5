"""The `tpcb` workload: pgbench's TPC-B-like transactions, driven from Rust.

Data set, scripts and random draws are pgbench's (PostgreSQL 15): pgbench can
run on data loaded here and this workload on data `pgbench -i` loaded. The
load is timed step by step (drop, create, generate with COPY, vacuum, primary
keys). The run phase is the engine's load harness (`perflab._engine.tpcb_run`,
crates/engine/src/harness): async clients on `threads` runtime threads, closed
loop or, with `rate`, a Poisson (or constant) schedule with latency measured
from each transaction's intended start.

Figures follow pgbench's definitions: TPS counts committed transactions over
the measured window and excludes connection set-up ("tps ... without initial
connection time"); connection time is its own metric. The warm-up is run and
excluded from every figure.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, model_validator

from perflab import _engine
from perflab.context import RunContext
from perflab.drivers import engine_run
from perflab.endpoints import Capability, PgWireEndpoint, Sessionlike
from perflab.errors import RunFailure, UserError
from perflab.model import CheckResult, Event, Histogram, LoadResult, RunResult
from perflab.section import Section
from perflab.workloads import WORKLOADS, harness
from perflab.workloads.base import Workload, WorkloadSettings
from perflab.workloads.stalls import StallWatch

if TYPE_CHECKING:
    from perflab.store import Store

SCRIPTS = ("tpcb-like", "simple-update", "select-only")
# Rows per scale unit (pgbench.c: nbranches, ntellers, naccounts).
BRANCHES_PER_SCALE = 1
TELLERS_PER_SCALE = 10
ACCOUNTS_PER_SCALE = 100_000
# Run length when neither duration nor transactions is given.
DEFAULT_DURATION_S = 60.0
SERIES_SOURCE = "tpcb"
# Bounds past any real run, below the engine's 32-bit counts: scale 100,000 is
# 10^10 accounts (about 1.5 TB).
MAX_SCALE = 100_000
MAX_TRANSACTIONS = 10**12


class TpcbSettings(harness.HarnessSettings):
    """pgbench's options: -c clients, -j threads, -T duration, -R rate, and
    socket I/O ("auto": io_uring became tpcb's default after
    benchmarks/uring_soak.py, see benchmarks/README.md) are the harness's
    (HarnessSettings); these are pgbench's own."""

    kind: Literal["tpcb"]
    # pgbench -b: which built-in script.
    script: Literal["tpcb-like", "simple-update", "select-only"] = "tpcb-like"
    # pgbench -s and -F: the data set.
    scale: int = Field(default=1, ge=1, le=MAX_SCALE)
    # pgbench's -F: the fill factor of the tables pgbench updates (percent).
    fillfactor: int = Field(default=100, ge=10, le=100)
    # pgbench -t (transactions per client), instead of a duration; default: 60 s.
    transactions: int | None = Field(default=None, ge=1, le=MAX_TRANSACTIONS)
    # pgbench -M.
    protocol: Literal["simple", "extended", "prepared"] = "simple"
    # pgbench without -n: vacuum branches and tellers, empty history before each run.
    vacuum: bool = True

    @model_validator(mode="after")
    def _consistent(self) -> TpcbSettings:
        if self.duration is not None and self.transactions is not None:
            raise ValueError("got both duration and transactions; allowed: one of them")
        return self


@WORKLOADS.declare(
    "tpcb",
    "pgbench's TPC-B-like transactions (tpcb-like, simple-update, select-only) from a Rust driver",
)
class TpcbWorkload(Workload[PgWireEndpoint]):
    metrics = ("tps", "transactions", "failed", "latency_mean_ms", "latency_stddev_ms", "latency_p50_ms",
               "latency_p90_ms", "latency_p95_ms", "latency_p99_ms", "latency_p99_9_ms", "latency_max_ms",
               "errors.*", "scale", *harness.METRICS)
    Settings: ClassVar[type[WorkloadSettings]] = TpcbSettings
    example: ClassVar[dict[str, Any]] = {"duration": "1s"}
    sample_factor: ClassVar[str] = "clients"
    data_fields: ClassVar[tuple[str, ...]] = ("scale", "fillfactor")
    needs: ClassVar[frozenset[Capability]] = frozenset({Capability.POSTGRES_WIRE})
    headline: ClassVar[tuple[str, ...]] = ("tps", "latency_p99_ms")
    distributable: ClassVar[bool] = True

    settings: TpcbSettings

    def __init__(self, settings: TpcbSettings) -> None:
        super().__init__(settings)
        self._before: dict[str, int] | None = None
        self._scale_in_db: int | None = None
        self._loaded = False  # prepare() loaded the data for this run

    def writes(self) -> bool:
        # prepare() creates and loads the tables, so even select-only writes.
        return True

    # ------------------------------------------------------------ load

    def prepare(self, endpoint: PgWireEndpoint, ctx: RunContext) -> LoadResult:
        s = self.settings
        if endpoint.read_only:
            raise UserError(
                "workload tpcb: the target is read-only and the pgbench tables must be created and loaded",
                "set target.allow_destructive = true to let perflab load them",
            )
        with harness.engine_errors("tpcb", failed="tpcb load failed"):
            report = _engine.tpcb_load(
                endpoint.wire_conninfo("perflab-tpcb"),
                scale=s.scale,
                fillfactor=s.fillfactor,
                on_step=lambda step: ctx.status(f"load scale {s.scale}: {step.replace('_', ' ')}"),
                cancel=ctx.cancel,
            )
        self._loaded = True
        return LoadResult(steps=dict(report.steps), rows=dict(report.rows))

    # ------------------------------------------------------------ run

    def _before_run(self, endpoint: PgWireEndpoint, result: RunResult, ctx: RunContext) -> int:
        """pgbench's pre-run housekeeping, the scale found in the tables, and
        the balance sums the consistency check compares against."""
        s = self.settings
        try:
            with endpoint.connect() as conn:
                try:
                    row = conn.execute("SELECT count(*) FROM pgbench_branches").fetchone()
                except Exception as exc:
                    raise RunFailure(
                        f"tpcb: the pgbench tables are not there ({str(exc).strip()}); "
                        "load them (perflab prepares them, or run pgbench -i)"
                    ) from None
                scale = int(row[0]) if row else 0
                if scale < 1:
                    raise RunFailure("tpcb: pgbench_branches is empty; load the data set again")
                if scale != s.scale:
                    # pgbench does the same: the tables decide the key ranges.
                    result.events.append(
                        Event(ctx.now_s(), "scale",
                              f"workload.scale = {s.scale} but the tables hold scale {scale}; using {scale}")
                    )
                found = int(conn.execute("SELECT count(*) FROM pgbench_history").fetchone()[0])
                emptied = bool(s.vacuum and not endpoint.read_only)
                if emptied:
                    ctx.status("vacuum pgbench_branches, pgbench_tellers; truncate pgbench_history")
                    conn.execute("VACUUM pgbench_branches")
                    conn.execute("VACUUM pgbench_tellers")
                    conn.execute("TRUNCATE pgbench_history")
                self._before = self._balances(conn)
                if s.script != "select-only":
                    self._record_history(ctx, result, found, emptied)
        except RunFailure:
            raise
        except Exception as exc:
            raise RunFailure(f"tpcb: cannot prepare the run on {endpoint.display()}: {str(exc).strip()}") from None
        self._scale_in_db = scale
        return scale

    def _record_history(self, ctx: RunContext, result: RunResult, found: int, emptied: bool) -> None:
        """History only grows (each transaction appends a row; vacuum, as
        pgbench does without -n, empties it before a run): what this run found
        there is recorded before it writes (effect "tpcb.history"). A run run
        again after an attempt that did not finish records and says how many
        rows that attempt committed: they stay, or this run's vacuum emptied
        them, and their balance changes stay either way (each transaction is
        atomic, so the balances still equal the history's deltas)."""
        rows_before = self._before["history_rows"] if self._before is not None else found
        record: dict[str, Any] = {"rows_found": found, "rows_before": rows_before, "emptied": emptied}
        earlier = [e for e in ctx.earlier_effects if e["kind"] == "tpcb.history"]
        if earlier:
            before, attempt = earlier[-1]["data"], earlier[-1]["attempt"]
            left = found - int(before["rows_before"])
            if self._loaded:
                said = f"attempt {attempt}'s history rows are gone: the data was loaded again for this run"
            elif left < 0:
                said = (f"attempt {attempt}'s history rows are gone: pgbench_history holds {found} rows, fewer than "
                        f"the {before['rows_before']} that attempt started from (the data was changed since)")
            else:
                record["earlier_attempt"] = {"attempt": attempt, "history_rows": left}
                fate = ("this run's vacuum emptied pgbench_history, as pgbench does before a run" if emptied
                        else "they stay in pgbench_history (it only grows)")
                said = (f"attempt {attempt} committed {left} transactions (history rows) before it ended: {fate}; "
                        "their balance changes stay (each transaction is atomic, so balances still equal the "
                        "history's deltas)")
            result.events.append(Event(ctx.now_s(), "earlier-attempt", said))
            ctx.warn(f"run {ctx.run_number}: {said}")
        ctx.record_effect("tpcb.history", record)

    @staticmethod
    def _balances(conn: Sessionlike) -> dict[str, int]:
        row = conn.execute(
            "SELECT (SELECT coalesce(sum(abalance), 0) FROM pgbench_accounts),"
            " (SELECT coalesce(sum(tbalance), 0) FROM pgbench_tellers),"
            " (SELECT coalesce(sum(bbalance), 0) FROM pgbench_branches),"
            " (SELECT coalesce(sum(delta), 0) FROM pgbench_history),"
            " (SELECT count(*) FROM pgbench_history)"
        ).fetchone()
        return dict(zip(("accounts", "tellers", "branches", "history", "history_rows"), map(int, row), strict=True))

    def run(self, endpoint: PgWireEndpoint, ctx: RunContext) -> RunResult:
        s = self.settings
        if endpoint.read_only and s.script != "select-only":
            raise UserError(
                f"workload tpcb: script {s.script!r} writes and the target is read-only",
                "use script = \"select-only\", or set target.allow_destructive = true",
            )
        result = RunResult(headline=list(self.headline))
        scale = self._before_run(endpoint, result, ctx)
        threads = s.effective_threads()
        seed = s.seed if s.seed is not None else secrets.randbits(63)
        duration = s.duration
        if duration is None and s.transactions is None:
            duration = DEFAULT_DURATION_S

        stalls = StallWatch(closed_loop=s.rate is None)

        def progress(interval: _engine.Interval) -> None:
            phase = "warm-up" if interval.warmup else "progress"
            line = (
                f"{phase}: {interval.t_s:.1f} s, {interval.tps:.1f} tps, "
                f"lat {interval.latency_mean_ms:.3f} ms p99 {interval.latency_p99_ms:.3f} ms, "
                f"{interval.failed} failed"
            )
            if s.rate is not None:
                line += f", lag {interval.lag_mean_ms:.3f} ms, {interval.skipped} skipped"
            ctx.status(line)
            stalls.add(interval)
            harness.store_second(ctx, SERIES_SOURCE, interval, scheduled=s.rate is not None)

        ctx.status(f"tpcb {s.script}: connecting {s.clients} clients on {threads} threads")
        with harness.engine_errors("tpcb"):
            out = engine_run(
                ctx, _engine.tpcb_run, endpoint.wire_conninfo("perflab-tpcb"),
                script=s.script,
                scale=scale,
                protocol=s.protocol,
                harness=s.engine_settings(threads=threads, duration=duration, transactions=s.transactions, seed=seed),
                t0_ns=ctx.t0_ns,
                progress=progress,
            )
        window = harness.take_run(ctx, result, out, clients=s.clients, seed=seed, steady_max_s=s.steady_max, window_from=s.window,
                                  lost=f"tpcb: all {s.clients} client connections were lost (server down?)")
        self._metrics(out, window, result, scale)
        stalls.annotate(result)
        return result

    def _metrics(self, out: _engine.DriverResult, window: harness.Window, result: RunResult, scale: int) -> None:
        s = self.settings
        add = result.add_metric
        add("tps", window.rate, "tx/s",
            f"committed transactions per second {harness.OVER_WINDOW}, excluding connection set-up "
            "(pgbench: tps without initial connection time)", higher_is_better=True)
        add("transactions", window.transactions, "tx", f"committed transactions {harness.OVER_WINDOW}")
        add("failed", window.failed, "tx", f"transactions ended by an error (after retries) {harness.OVER_WINDOW}",
            higher_is_better=False)
        harness.latency_metrics(result, out.latency, what="transaction latency", base=s.latency_origin(),
                                labels=("mean", "stddev", "p50", "p90", "p95", "p99", "p99_9", "max"))
        for state, n in out.errors_by_kind.items():
            add(f"errors.{state}", n, "tx", f"transactions failed with SQLSTATE {state}", higher_is_better=False)
        add("scale", scale, "scale")
        result.histograms.append(Histogram(f"latency.{s.script}", "us", out.histogram_encoding,
                                           bytes(out.latency_histogram)))
        # the harness's own figures, and its lag and failed-latency histograms after the workload's
        harness.harness_metrics(result, out, scheduled=s.rate is not None, latency_limit_s=s.latency_limit,
                                rate=s.rate)

    # ------------------------------------------------------------ report

    @classmethod
    def report_sections(cls, store: Store, runs: list[dict[str, Any]]) -> list[Section]:
        """TPS and latency per factor level over the repetitions (one row per
        level), TPS against transactions per client with a line per client
        count wherever `transactions` is a factor (as CITI drew it), then each
        run's figures in their own section. From the store only."""
        from perflab.analysis import pivot
        from perflab.section import Section, Table, Text

        if not runs:
            return []
        values = {r["id"]: {m["name"]: m["value"] for m in store.metrics(r["id"])} for r in runs}

        def metric(name: str) -> Any:
            return lambda run: values.get(run["id"], {}).get(name)

        sections = []
        done = pivot.done(runs)
        if done:
            headers, rows = pivot.per_level(done, [("tps", metric("tps")), ("p50 ms", metric("latency_p50_ms")),
                                                   ("p99 ms", metric("latency_p99_ms"))])
            blocks: list[Any] = [
                Text("TPS counts committed transactions over the measured window and excludes connection "
                     "set-up, as pgbench's \"tps (without initial connection time)\"; connection time is its own "
                     "metric. Latency runs from send in closed loop, and from each transaction's intended start "
                     "when a rate is set, so a stalled server shows as latency. The warm-up is excluded. "
                     + pivot.INTERVAL_NOTE.format(center="mean")),
                Table(headers, rows, "TPC-B-like: TPS and latency per factor level (mean over repetitions)"),
            ]
            varied = pivot.varied(done)
            if len(varied) == 2:
                # two factors: the first's levels down, the second's across, as CITI's 4-way placement
                # table (database local or network x WAL local or network)
                headers2, rows2 = pivot.pivot(done, metric("tps"), [varied[0]], [varied[1]])
                parts = [f.split(".") for f in varied]
                common = next((i for i, (x, y) in enumerate(zip(*parts, strict=False)) if x != y), 0)
                rows_name, cols_name = (".".join(p[min(common, len(p) - 1):]) for p in parts)
                blocks.append(Table(headers2, rows2, f"TPS by {rows_name} (rows) and {cols_name} (columns)"))
            tx = next((f for f in varied if f.endswith(".transactions")), None)
            if tx is not None:
                clients = next((f for f in varied if f.endswith(".clients")), None)
                blocks.append(_transactions_figure(done, metric("tps"), tx, clients,
                                                   [f for f in varied if f not in (tx, clients)]))
            sections.append(Section("TPC-B: TPS per level", blocks, headline=True))
        columns = (("tps", "tps"), ("latency_p50_ms", "p50 ms"), ("latency_p99_ms", "p99 ms"),
                   ("latency_max_ms", "max ms"), ("failed", "failed"), ("lost_connections", "lost"),
                   ("connect_time_mean_ms", "connect ms"), ("driver_cpu_per_tx_us", "driver CPU us/tx"))
        headers, run_rows = pivot.run_rows(runs, values, columns)
        sections.append(Section("TPC-B runs", [
            Table(headers, run_rows, "TPC-B-like runs (pgbench's built-in scripts), one row per run"),
        ]))
        return sections

    # ------------------------------------------------------------ check

    def check(self, endpoint: PgWireEndpoint, ctx: RunContext) -> CheckResult:
        """TPC-B's consistency condition for this run, and the row counts.

        Over the run, every account, teller and branch balance changes by the
        same total, which equals the sum of the deltas the run wrote to history
        (TPC-B 2.1: consistency conditions 1 and 2, restated for sums). simple-update
        touches accounts and history only, select-only nothing.
        """
        out = CheckResult()
        if self._before is None or self._scale_in_db is None:
            return out
        scale = self._scale_in_db
        with endpoint.connect() as conn:
            after = self._balances(conn)
            counts = conn.execute(
                "SELECT (SELECT count(*) FROM pgbench_branches), (SELECT count(*) FROM pgbench_tellers),"
                " (SELECT count(*) FROM pgbench_accounts)"
            ).fetchone()
        change = {k: after[k] - self._before[k] for k in after}
        script = self.settings.script
        tables = {"tpcb-like": ("accounts", "tellers", "branches"), "simple-update": ("accounts",),
                  "select-only": ("accounts", "tellers", "branches")}[script]
        detail = ", ".join(f"{t} {change[t]:+d}" for t in tables) + f", history deltas {change['history']:+d}"
        out.add("balances", all(change[t] == change["history"] for t in tables), detail)
        expected = (BRANCHES_PER_SCALE * scale, TELLERS_PER_SCALE * scale, ACCOUNTS_PER_SCALE * scale)
        got = tuple(int(v) for v in counts)
        out.add("row_counts", got == expected,
                f"branches/tellers/accounts {got[0]}/{got[1]}/{got[2]}, expected "
                f"{expected[0]}/{expected[1]}/{expected[2]}")
        if script == "select-only":
            out.add("history_unchanged", change["history_rows"] == 0, f"{change['history_rows']} rows added")
        return out


def _transactions_figure(runs: list[dict[str, Any]], tps: Callable[[dict[str, Any]], float | None], tx: str, clients: str | None,
                         others: list[str]) -> Any:
    """TPS against transactions per client, a line per client count (CITI's
    figure): the mean over repetitions with every repetition as a point; a
    small multiple per combination of the other factors, on shared axes."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure as MplFigure

    from perflab.analysis import pivot
    from perflab.section import Figure

    panels = pivot.group(runs, others)
    cols = min(4, len(panels))
    nrows = (len(panels) + cols - 1) // cols
    fig = MplFigure(figsize=(3.2 * cols + 1.6, 2.6 * nrows + 0.4), layout="constrained")
    axes = fig.subplots(nrows, cols, sharex=True, sharey=True, squeeze=False)
    handles: dict[str, Any] = {}
    counts = [float(v) for v in pivot.levels(runs, tx) if isinstance(v, (int, float))]
    log_x = bool(counts) and max(counts) / min(counts) > 10
    for i, (values, panel_runs) in enumerate(panels):
        ax = axes[i // cols][i % cols]
        for key, line_runs in pivot.group(panel_runs, [clients] if clients else []):
            label = f"{pivot.level_text(key[0])} client(s)" if clients else "TPS"
            xs, ys, px, py = [], [], [], []
            for (n_tx,), point_runs in pivot.group(line_runs, [tx]):
                got = [v for v in (tps(r) for r in point_runs) if v is not None]
                if got and isinstance(n_tx, (int, float)):
                    xs.append(float(n_tx))
                    ys.append(pivot.center_of(got))
                    px += [float(n_tx)] * len(got)
                    py += got
            (line,) = ax.plot(xs, ys, marker="o", markersize=3, label=label)
            ax.scatter(px, py, s=6, color=line.get_color(), alpha=0.5)
            handles.setdefault(label, line)
        if log_x:
            ax.set_xscale("log")
        ax.set_title(pivot.combo_label(others, values) if others else "", fontsize=7)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for j in range(len(panels), nrows * cols):
        axes[j // cols][j % cols].set_visible(False)
    fig.supxlabel("transactions per client" + (" (log)" if log_x else ""), fontsize=8)
    fig.supylabel("TPS", fontsize=8)
    fig.legend(list(handles.values()), list(handles), loc="outside right upper", fontsize=7)
    return Figure("tpcb-tps-by-transactions", fig,
                  "TPS against transactions per client, a line per client count (the mean over repetitions; "
                  "points: each repetition)" + ("; a panel per " + ", ".join(pivot.short_name(f) for f in others)
                                                if others else ""))
