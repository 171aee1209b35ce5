"""Executes a plan: provision, prepare, collect, run, check, store; and resume.

`start` makes a new experiment's store and plan, `resume` reopens one (runs
left in flight are planned again; with `retry_failed`, failed runs too, as new
attempts that keep the old ones' records); `execute` runs what is planned.
Every path is made absolute here, at entry: the server perflab starts does not
share the user's working directory.

For each run not yet done: the target is provisioned (or reconfigured, which
restarts a server whose settings changed), the workload's data is prepared
when its data-defining settings changed, collectors sample on the run's clock,
the workload runs, the results are stored in one transaction. A failed run is
stored as failed with its error and the server log tail, and the experiment
goes on. SIGINT and SIGTERM stop the experiment; every server perflab started
is stopped on the way out, and the interrupted run is run again by `resume`.

A workload that writes to a database perflab did not create works only in
a schema of perflab's own there (Target.confine), recorded in the store as
it is made; what is left is measured when the target is released and said
at the end, with the `perflab clean` that removes it.

The runner knows workloads, targets and collectors only through their
interfaces and registries; it never branches on a kind's name.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import hashlib
import json
import shutil
import threading
import time
import traceback
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from perflab import plan as plan_mod
from perflab import spec as spec_mod
from perflab.collectors import COLLECTORS
from perflab.collectors.base import Collector, CollectorContext, CollectorUnavailable
from perflab.collectors.hostnoise import HostNoise
from perflab.context import RunContext
from perflab.cost import Laps
from perflab.drivernet import DriverLink
from perflab.drivers.choose import Drivers
from perflab.endpoints import Endpoint
from perflab.errors import DiskFull, Interrupted, RunFailure, UserError
from perflab.guardian import journal
from perflab.hostctl.cgroups import oom_cause
from perflab.hostrun import HostChanges, memory_bound, resource_metrics
from perflab.interrupts import interrupt_on_signals, signals_ignored
from perflab.model import Event, Flag, RunResult, without_label
from perflab.plan import PlannedRun
from perflab.progress import Progress, fmt_value
from perflab.secrets import MASK, mask_secrets
from perflab.spec import Experiment, RunSpec
from perflab.store import Store
from perflab.targets import TARGETS
from perflab.targets.base import LOG_SLICES, Target, TargetSettings
from perflab.targets.confine import Owner, format_bytes, schema_for
from perflab.targets.serverlog import server_cause
from perflab.workloads import WORKLOADS
from perflab.workloads.base import Workload

LOG_TAIL_LINES = 40


# ------------------------------------------------------------------ sessions


@dataclass
class Session:
    """An experiment ready to execute: its store, file, plan, and what a
    resume found (runs in flight, failed runs retried or left)."""

    store: Store
    exp: Experiment
    plan: list[PlannedRun]
    base_dir: Path  # relative paths in the experiment file are taken from here
    recovered: list[int] = field(default_factory=list)
    retried: list[int] = field(default_factory=list)
    # The output directory held only a plan (nothing measured) and was
    # planned again from the experiment file as it is now.
    replanned: bool = False
    command: str = "run"  # recorded in the store's session table, with `note`
    note: str | None = None

    def count(self, *statuses: str) -> int:
        return sum(1 for r in self.store.runs() if r["status"] in statuses)


@dataclass
class Outcome:
    done: int  # in this session
    failed: int  # in this session
    failed_total: int  # in the store, this session or earlier


def default_out(name: str) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("results") / f"{name}-{stamp}"


def start(experiment_path: Path, out: Path | None) -> Session:
    """A new experiment: validate the file, reach its external targets,
    expand the plan, create the store (nothing is created before: a wrong
    password leaves no output directory). An output directory that holds
    only a plan, with nothing measured, is planned again."""
    from perflab.host import host_facts

    experiment_path = Path(experiment_path).resolve()
    exp = spec_mod.load(experiment_path)
    spec_mod.preflight(exp, experiment_path.parent, connect=True)
    out = Path(out or default_out(exp.name)).resolve()
    seed = plan_mod.choose_seed(exp)
    runs = plan_mod.expand(exp, seed)
    store = Store.create(
        out, name=exp.name, spec_text=mask_secrets(exp.text), spec_path=str(experiment_path),
        seed=seed, factors=list(exp.factors), host=host_facts(),
    )
    store.add_plan(runs)
    if store.replanned is None:
        return Session(store, exp, runs, experiment_path.parent)
    return Session(store, exp, runs, experiment_path.parent, replanned=True,
                   note=_replanned_note(store, store.replanned))


def resume(out_dir: Path, retry_failed: bool = False) -> Session:
    """Reopen an experiment to run what is left: the runs an interrupted
    perflab left in flight, and with `retry_failed` the failed ones, as new
    attempts (the failed attempt's record stays in the store's attempt table,
    its files in runs/NNN/attempt-K/).

    When nothing was measured yet and the experiment file has changed since
    (a wrong password fixed, say), the experiment is planned again from the
    file as it is now."""
    store = Store.open(Path(out_dir).resolve())
    info = store.experiment()
    text = info["spec_text"]
    spec_path = Path(info["spec_path"]) if info["spec_path"] else None
    try:
        original = spec_path.read_text() if spec_path and spec_path.is_file() else None
    except (OSError, UnicodeDecodeError):
        original = None
    if original is not None and spec_path is not None and mask_secrets(original) != text:
        store.lock()  # the writer's question: no other perflab runs this experiment
        if store.holds_only_a_plan():
            return _replan(store, spec_path, original)
    if MASK in text:
        # The store never holds a password: take it from the original file,
        # if that file is still the experiment that was run.
        if original is None or mask_secrets(original) != text:
            why = "is gone" if original is None else "has changed, and runs were measured with the stored experiment"
            raise UserError(
                "the stored experiment had a password, which perflab does not store, and the original file "
                f"({spec_path}) {why}",
                "restore the original experiment file, or put the password in PGPASSWORD or ~/.pgpass",
            )
        text = original
    exp = spec_mod.load_text(text, spec_path, stored=True)
    stored = {r["id"]: r for r in store.runs()}
    blocks = max((r["repetition"] for r in stored.values()), default=0)
    # blocks added after a precision pilot: the same seeded plan, longer (the session keeps the pilot's file)
    extended = exp.meta.precision is not None and blocks > exp.meta.repetitions
    runs = plan_mod.expand(plan_mod.with_blocks(exp, blocks) if extended else exp, info["seed"])
    if exp.search is not None:  # a search plans its probes as it goes: its plan is what is stored
        runs = plan_mod.stored_plan(store)
    def setting(factors: dict[str, Any]) -> dict[str, Any]:  # what a level sets: a store older than labels has none
        return {k: without_label(v) for k, v in factors.items()}

    def differs(runs: list[plan_mod.PlannedRun]) -> bool:
        return len(stored) != len(runs) or any(setting(stored[r.number]["factors"]) != setting(r.factors)
                                               for r in runs if r.number in stored)

    if differs(runs) and (older := plan_mod.before_blocks(exp, info["seed"])) is not None and not differs(older):
        runs = older  # planned before blocks were the default: its runs in sequence
    if differs(runs):
        raise UserError(f"{store.dir}: the stored plan does not match its experiment", "start a new `perflab run`")
    store.lock()  # before touching a run's files: no other perflab runs this experiment
    in_flight = {r["id"]: r["attempts"] for r in store.in_flight()}
    last_seen = {run_id: _last_sign_of_life(store, run_id) for run_id in in_flight}
    killed_files = {run_id: _keep_attempt_files(store.dir, run_id, attempt) for run_id, attempt in in_flight.items()}
    recovered = store.recover(killed_files, last_seen)
    retried = []
    if retry_failed:
        kept = {run_id: _keep_attempt_files(store.dir, run_id, attempt) for run_id, attempt in store.failed_runs()}
        retried = store.retry_failed(kept)
    base_dir = spec_path.parent if spec_path and spec_path.parent.is_dir() else Path.cwd()
    notes = []
    if recovered:
        notes.append(f"run {', '.join(map(str, recovered))} was in flight when the previous perflab died: "
                     "its attempt is kept as killed, the run is run again")
    if retried:
        notes.append(f"failed run {', '.join(map(str, retried))} run again as new attempts")
    notes.append(f"{sum(1 for r in store.runs() if r['status'] == 'planned')} runs to go")
    return Session(store, exp, runs, base_dir.resolve(), recovered, retried,
                   command="resume --retry-failed" if retry_failed else "resume", note="; ".join(notes))


def _last_sign_of_life(store: Store, run_id: int) -> str | None:
    """When a killed attempt was last seen alive, UTC ISO 8601: the newest of
    its files (a collector's output, a log), of its last sample (the series
    are on CLOCK_MONOTONIC, which counts from boot: only when the machine has
    not restarted since) and of what it recorded; None when it left nothing."""
    run_dir = store.dir / "runs" / f"{run_id:03d}"
    times = [p.stat().st_mtime for p in run_dir.rglob("*")
             if p.is_file() and not p.relative_to(run_dir).parts[0].startswith("attempt-")] if run_dir.is_dir() else []
    row = store.conn.execute("SELECT r.t0_monotonic_ns, max(s.t), r.started_at FROM run r "
                             "JOIN series s ON s.run_id = r.id WHERE r.id = ?", (run_id,)).fetchone()
    if row is not None and None not in (row[0], row[1], row[2]):
        sample_ns = row[0] + int(row[1] * 1e9)
        wall = time.time() - (time.monotonic_ns() - sample_ns) / 1e9
        # a sample "before" the attempt started, or in the future, is from another boot
        if sample_ns <= time.monotonic_ns() and wall >= datetime.fromisoformat(row[2]).timestamp():
            times.append(wall)
    attempt = next((r["attempts"] for r in store.runs() if r["id"] == run_id), None)
    times += [datetime.fromisoformat(e["at"]).timestamp() for e in store.effects(run_id) if e["attempt"] == attempt]
    if not times:
        return None
    return datetime.fromtimestamp(max(times), timezone.utc).isoformat(timespec="milliseconds")


def _replan(store: Store, spec_path: Path, text: str) -> Session:
    """`resume` of a store where nothing was measured, whose experiment file
    changed: the file as it is now, checked as `run` checks it, planned anew."""
    from perflab.host import host_facts

    exp = spec_mod.load_text(text, spec_path)
    spec_mod.preflight(exp, spec_path.parent, connect=True)
    seed = plan_mod.choose_seed(exp)
    runs = plan_mod.expand(exp, seed)
    replaced = store.replan(name=exp.name, spec_text=mask_secrets(text), spec_path=str(spec_path), seed=seed,
                            factors=list(exp.factors), host=host_facts())
    store.add_plan(runs)
    return Session(store, exp, runs, spec_path.parent.resolve(), replanned=True, command="resume",
                   note=_replanned_note(store, f"the experiment file changed; {replaced}"))


def _replanned_note(store: Store, replaced: str) -> str:
    """What planning a store again did, for its session's note. The replaced
    plan's per-run files (an interrupted attempt's server log) are moved to
    runs-replaced-STAMP/, so that no run of the new plan writes over them."""
    runs = store.dir / "runs"
    if runs.is_dir() and any(p.is_file() for p in runs.rglob("*")):
        aside = store.dir / f"runs-replaced-{datetime.now(timezone.utc):%Y%m%dT%H%M%S%f}"
        runs.rename(aside)
        replaced += f"; its run files are in {aside.name}/"
    return replaced


def _keep_attempt_files(out_dir: Path, run_id: int, attempt: int) -> str | None:
    """Move a failed attempt's per-run files to runs/NNN/attempt-K/, so the
    new attempt's do not overwrite them."""
    run_dir = out_dir / "runs" / f"{run_id:03d}"
    files = [p for p in run_dir.iterdir() if not p.name.startswith("attempt-")] if run_dir.is_dir() else []
    if not files:
        return None
    dest = run_dir / f"attempt-{attempt}"
    dest.mkdir(exist_ok=True)
    for p in files:
        shutil.move(str(p), dest / p.name)
    _copy_log_slices(dest)
    return str(dest.relative_to(out_dir))


