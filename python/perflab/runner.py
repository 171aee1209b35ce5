"""Executes a plan: provision, prepare, collect, run, check, store; and resume.

For each run not yet done: the target is provisioned (or reconfigured, which
restarts a server whose settings changed), the workload's data is prepared
when its data-defining settings changed, collectors sample on the run's clock,
the workload runs, the results are stored in one transaction. A failed run is
stored as failed with its error and the server log tail, and the experiment
goes on. SIGINT and SIGTERM stop the experiment; every server perflab started
is stopped on the way out, and the interrupted run is run again by `resume`.

The runner knows workloads, targets and collectors only through their
interfaces and registries; it never branches on a kind's name.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import signal
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perflab.collectors import COLLECTORS
from perflab.collectors.base import Collector, CollectorContext, CollectorUnavailable
from perflab.errors import DiskFull, Interrupted, RunFailure, UserError
from perflab.model import Event, RunResult
from perflab.plan import PlannedRun
from perflab.progress import Progress, fmt_value
from perflab.spec import Experiment, RunSpec
from perflab.store import Store
from perflab.targets import TARGETS
from perflab.targets.base import Endpoint, Target
from perflab.workloads import WORKLOADS
from perflab.workloads.base import RunContext, Workload

LOG_TAIL_LINES = 40


@contextlib.contextmanager
def interrupt_on_signals() -> Iterator[None]:
    """SIGINT and SIGTERM raise Interrupted in the main thread, so every
    `finally` (server teardown above all) runs."""

    def handler(signum: int, frame: Any) -> None:
        raise Interrupted(signal.Signals(signum).name)

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextlib.contextmanager
def signals_ignored() -> Iterator[None]:
    """While tearing down, a second Ctrl-C must not leave a server behind."""
    old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@dataclass
class ActiveTarget:
    identity: str
    target: Target
    endpoint: Endpoint


class Runner:
    def __init__(self, exp: Experiment, store: Store, plan: list[PlannedRun], progress: Progress,
                 base_dir: Path) -> None:
        self.exp = exp
        self.store = store
        self.out_dir = store.dir
        self.plan = {r.number: r for r in plan}
        self.progress = progress
        self.base_dir = base_dir
        self.active: ActiveTarget | None = None
        self._warned: set[str] = set()

    # ------------------------------------------------------------ the loop

    def run(self) -> dict[str, int]:
        self.store.lock()  # one perflab writes an experiment at a time
        todo = [r["id"] for r in self.store.runs() if r["status"] == "planned"]
        self.progress.start()
        counts = {"done": 0, "failed": 0}
        try:
            with interrupt_on_signals():
                for number in todo:
                    status = self._one(self.plan[number])
                    counts[status] += 1
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            raise DiskFull(self.out_dir, f"{exc.strerror}: {exc.filename}") from None
        finally:
            with signals_ignored():
                self._release_target()
                self.progress.close()
        return counts

    def _one(self, planned: PlannedRun) -> str:
        spec = self.exp.resolve(planned.factors)
        n = planned.number
        run_dir = self.out_dir / "runs" / f"{n:03d}"
        run_dir.mkdir(parents=True, exist_ok=True)
        self.progress.run_start(n, planned.factors, planned.repetition)
        self.store.start_run(n, time.monotonic_ns())
        started = time.monotonic()
        result = RunResult()
        error: str | None = None
        log_tail: str | None = None
        described: dict[str, Any] | None = None
        target: Target | None = None
        try:
            target, endpoint, identity = self._target_for(spec, result)
            described = target.describe()
            target.begin_run(run_dir)
            workload: Workload = WORKLOADS.get(spec.workload.kind)(spec.workload)
            ctx = RunContext(run_number=n, run_dir=run_dir, t0_ns=time.monotonic_ns(), base_dir=self.base_dir,
                             status=self.progress.status, warn=self.progress.warn)
            self._prepare(workload, endpoint, identity, ctx, result)
            result.merge(self._measure(workload, endpoint, target, spec, ctx))
            check = workload.check(endpoint, ctx)
            for name, (passed, detail) in check.checks.items():
                result.add_metric(f"check.{name}", 1.0 if passed else 0.0, "pass", detail)
            if not check.passed:
                failed = [f"{k}: {d}" for k, (ok, d) in check.checks.items() if not ok]
                raise RunFailure("consistency check failed: " + "; ".join(failed))
            status = "done"
        except Interrupted:
            self.store.interrupt_run(n)
            self.progress.say(f"[{n}/{len(self.plan)}] interrupted")
            raise
        except UserError:
            self.store.interrupt_run(n)
            raise
        except Exception as exc:  # a failed run is stored and the experiment goes on
            status = "failed"
            error = str(exc) if isinstance(exc, RunFailure) else f"{type(exc).__name__}: {exc}"
            if target is not None:
                alive = target.check_alive()
                if alive:
                    error = f"{error} ({alive})"
            log_tail = getattr(exc, "log_tail", None) or (target.log_tail(LOG_TAIL_LINES) if target else None)
            (run_dir / "error.txt").write_text(error + "\n\n" + traceback.format_exc())
        finally:
            if target is not None:
                with contextlib.suppress(Exception):
                    target.end_run(run_dir)
        self.store.finish_run(n, result, status=status, seconds=time.monotonic() - started,
                              target=described, error=error, log_tail=log_tail)
        self._figure(n, run_dir)
        headline = " ".join(
            f"{name}={fmt_value(result.metrics[name].value)}" for name in result.headline if name in result.metrics
        )
        if result.flags:
            headline += f" [{', '.join(result.flags)}]"
        if error:
            headline += f" error: {error.splitlines()[0][:200]}"
        self.progress.run_end(n, status, headline)
        return status

    # ------------------------------------------------------------ pieces

    def _target_for(self, spec: RunSpec, result: RunResult) -> tuple[Target, Endpoint, str]:
        cls = TARGETS.get(spec.target.kind)
        identity = f"{spec.target.kind}:{cls.identity(spec.target)}"
        active = self.active
        if active is not None and active.identity == identity and active.target.check_alive() is None:
            if active.target.reconfigure(spec.target):
                result.events.append(Event(0.0, "restart", "server restarted with this run's settings"))
            return active.target, active.endpoint, identity
        self._release_target()
        digest = hashlib.sha256(identity.encode()).hexdigest()[:8]
        target = cls(spec.target, self.out_dir / "targets" / f"{spec.target.kind}-{digest}")
        try:
            endpoint = target.provision()
        except BaseException:
            with signals_ignored():
                target.teardown()
            raise
        for note in getattr(target, "notes", []):
            self.progress.warn(note)
        self.active = ActiveTarget(identity, target, endpoint)
        if endpoint.fresh:
            self.store.set_dataset(identity, None, None)
        return target, endpoint, identity

    def _release_target(self) -> None:
        if self.active is not None:
            active, self.active = self.active, None
            active.target.teardown()

    def _prepare(self, workload: Workload, endpoint: Endpoint, identity: str, ctx: RunContext,
                 result: RunResult) -> None:
        key = workload.data_key()
        if self.store.dataset(identity) == key:
            result.events.append(Event(0.0, "prepare", "data set reused from an earlier run"))
            return
        self.progress.status("preparing data (load test)")
        self.store.set_dataset(identity, None, None)  # a crash mid-load leaves no claim of a data set
        load = workload.prepare(endpoint, ctx)
        for step, seconds in load.steps.items():
            result.add_metric(f"load.{step}_s", seconds, "s", f"load phase step: {step}")
        if load.steps:
            result.add_metric("load.total_s", load.total_s, "s", "load phase total", higher_is_better=False)
        for table, rows in load.rows.items():
            result.add_metric(f"load.rows.{table}", rows, "rows")
        result.events.append(Event(0.0, "prepare", f"data set prepared in {load.total_s:.2f}s"))
        self.store.set_dataset(identity, key, ctx.run_number)

    def _measure(self, workload: Workload, endpoint: Endpoint, target: Target, spec: RunSpec,
                 ctx: RunContext) -> RunResult:
        """Collectors around the workload's run, all on one clock starting now."""
        ctx.t0_ns = time.monotonic_ns()
        self.store.set_t0(ctx.run_number, ctx.t0_ns)
        writer = self.store.series_writer(ctx.run_number)
        ctx.series = writer
        cctx = CollectorContext(run=ctx, endpoint=endpoint, target=target)
        running: list[Collector] = []
        result = RunResult()
        try:
            for name, settings in spec.collect.items():
                collector = COLLECTORS.get(name)(name, settings)
                try:
                    collector.start(cctx)
                except CollectorUnavailable as exc:
                    self._skip_collector(name, str(exc), result)
                    continue
                running.append(collector)
            result.merge(workload.run(endpoint, ctx))
            for kind, t in (("measure-start", ctx.measure_start_s), ("measure-end", ctx.measure_end_s)):
                if t is not None:
                    result.events.append(Event(t, kind, "measured window (warm-up excluded)"))
        finally:
            for collector in running:
                try:
                    result.merge(collector.stop())
                except Exception as exc:  # telemetry must not lose the run
                    result.events.append(Event(ctx.now_s(), "collector-error", f"{collector.name}: {exc}"))
            writer.close()
        for collector in running:
            derive = getattr(collector, "derive", None)
            if derive is not None:
                for metric in derive(result.metrics).values():
                    result.metrics[metric.name] = metric
        return result

    def _skip_collector(self, name: str, reason: str, result: RunResult) -> None:
        result.events.append(Event(0.0, "collector-skipped", f"{name}: {reason}"))
        if name not in self._warned:
            self._warned.add(name)
            self.progress.warn(f"collector {name} skipped: {reason}")

    def _figure(self, run_id: int, run_dir: Path) -> None:
        """The run's telemetry panels, when the report module is there."""
        try:
            from perflab.report.telemetry import write_run_figure
        except ImportError:
            return
        try:
            write_run_figure(self.store, run_id, run_dir / "telemetry.png")
        except Exception as exc:  # a figure must never fail an experiment
            self.progress.warn(f"run {run_id}: telemetry figure not written: {exc}")
