"""The distributed driver: the engine's harness in Ray actors.

`RayDriver` connects to a Ray cluster (`address`), or with `address =
"local"` starts a private one on this machine (journaled to the guardian: every process of it carries PERFLAB_RAY_CLUSTER=<token> in its
environment, and `undo_cluster` kills them all after a SIGKILL of perflab).
A process is the cluster's by that token, or (Ray's agents write their title
over their environment) by its pid and start time, journaled while it was
one of perflab's own descendants holding a file of the cluster's directory:
never by a file it holds alone (the directory's name is visible in /tmp).
It keeps `workers` actors (`EngineWorker`, one CPU each, spread over the
nodes) for the whole experiment. Each run:

1. every worker starts the harness binding on its share of the clients and
   of the rate, with its own seed, gated: it connects its clients, then waits;
2. the barrier: once every worker says its clients are connected, the
   coordinator measures each worker's clock offset (the round trip with the
   shortest time of OFFSET_SAMPLES: offset = worker clock - midpoint, its
   uncertainty half that round trip), picks one start instant a little ahead,
   and gives each worker that instant on its own clock;
3. the results come back as plain data, are put on the run's clock and
   merged exactly (perflab.drivers.merge).

A worker that dies, or whose node is lost, fails the run, naming the worker
and its node; the other workers are stopped and every actor is killed (a
killed process closes its connections), so nothing is left; the next run
starts new actors.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perflab import _engine
from perflab.context import RunContext
from perflab.drivers import RAY_EXTRA_HINT, EngineDriver, split_evenly
from perflab.drivers.merge import MergedResult, WorkerResult, merge
from perflab.errors import RunFailure, UserError
from perflab.guardian import journal, register_undo
from perflab.hostctl.shareddir import own_dir
from perflab.model import Event, RunResult
from perflab.proc import descendants, pid_alive, start_time

CLUSTER_ENV = "PERFLAB_RAY_CLUSTER"
# A private cluster's object store: results are small (histograms, series).
OBJECT_STORE_BYTES = 256 * 2**20
CONNECT_TIMEOUT_S = 120.0  # for every worker's clients to connect
OFFSET_SAMPLES = 8
# The start instant is this far ahead of the barrier (at least 4 round trips):
# time for the go to reach every worker.
START_MARGIN_NS = 100_000_000
POLL_S = 0.2
SEED_STRIDE = 0x9E3779B97F4A7C15


# ---------------------------------------------------------------- the cluster


def cluster_processes(token: str, temp_dir: str | None = None) -> list[int]:
    """Processes that may be a private cluster's: their environment has
    CLUSTER_ENV=token, or (Ray's agents write their title over their
    environment) they hold a file of the cluster's directory open. A file
    held proves nothing of a process that is not perflab's own descendant
    (`own_cluster_processes`); the undo kills only what is proven."""
    marker = f"{CLUSTER_ENV}={token}".encode()
    inside = None if temp_dir is None else str(temp_dir).rstrip("/") + "/"
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker in (entry / "environ").read_bytes().split(b"\0") or (
                    inside is not None and _holds_a_file_in(entry, inside)):
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def _holds_a_file_in(proc: Path, directory: str) -> bool:
    for fd in (proc / "fd").iterdir():
        with contextlib.suppress(OSError):
            if os.readlink(fd).startswith(directory):
                return True
    return False


def own_cluster_processes(token: str, temp_dir: str | None) -> list[list[Any]]:
    """[pid, start time] of the cluster's processes now, among this perflab's
    descendants (what is below this process is perflab's own, whatever file
    it holds): what the journal names for `undo_cluster`."""
    mine = set(descendants(os.getpid())) - {journal().guardian_pid()}
    return [[pid, start] for pid in cluster_processes(token, temp_dir)
            if pid in mine and (start := start_time(pid)) is not None]


def proven_cluster_processes(token: str, recorded: Any) -> list[int]:
    """The cluster's processes alive now, proven perflab's: the token in their
    environment, or a pid and start time journaled (`own_cluster_processes`)."""
    pids = set(cluster_processes(token))
    for item in recorded if isinstance(recorded, list) else []:
        with contextlib.suppress(TypeError, ValueError):
            pid, start = int(item[0]), str(item[1])
            if start_time(pid) == start:
                pids.add(pid)
    return sorted(p for p in pids if pid_alive(p))


def undo_cluster(args: dict[str, Any]) -> None:
    """The guardian's undo of a private cluster: SIGKILL every process of it
    (head, raylet, agents, workers, actors) proven perflab's by its token or
    its journaled pid and start time (`proven_cluster_processes`), and wait up
    to 3 s for them to go."""
    token = str(args["token"])
    deadline = time.monotonic() + 3
    while True:
        pids = proven_cluster_processes(token, args.get("processes"))
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if not pids or time.monotonic() > deadline:
            return
        time.sleep(0.05)


# a private Ray cluster (driver.address = "local"): kill every process that
# carries its token in its environment, or whose pid and start time are journaled
register_undo("ray-cluster", undo_cluster)


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UserError('driver.kind = "ray" needs Ray, which is not installed', RAY_EXTRA_HINT) from None
    return ray


# ---------------------------------------------------------------- a worker


class EngineWorker:
    """One driver: an actor that loads perflab's engine and runs a harness
    binding, gated on the coordinator's barrier. Its methods other than `run`
    answer while a run goes (the actor has several threads)."""

    def __init__(self, index: int) -> None:
        self.index = index
        self._cancel = threading.Event()
        self._connected = threading.Event()
        self._go = threading.Event()
        self._go_ns = 0

    def describe(self) -> dict[str, Any]:
        import ray

        return {"pid": os.getpid(), "node_id": ray.get_runtime_context().get_node_id(),
                "ip": ray.util.get_node_ip_address(), "host": socket.gethostname(),
                "cores": len(os.sched_getaffinity(0))}

    def clock_ns(self) -> int:
        return time.monotonic_ns()

    def _wait_go(self) -> int:
        self._connected.set()
        while not self._go.wait(0.05):
            pass
        if self._cancel.is_set():
            raise _engine.Interrupted("stopped by the coordinator")
        return self._go_ns

    def run(self, function: str, conninfo: str, kwargs: dict[str, Any], node: str) -> tuple[str, Any, Any]:
        """("ok", t0_ns, WorkerResult on the worker's clock since t0_ns), or
        ("error", the engine's exception class name, message)."""
        self._cancel.clear()
        self._connected.clear()
        self._go.clear()
        t0 = time.monotonic_ns()
        try:
            out = getattr(_engine, function)(conninfo, **kwargs, t0_ns=t0, cancel=self._cancel,
                                             on_connected=self._wait_go)
        except BaseException as exc:  # the coordinator raises it again, naming this worker
            return "error", type(exc).__name__, str(exc)
        return "ok", t0, WorkerResult.of(self.index, node, out)

    def wait_connected(self, timeout_s: float) -> bool:
        return self._connected.wait(timeout_s)

    def go(self, at_ns: int) -> None:
        self._go_ns = at_ns
        self._go.set()

    def stop(self) -> None:
        self._cancel.set()
        self._go.set()


# ---------------------------------------------------------------- the coordinator


class RayDriver(EngineDriver):
    def __init__(self, address: str, workers: int, say: Callable[[str], None]) -> None:
        self.ray = _import_ray()
        self.address = address
        self.n = workers
        self.say = say
        self.actors: list[Any] = []
        self.nodes: list[dict[str, Any]] = []
        self.token: str | None = None
        self.temp_dir: Path | None = None
        self._processes: list[list[Any]] = []  # the cluster's [pid, start time]s, journaled
        self._figures = RunResult()
        self._setup_s = 0.0  # cluster and actors: counted into the next run's figures
        started = time.monotonic()
        self._connect()
        self._setup_s += time.monotonic() - started

    # ------------------------------------------------------------ cluster

    def _connect(self) -> None:
        ray = self.ray
        if ray.is_initialized():
            raise UserError("this process is already connected to a Ray cluster",
                            "run perflab in a process of its own")
        package_root = str(Path(__file__).resolve().parents[2])
        sigterm, sigint = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
        options: dict[str, Any] = {"log_to_driver": False, "logging_level": "WARNING"}
        try:
            if self.address == "local":
                self.token = secrets.token_hex(8)
                # Its sockets, logs and session files, removed with it (not left in /tmp/ray).
                self.temp_dir = Path(tempfile.gettempdir()) / f"perflab-ray-{self.token}"
                journal().add("remove-dir", f"remove-dir:{self.temp_dir}", path=str(self.temp_dir))
                journal().add("ray-cluster", f"ray-cluster:{self.token}", token=self.token,
                              temp_dir=str(self.temp_dir))
                own_dir(self.temp_dir, 0o700, reuse=False)  # a random name, made afresh and checked
                os.environ[CLUSTER_ENV] = self.token
                try:
                    self.say(f"starting a private Ray cluster on this machine ({self.n} worker(s))")
                    ray.init(address="local", num_cpus=self.n, object_store_memory=OBJECT_STORE_BYTES,
                             include_dashboard=False, _temp_dir=str(self.temp_dir),
                             runtime_env={"env_vars": {"PYTHONPATH": package_root}}, **options)
                finally:
                    os.environ.pop(CLUSTER_ENV, None)
                self._journal_processes()
            else:
                self.say(f"connecting to the Ray cluster at {self.address}")
                ray.init(address=self.address, runtime_env={"py_modules": [str(Path(__file__).resolve().parents[1])]},
                         **options)
        except UserError:
            raise
        except Exception as exc:
            self.close()
            raise UserError(f"driver.address = {self.address!r}: cannot start or reach the Ray cluster: "
                            f"{str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}",
                            'give the address of a running Ray cluster ("host:port" or "ray://host:10001"), '
                            'or "local"') from None
        finally:
            # ray.init installs its own SIGTERM handler; perflab's stops the experiment cleanly.
            signal.signal(signal.SIGTERM, sigterm)
            signal.signal(signal.SIGINT, sigint)

    def _journal_processes(self) -> None:
        """Journal the cluster's processes below this perflab (pid and start
        time) that are not yet: the guardian kills those, and what carries the
        token, after a SIGKILL."""
        if self.token is None:
            return
        known = {(p, s) for p, s in self._processes}
        new = [p for p in own_cluster_processes(self.token, str(self.temp_dir)) if (p[0], p[1]) not in known]
        if new:
            self._processes += new
            journal().add("ray-cluster", f"ray-cluster:{self.token}", token=self.token,
                          temp_dir=str(self.temp_dir), processes=self._processes)

    def close(self) -> None:
        if self.token is not None:
            with contextlib.suppress(Exception):
                self._journal_processes()  # while they are still below this process
        self._kill_actors()
        with contextlib.suppress(Exception):
            if self.ray.is_initialized():
                self.ray.shutdown()
        if self.token is not None:
            # what ray.shutdown left (it waits for nothing, and leaves agents behind)
            undo_cluster({"token": self.token, "temp_dir": str(self.temp_dir), "processes": self._processes})
            journal().remove(f"ray-cluster:{self.token}")
            self.token = None
        if self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
            journal().remove(f"remove-dir:{self.temp_dir}")
            self.temp_dir = None

    def _ensure_actors(self) -> None:
        if self.actors:
            return
        ray = self.ray
        started = time.monotonic()
        actor = ray.remote(num_cpus=1, max_concurrency=4, scheduling_strategy="SPREAD")(EngineWorker)
        self.actors = [actor.remote(i) for i in range(self.n)]
        try:
            self.nodes = ray.get([a.describe.remote() for a in self.actors], timeout=CONNECT_TIMEOUT_S)
            addresses = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
            for n in self.nodes:  # the address Ray reaches the node at
                n["ip"] = addresses.get(n["node_id"], n["ip"])
        except Exception as exc:
            self._kill_actors()
            raise RunFailure(f"the {self.n} Ray driver worker(s) did not start: {_first_line(exc)} "
                             f"(does the cluster have {self.n} free CPU(s)?)") from None
        self._journal_processes()  # the workers the actors run in
        self._setup_s += time.monotonic() - started

    def _kill_actors(self) -> None:
        actors, self.actors = self.actors, []
        for a in actors:
            with contextlib.suppress(Exception):
                self.ray.kill(a, no_restart=True)

    def _node(self, index: int) -> str:
        if index < len(self.nodes):
            n = self.nodes[index]
            return f"{n['ip']} ({n['host']}, node {n['node_id'][:12]}, pid {n['pid']})"
        return "unknown node"

    # ------------------------------------------------------------ a run

    def figures(self) -> RunResult:
        figures, self._figures = self._figures, RunResult()
        return figures

    def shares(self, kwargs: dict[str, Any]) -> list[dict[str, Any]]:
        """Each worker's arguments: its clients, threads and rate, its own seed
        (in the harness's settings, `harness`)."""
        whole = kwargs["harness"]
        clients = int(whole["clients"])
        if clients < self.n:
            raise UserError(f"driver.workers = {self.n} is more than the run's {clients} client(s)",
                            "give each worker at least one client: fewer workers or more clients")
        counts = split_evenly(clients, self.n)
        threads = split_evenly(max(int(whole.get("threads") or clients), self.n), self.n)
        out = []
        for i, c in enumerate(counts):
            harness = dict(whole, clients=c, threads=max(1, min(c, threads[i])),
                           seed=(int(whole.get("seed") or 0) + i * SEED_STRIDE) % 2**63)
            if whole.get("rate") is not None:
                harness["rate"] = whole["rate"] * c / clients
            share = dict(kwargs, harness=harness)
            share.pop("t0_ns", None)
            out.append(share)
        return out

    def run(self, function: str, conninfo: str, ctx: RunContext, progress: Callable[[Any], object] | None,
            kwargs: dict[str, Any]) -> MergedResult:
        self._figures = RunResult()
        shares = self.shares(kwargs)
        self._ensure_actors()
        fixed_started = time.monotonic()
        ctx.status(f"ray: {self.n} driver worker(s) connecting {kwargs['harness']['clients']} clients")
        refs = [a.run.remote(function, conninfo, share, self._node(i))
                for i, (a, share) in enumerate(zip(self.actors, shares, strict=True))]
        try:
            offsets = self._barrier(refs, ctx)
            barrier_s = time.monotonic() - fixed_started
            raw = self._results(refs, ctx)
        except BaseException:
            self._stop_all()
            raise
        results = []
        for i, (t0_local, result) in enumerate(raw):
            offset_ns, _ = offsets[i]
            results.append(result.shifted((t0_local - offset_ns - ctx.t0_ns) / 1e9))
        merged = merge(results)
        self._record(merged, offsets, barrier_s)
        if progress is not None:  # the workload stores the merged seconds as it stores its own
            for interval in merged.series:
                progress(interval)
        return merged

    def _barrier(self, refs: list[Any], ctx: RunContext) -> list[tuple[int, int]]:
        """Wait until every worker's clients are connected; measure the clock
        offsets; start every worker at one instant. Returns (offset ns,
        uncertainty ns) per worker."""
        ray = self.ray
        waits = [a.wait_connected.remote(CONNECT_TIMEOUT_S) for a in self.actors]
        pending = set(range(self.n))
        while pending:
            self._check(refs, ctx, finished_is_error=True)
            ready, _ = ray.wait([waits[i] for i in pending], num_returns=len(pending), timeout=POLL_S)
            for ref in ready:
                i = waits.index(ref)
                if not self._get(ref, i):
                    raise RunFailure(f"driver worker {i} on {self._node(i)} did not connect its clients "
                                     f"within {CONNECT_TIMEOUT_S:.0f} s")
                pending.discard(i)
        offsets = [self._offset(i) for i in range(self.n)]
        margin = max(START_MARGIN_NS, 4 * max(2 * u for _, u in offsets))
        start = time.monotonic_ns() + margin
        ray.get([a.go.remote(start + off) for a, (off, _) in zip(self.actors, offsets, strict=True)])
        if time.monotonic_ns() > start:
            self._figures.events.append(Event((start - ctx.t0_ns) / 1e9, "driver-late-start",
                                              "the go reached the workers after the start instant"))
        self._figures.events.append(Event((start - ctx.t0_ns) / 1e9, "driver-barrier",
                                          f"{self.n} driver worker(s) connected; all started at this instant"))
        return offsets

    def _offset(self, i: int) -> tuple[int, int]:
        """(worker clock - coordinator clock, uncertainty), in ns."""
        best: tuple[int, int] | None = None
        for _ in range(OFFSET_SAMPLES):
            before = time.monotonic_ns()
            theirs = self._get(self.actors[i].clock_ns.remote(), i)
            after = time.monotonic_ns()
            sample = (theirs - (before + after) // 2, (after - before) // 2)
            if best is None or sample[1] < best[1]:
                best = sample
        assert best is not None
        return best

    def _results(self, refs: list[Any], ctx: RunContext) -> list[tuple[int, WorkerResult]]:
        done: dict[int, tuple[int, WorkerResult]] = {}
        while len(done) < self.n:
            for i, value in self._check(refs, ctx, finished_is_error=False, skip=done):
                done[i] = value
        return [done[i] for i in range(self.n)]

    def _check(self, refs: list[Any], ctx: RunContext, finished_is_error: bool,
               skip: dict[int, Any] | None = None) -> list[tuple[int, Any]]:
        """Wait up to POLL_S for runs that ended; raise for a failed or dead
        worker, or when the run is cancelled."""
        if ctx.cancel.is_set():
            raise _engine.Interrupted("run cancelled")
        skip = skip or {}
        live = [r for i, r in enumerate(refs) if i not in skip]
        ready, _ = self.ray.wait(live, num_returns=len(live), timeout=POLL_S)
        out = []
        for ref in ready:
            i = refs.index(ref)
            status, a, b = self._get(ref, i)
            if status == "error":
                raise _engine_error(a, f"driver worker {i} on {self._node(i)}: {b}")
            if finished_is_error:
                raise RunFailure(f"driver worker {i} on {self._node(i)} ended before the start barrier")
            out.append((i, (a, b)))
        return out

    def _get(self, ref: Any, i: int) -> Any:
        ray = self.ray
        try:
            return ray.get(ref)
        except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError,
                ray.exceptions.NodeDiedError, ray.exceptions.ObjectLostError) as exc:
            raise RunFailure(f"driver worker {i} on {self._node(i)} died ({type(exc).__name__}: "
                             f"{_first_line(exc)}); the other workers were stopped") from None

    def _stop_all(self) -> None:
        """Stop every worker's run and kill every actor: nothing is left (a
        killed process closes its connections); the next run starts new ones."""
        for a in self.actors:
            with contextlib.suppress(Exception):
                a.stop.remote()
        self._kill_actors()

    def _record(self, merged: MergedResult, offsets: list[tuple[int, int]], barrier_s: float) -> None:
        add = self._figures.add_metric
        add("driver.workers", self.n, "workers", "Ray actors that drove the run, each its share of the clients")
        if self._setup_s:
            add("driver.setup_s", self._setup_s, "s",
                "Ray set-up before this run: the cluster (started or reached) and the worker actors")
            self._setup_s = 0.0
        add("driver.barrier_s", barrier_s, "s",
            "from starting the workers' runs to the common start instant (connections, offsets, the go)")
        for w, (offset, uncertainty) in zip(merged.workers, offsets, strict=True):
            p = f"driver.worker.{w.index}"
            add(f"{p}.clock_offset_ms", offset / 1e6, "ms",
                f"worker {w.index}'s CLOCK_MONOTONIC minus the coordinator's, at the barrier ({w.node})")
            add(f"{p}.clock_offset_uncertainty_ms", uncertainty / 1e6, "ms",
                "half the shortest round trip of the offset's samples: the offset is within +- this")
            add(f"{p}.clients", w.clients, "clients")
            add(f"{p}.transactions", w.transactions, "tx", "committed transactions in the measured window")
            add(f"{p}.driver_cpu_s", w.driver_cpu_s, "s", "CPU time of the worker's driver threads in the window")
            if w.cpu_given_s > 0:
                add(f"{p}.driver_cpu_share", w.driver_cpu_s / w.cpu_given_s, "ratio",
                    "driver CPU over what its threads could use; above 0.8 the worker is client-bound",
                    higher_is_better=False)
            add(f"{p}.client_bound", 1.0 if w.client_bound else 0.0, "bool",
                "1: this worker's driver, not the server, was the bottleneck (the run is flagged client-bound)")
            self._figures.events.append(Event(merged.measure_start_t_s, "driver-worker",
                                              f"worker {w.index} on {w.node}: {w.clients} clients, "
                                              f"{w.threads} threads"))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _engine_error(name: str, message: str) -> BaseException:
    """The engine's exception a worker raised, again here, naming the worker."""
    cls = getattr(_engine, name, None)
    if isinstance(cls, type) and issubclass(cls, BaseException):
        return cls(message)
    return RunFailure(f"{message} ({name})")