def _copy_log_slices(dest: Path) -> None:
    """An attempt that never ended (killed) left the target's note of where
    its part of a shared log starts (Target.begin_run: LOG_SLICES, name ->
    {path, offset}) and not the part itself: it is copied now, from there to
    the log's end (what the server wrote until it was stopped)."""
    note = dest / LOG_SLICES
    if not note.is_file():
        return
    try:
        slices = json.loads(note.read_text())
    except (OSError, ValueError):
        return
    for name, where in slices.items():
        target = dest / Path(name).name
        src = Path(where.get("path", ""))
        if target.exists() or not src.is_file():
            continue
        with contextlib.suppress(OSError), src.open("rb") as f, target.open("wb") as out:
            f.seek(min(int(where.get("offset", 0)), f.seek(0, 2)))
            shutil.copyfileobj(f, out)
    note.unlink()


def execute(session: Session, progress: Progress) -> Outcome:
    """Run every planned run; Interrupted propagates (every server stopped)."""
    runner = Runner(session.exp, session.store, session.plan, progress, session.base_dir)
    runner.session_command, runner.session_note = session.command, session.note
    counts = runner.run()
    return Outcome(counts["done"], counts["failed"], session.count("failed"))


def _server_dirs(described: dict[str, Any] | None, target: Target | None) -> list[Path]:
    """Where the server writes: the directories its description names
    (data_dir, wal_dir, ...), then the data perflab made for it."""
    dirs = [Path(v) for k, v in (described or {}).items() if k.endswith("_dir") and isinstance(v, str) and v]
    with contextlib.suppress(Exception):
        dirs += target.data_locations() if target else []
    return [d for d in dirs if d.is_dir()]


@dataclass
class ActiveTarget:
    identity: str
    target: Target
    endpoint: Endpoint


def _condition_flags(described: dict[str, Any]) -> list[Flag]:
    """Marks of conditions a reader must see beside the figures. (A memory
    limit is flagged only when it bound: `_measure`, hostrun.memory_bound.)"""
    flags = []
    if any(fs.get("loop_backed") for fs in (described.get("scratch_fs") or {}).values()):
        flags.append(Flag.LOOP_BACKED)
    return flags


# Factors that make huge pages part of the question: the Results table then
# shows the server's huge pages (server.hugepages_mapped, else the host's
# host.hugepages_in_use) beside the workload's figures.
HUGEPAGE_FACTORS = ("host.hugepages", "host.sysctl.vm.nr_hugepages", "target.settings.huge_pages")


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
        self._torn_down_usage: dict[int, dict[str, float]] = {}  # a target that failed to start: its cgroup's last counters
        self.owner: Owner | None = None  # the experiment, as perflab's schemas elsewhere name it
        self._warned: set[str] = set()
        self.host = HostChanges(progress.say, progress.warn)
        self.link = DriverLink(progress.say)  # driver.network's namespace, made when a run needs it
        self.drivers = Drivers(progress.say)  # [driver]: one open per experiment (a Ray cluster starts once)
        # Set by SIGINT/SIGTERM (see interrupt_on_signals); every run's cancel.
        self._stop = threading.Event()
        self.session_command = "run"  # the store's session row: what started this perflab
        self.session_note: str | None = None

    # ------------------------------------------------------------ the loop

    def run(self) -> dict[str, int]:
        self.store.lock()  # one perflab writes an experiment at a time
        session_id = self.store.begin_session(self.session_command, self.session_note)
        ended = "failed: perflab stopped on an error"
        # host changes are journaled in the output directory too; the journal names this store and its id
        journal().bind(self.out_dir, self.store.path, self.store.experiment_id())
        todo = [r["id"] for r in self.store.runs() if r["status"] == "planned"]
        self.progress.start()
        counts = {"done": 0, "failed": 0}
        finished = False
        try:
            with interrupt_on_signals() as self._stop:
                if any(self.exp.resolve(self.plan[n].factors).driver.network.namespace for n in todo):
                    self.link.make()  # before any server starts: it listens on the link too
                for number in plan_mod.planned(self.exp, self.store, self.plan, todo, self.progress):
                    if self._stop.is_set():
                        raise Interrupted("stop requested")
                    status = self._one(self.plan[number])
                    counts[status] += 1
                if self._stop.is_set():
                    raise Interrupted("stop requested")
            finished = True
            ended = f"finished ({counts['done']} done, {counts['failed']} failed)"
        except Interrupted as exc:
            ended = f"interrupted ({exc})"
            raise
        except UserError as exc:
            ended = f"failed: {str(exc).splitlines()[0]}"
            raise
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            ended = "failed: disk full"
            raise DiskFull(self.out_dir, f"{exc.strerror}: {exc.filename}") from None
        finally:
            with signals_ignored():
                self._release_target()
                self.drivers.close()
                try:
                    self.host.restore_all()  # after the server stopped: it may hold huge pages
                except Exception as exc:  # the guardian undoes the rest at exit
                    self.progress.warn(f"host settings not all restored here: {exc}")
                try:
                    self.link.remove()
                except Exception as exc:
                    self.progress.warn(f"the driver's namespace not removed here: {exc}")
                # An interrupted experiment keeps its data, so resume reuses it.
                if finished and not any(r["status"] == "planned" for r in self.store.runs()):
                    self._discard_data()
                journal().bind(None)
                with contextlib.suppress(Exception):
                    self._say_leftovers()
                self.progress.close()
                with contextlib.suppress(Exception):  # a full disk must not hide the first error
                    self.store.end_session(session_id, ended)
        return counts

    def _one(self, planned: PlannedRun) -> str:
        spec = self.exp.resolve(planned.factors)
        n = planned.number
        run_dir = self.out_dir / "runs" / f"{n:03d}"
        run_dir.mkdir(parents=True, exist_ok=True)
        earlier = next(r["attempts"] for r in self.store.runs() if r["id"] == n)
        if earlier:
            # An earlier attempt's files (an interrupted one's server log, say)
            # go to runs/NNN/attempt-K/ before this attempt writes its own, and
            # so do the samples it stored (start_run removes them from the store).
            kept = _keep_attempt_files(self.out_dir, n, earlier)
            dest = run_dir / f"attempt-{earlier}"
            for name, rows in (("series.csv", self.store.series(n)), ("queries.csv", self.store.queries(n)),
                               ("metrics.csv", self.store.metrics(n))):
                if rows and not (dest / name).exists():
                    dest.mkdir(exist_ok=True)
                    with (dest / name).open("w", newline="") as f:
                        out = csv.DictWriter(f, [k for k in rows[0] if k != "run_id"], extrasaction="ignore")
                        out.writeheader()
                        out.writerows(rows)
                    kept = str(dest.relative_to(self.out_dir))
            if kept:
                self.store.set_attempt_files(n, earlier, kept)
        self.progress.run_start(n, planned.factors, planned.repetition)
        self.store.start_run(n, time.monotonic_ns())
        started = time.monotonic()
        result = RunResult()
        error: str | None = None
        log_tail: str | None = None
        described: dict[str, Any] | None = None
        target: Target | None = None
        usage_before: dict[str, float] = {}
        laps = Laps(started)
        try:
            if self.active is not None and self.host.needs_restart(spec.host):
                self._release_target()  # a knob the server takes at its start changes
            target, identity = self._target_object(spec, result)
            usage_before = target.resource_usage()  # a reused server's cgroup counts from here (oom_cause)
            self.host.apply(spec.host, target)
            self.host.pin_driver(spec.driver.cpus, spec.target.server_cpus())
            try:
                endpoint = self._bring_up(target, identity, spec, result)
            finally:
                self.host.drain_events(result)
            described = target.describe()
            result.flags += [f for f in _condition_flags(described) if f not in result.flags]
            target.begin_run(run_dir)
            workload: Workload = WORKLOADS.get(spec.workload.kind)(spec.workload)
            if workload.writes():
                endpoint = self._confine(target, identity, endpoint, spec.workload.kind, result)
            laps.lap("setup")
            ctx = RunContext(run_number=n, run_dir=run_dir, t0_ns=time.monotonic_ns(), base_dir=self.base_dir,
                             cancel=self._stop, status=self.progress.status, warn=self.progress.warn,
                             note=self.progress.say,
                             second=lambda iv: self.progress.second(iv, workload.series_labels.get("tps", "tps")),
                             driver=self.drivers.get(spec.driver), earlier_effects=self.store.effects(n),
                             record_effect=lambda kind, data: self.store.add_effect(n, kind, data))
            self._prepare(workload, endpoint, identity, ctx, result)
            laps.lap("prepare")
            self.host.before_measure(spec.host, result)
            self.host.metrics(spec.host, result, target.processes)
            try:
                result.merge(self._measure(workload, endpoint, target, spec, ctx))
            finally:
                result.merge(self.drivers.driver.figures())
            laps.lap("measure")
            if any(f.startswith(HUGEPAGE_FACTORS) for f in self.exp.factors):
                # the server's own count where it can be read; the host's counts any process's pages
                shown = next((m for m in ("server.hugepages_mapped", "host.hugepages_in_use") if m in result.metrics),
                             None)
                if shown is not None:
                    result.headline.append(shown)
            if self._stop.is_set():
                # A workload that saw its cancel ended early: the run is not done.
                raise Interrupted("stop requested")
            check = workload.check(endpoint, ctx)
            laps.lap("check")
            for name, (passed, detail) in check.checks.items():
                result.add_metric(f"check.{name}", 1.0 if passed else 0.0, "bool", detail)  # 1: passed
            if not check.passed:
                failed = [f"{k}: {d}" for k, (ok, d) in check.checks.items() if not ok]
                raise RunFailure("consistency check failed: " + "; ".join(failed))
            status = "done"
        except Interrupted as exc:
            self.store.interrupt_run(n, f"interrupted: {exc}")
            self.progress.say(f"{self.progress.tag(n)} interrupted")
            raise
        except UserError as exc:
            self.store.interrupt_run(n, f"interrupted: {str(exc).splitlines()[0]}")
            raise
        except Exception as exc:  # a failed run is stored and the experiment goes on
            status = "failed"
            error = str(exc) if isinstance(exc, RunFailure) else f"{type(exc).__name__}: {exc}"
            partial = exc.partial if isinstance(exc, RunFailure) else None
            if partial is not None and partial.queries:
                # The queries it completed are stored with it: its status (failed) keeps them
                # out of every figure pooled over finished runs.
                result.queries.extend(partial.queries)
                result.events.append(Event(0.0, "partial", f"{len(partial.queries)} queries completed before the "
                                           "failure are kept with the failed run"))
            if target is not None:
                usage = target.resource_usage() or self._torn_down_usage.pop(id(target), {})
                if (oom := oom_cause(usage, usage_before)) is not None:  # the cause, named first, with its figures
                    error = error if oom in error else f"{oom}; {error}"
                    result.flags.append(Flag.OOM_KILLED)
                    resource_metrics(usage_before or dict.fromkeys(usage, 0.0), usage, result)  # a new cgroup: from 0
                alive = target.check_alive()
                if alive:
                    error = f"{error} ({alive})"
            log_tail = (exc.log_tail if isinstance(exc, RunFailure) else None) or (
                target.log_tail(LOG_TAIL_LINES) if target else None)
            error = server_cause(error, log_tail, _server_dirs(described, target))
            # error.txt is for the user: the error and the server's words. A
            # traceback helps only when perflab itself failed (not a RunFailure).
            (run_dir / "error.txt").write_text(
                error + "\n" + (f"\nserver log, last lines:\n{log_tail}\n" if log_tail else "")
            )
            if not isinstance(exc, RunFailure):
                (run_dir / "traceback.txt").write_text(traceback.format_exc())
        finally:
            self.host.drain_events(result)
            if target is not None:
                with contextlib.suppress(Exception):
                    target.end_run(run_dir)
            laps.store(result)
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

    def _identity(self, target_settings: TargetSettings) -> str:
        cls = TARGETS.get(target_settings.kind)
        return f"{target_settings.kind}:{cls.identity(target_settings)}"

    def _target_dir(self, kind: str, identity: str) -> Path:
        digest = hashlib.sha256(identity.encode()).hexdigest()[:8]
        return self.out_dir / "targets" / f"{kind}-{digest}"

    def _target_object(self, spec: RunSpec, result: RunResult) -> tuple[Target, str]:
        """The run's target, not yet started: the active one when the run
        shares its identity and it is alive, else a new one (the active one is
        stopped first)."""
        identity = self._identity(spec.target)
        active = self.active
        down = active.target.check_alive() if active is not None and active.identity == identity else "-"
        if active is not None and down is None:
            return active.target, identity
        if active is not None and active.identity == identity:  # crashed since (an earlier run failed on it)
            self.progress.say(f"restarting the server for this run: it was down ({down})")
            result.events.append(Event(0.0, "restart", f"the server was down ({down}); restarted for this run"))
        self._release_target()
        cls = TARGETS.get(spec.target.kind)
        target = cls(spec.target, self._target_dir(spec.target.kind, identity), self.base_dir)
        if self.link.made and cls.remote_client_problem(spec.target) is None:
            target.allow_remote_client(self.link.server_address, self.link.client_address)
        return target, identity

    def _bring_up(self, target: Target, identity: str, spec: RunSpec, result: RunResult) -> Endpoint:
        """Reconfigure the active target for this run, or provision a new one."""
        active = self.active
        if active is not None and active.target is target:
            if target.reconfigure(spec.target):
                result.events.append(Event(0.0, "restart", "server restarted with this run's settings"))
            return active.endpoint
        try:
            endpoint = target.provision()
        except BaseException:
            # its cgroup's counters (an OOM kill at the start), read before teardown removes it
            self._torn_down_usage[id(target)] = target.resource_usage()
            with signals_ignored():
                target.teardown()
            raise
        for note in target.notes:
            self.progress.warn(note)
        self.active = ActiveTarget(identity, target, endpoint)
        if endpoint.fresh:
            self.store.set_dataset(identity, None, None)
        return endpoint

    def _discard_data(self) -> None:
        """The experiment is finished: remove each target's data (a cluster,
        a separate WAL directory, a database file) unless it says keep_data."""
        seen: set[str] = set()
        for planned in self.plan.values():
            settings = self.exp.resolve(planned.factors).target
            identity = self._identity(settings)
            if identity in seen:
                continue
            seen.add(identity)
            target = TARGETS.get(settings.kind)(settings, self._target_dir(settings.kind, identity), self.base_dir)
            if settings.keep_data:
                kept = target.data_locations()
                if kept:
                    self.progress.say(f"kept the target's data (keep_data = true): {', '.join(map(str, kept))}")
                continue
            try:
                freed = target.discard_data()
            except Exception as exc:  # the results are stored; say what is left behind
                self.progress.warn(f"the target's data was not removed: {exc}")
                continue
            if freed:
                self.progress.say(f"removed the target's data ({freed / 2**20:.0f} MiB; "
                                  "keep it with target.keep_data = true)")
            self.store.set_dataset(identity, None, None)

    def _release_target(self) -> None:
        if self.active is not None:
            active, self.active = self.active, None
            try:
                self._record_leftovers(active.target, active.identity)
            except Exception as exc:  # measuring must not keep a server running
                self.progress.warn(f"what the experiment left in the target was not measured: {exc}")
            active.target.teardown()

    def _confine(self, target: Target, identity: str, endpoint: Endpoint, kind: str, result: RunResult) -> Endpoint:
        """A workload that writes to a database perflab did not create works
        only in perflab's own schema there (Target.confine); what that made is
        recorded at once, so `perflab clean` finds it even after a SIGKILL."""
        if self.owner is None:
            self.owner = Owner(self.store.experiment_id(), str(self.out_dir))
        try:
            confined = target.confine(endpoint, schema_for(kind), self.owner)
        finally:
            said, target.said = target.said, []
            for note in said:
                self.progress.say(note)
                result.events.append(Event(0.0, "schema", note))
        if confined is not endpoint:
            self._record_leftovers(target, identity)
            if confined.fresh:  # made just now: whatever the store says was loaded is not there
                self.store.set_dataset(identity, None, None)
                confined.fresh = False
        return confined

    def _record_leftovers(self, target: Target, identity: str) -> None:
        for left in target.leftovers():
            self.store.record_leftover(identity, left.kind, left.where, left.name, bytes_=left.bytes,
                                       objects=left.objects, detail=left.detail, measured=True)

    def _say_leftovers(self) -> None:
        """What the experiment leaves outside its output directory, and how to remove it."""
        left = self.store.leftovers()
        if not left:
            return
        for row in left:
            size = format_bytes(row["bytes"])
            self.progress.say(f"left {row['kind']} {row['name']} ({size}; {row['detail']}) in {row['location']}")
        self.progress.say(f"remove what this experiment left with: perflab clean {self.out_dir}")

    def _prepare(self, workload: Workload, endpoint: Endpoint, identity: str, ctx: RunContext,
                 result: RunResult) -> None:
        key = workload.data_key()
        why = workload.reload_for_rerun(ctx.earlier_effects) if ctx.earlier_effects else None
        in_place = self.store.dataset(identity) == key and why is None
        # data = "fresh": a data set another run wrote to is loaded again; by design, so no "fresh load" mark
        planned = in_place and self.exp.meta.data == "fresh" and workload.writes()
        if in_place and not planned:
            result.events.append(Event(0.0, "prepare", "data set reused from an earlier run"))
            return
        if why is not None:
            self.progress.say(f"run {ctx.run_number}: loading the data again: {why}")
            result.events.append(Event(0.0, "reload", why))
        self.progress.load_start(ctx.run_number, workload)  # a line, and the live status while it loads
        self.store.set_dataset(identity, None, None)  # a crash mid-load leaves no claim of a data set
        # A load of data that other runs used already (discarded, lost, or changed beyond undoing by an
        # earlier attempt) puts this run on a fresh load, which the report says; a load that found it all
        # in place (a web server's file set, reused from the cache) loaded nothing.
        record = {"data_key": key,
                  "reload": not planned and (why is not None or self._used_before(ctx.run_number, identity, key))}
        if planned:
            record["fresh"] = True
            result.events.append(Event(0.0, "reload", 'data = "fresh": the data set an earlier run wrote to is '
                                       "loaded again"))
        self.store.add_effect(ctx.run_number, "load", record if why is None else {**record, "why": why})
        load = workload.prepare(endpoint, ctx)
        self.progress.load_end(ctx.run_number, load)
        if load.reused and record["reload"] and why is None:
            self.store.amend_effect(ctx.run_number, "load", {**record, "reload": False})
        for step, seconds in load.steps.items():
            result.add_metric(f"load.{step}_s", seconds, "s", f"load phase step: {step}")
        if load.steps:
            result.add_metric("load.total_s", load.total_s, "s", "load phase total", higher_is_better=False)
        for table, rows in load.rows.items():
            result.add_metric(f"load.rows.{table}", rows, "rows")
        result.events.append(Event(0.0, "prepare", f"data set prepared in {load.total_s:.2f}s"))
        self.store.set_dataset(identity, key, ctx.run_number)

    def _used_before(self, run_id: int, identity: str, key: str) -> bool:
        """Whether another run of this target and data set was attempted."""
        for r in self.store.runs():
            if r["id"] == run_id or r["attempts"] == 0 or r["id"] not in self.plan:
                continue
            spec = self.exp.resolve(self.plan[r["id"]].factors)
            if self._identity(spec.target) == identity and WORKLOADS.get(spec.workload.kind)(spec.workload).data_key() == key:
                return True
        return False

    def _measure(self, workload: Workload, endpoint: Endpoint, target: Target, spec: RunSpec,
                 ctx: RunContext) -> RunResult:
        """Collectors around the workload's run, all on one clock starting now."""
        ctx.t0_ns = time.monotonic_ns()
        self.store.set_t0(ctx.run_number, ctx.t0_ns)
        writer = self.store.series_writer(ctx.run_number)
        ctx.series = writer
        ctx.query_done = writer.add_query
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
            usage = target.resource_usage()
            # host noise: what else used the machine while the workload ran
            noise = HostNoise(target.processes(), external=target.external)
            noise.begin()
            if spec.driver.network.namespace:
                with self.link.driving(spec.driver.network, target, endpoint, result, ctx.now_s) as remote:
                    result.merge(workload.run(remote, ctx))
            else:
                result.merge(workload.run(endpoint, ctx))
            result.merge(noise.end(target.processes()))
            if usage:
                after = target.resource_usage()
                resource_metrics(usage, after, result)
                bound = memory_bound(usage, after)
                if bound is not None:
                    result.flags.append(Flag.MEMORY_LIMITED)
                    result.events.append(Event(ctx.now_s(), "memory-limited", bound))
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
            for metric in collector.derive(result.metrics).values():
                result.metrics[metric.name] = metric
            try:
                collector.annotate(result)
            except Exception as exc:  # telemetry must not lose the run
                result.events.append(Event(ctx.now_s(), "collector-error", f"{collector.name}: {exc}"))
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
