"""Soak of the TPC-B driver under a server that is killed, stalled and restarted.

Why: io_uring may only become `auto`'s choice once it is shown that a dying or
frozen server never hangs a run and never makes the driver miscount. Each
round draws one fault plan from the seeded generator and runs it once per io
method (in a random order), so epoll is the control for the same faults.

One run: a fresh child process (`--child`) calls `perflab._engine.tpcb_run`
(tpcb-like, scale 1, --clients on --threads, protocol drawn from simple,
extended, prepared, --duration s); it prints `go` just before the call and
one JSON line with the result after it. A child is a separate process so
that a hung run can be observed (its threads' kernel wait channels and its
io_uring fdinfo are captured), killed and counted instead of hanging the soak.
At a random moment from `go` to just past the end of the run, the parent
applies the fault to the server this script started (its postmaster and the
postmaster's children only):

- none;
- kill-backend: SIGKILL one driver backend (the postmaster then ends every
  backend and runs crash recovery: every client is lost);
- terminate-backend: SIGTERM one driver backend (that client is lost only);
- stall-backend / stall-server: SIGSTOP one backend / every server process,
  SIGCONT after 0.05-3 s, or (--long-stall-share, one in ten) until 1 s past the end of
  the run plus the engine's END_GRACE, so that the grace's forced close runs;
- kill-server: SIGKILL the postmaster, then (after up to 2 s for its
  children to notice) SIGKILL what is left, and start the server again;
- restart: stop the server (fast, or immediate) and start it again.

Properties checked for every run:

- no hang: the child returns within --duration + END_GRACE (10 s) +
  HANG_MARGIN_S after `go`; a stall during the connection phase is cut off by
  connect_timeout = 5 s, inside the same bound;
- no lost or double-counted transaction. The count the workload leaves in the
  database is the reference: tpcb-like inserts one pgbench_history row per
  transaction, in the transaction, and the table is emptied before each run.
  A commit whose reply was lost (the connection died after COMMIT reached the
  server) is committed on the server but not counted by the driver, which
  never reconnects a lost client, so each lost client hides at most one such
  transaction. The rule: driver committed <= history rows <= driver committed
  + lost clients. A run whose clients could not connect ran nothing: its rule
  is history rows == 0. (pg_stat_database's xact_commit is not used: crash
  recovery resets it, and a SIGKILLed backend's unflushed counts are lost.)

Every failing run's full record (plan, child output, the server log of the
run, and for a hang the diagnosis) is written to a file whose path is printed.

    .venv/bin/python benchmarks/uring_soak.py [--runs 200] [--seed N] [--io epoll uring]
        [--duration 1.0] [--clients 4] [--threads 2] [--faults ...] [--out DIR]
    .venv/bin/python benchmarks/uring_soak.py --report DIR/runs.jsonl   # a finished soak's tables
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from _common import follow_moves, run_main

# The engine's grace for in-flight transactions after the end of a run
# (crates/engine/src/harness/run.rs: END_GRACE).
END_GRACE_S = 10.0
# Time allowed beyond duration + END_GRACE: the child's own exit, the
# coordinator's 20 ms polling, a busy shared machine.
HANG_MARGIN_S = 5.0
CONNECT_TIMEOUT_S = 5
FAULTS = ("none", "kill-backend", "terminate-backend", "stall-backend", "stall-server", "kill-server", "restart")
APPLICATION = "perflab-soak"


@dataclass
class Plan:
    """One round's fault, the same for every io method."""

    fault: str
    at_s: float
    stall_s: float = 0.0
    protocol: str = "prepared"
    restart_mode: str = "fast"
    victim_draw: float = 0.0
    seed: int = 0


@dataclass
class Outcome:
    round: int
    io: str
    plan: Plan
    seconds: float = 0.0
    hung: bool = False
    result: dict[str, Any] = field(default_factory=dict)
    history_rows: int | None = None
    verdict: str = ""
    ok: bool = False
    fault_note: str = ""


def draw_plan(rng: random.Random, duration: float, long_stall_share: float = 0.1,
              faults: tuple[str, ...] = FAULTS) -> Plan:
    fault = rng.choice(faults)
    at = rng.uniform(0.0, duration + 0.2)
    stall = 0.0
    if fault.startswith("stall"):
        if rng.random() < long_stall_share:
            stall = duration + END_GRACE_S + 1.0 - min(at, duration)
        else:
            stall = rng.uniform(0.05, 3.0)
    return Plan(
        fault=fault, at_s=round(at, 3), stall_s=round(stall, 3),
        protocol=rng.choice(("simple", "extended", "prepared")),
        restart_mode=rng.choice(("fast", "immediate")), victim_draw=rng.random(),
        seed=rng.getrandbits(63),
    )


def check_counts(result: dict[str, Any], history_rows: int) -> str:
    """The counting rule; an empty string when it holds."""
    if result.get("outcome") == "connect-error":
        return "" if history_rows == 0 else f"no run (connect failed) but {history_rows} history rows"
    if result.get("outcome") != "done":
        return f"no result: {result.get('outcome')}: {result.get('message', '')}"
    committed, lost = int(result["transactions"]), int(result["lost_clients"])
    if history_rows < committed:
        return f"lost: driver counted {committed} commits, the server has {history_rows}"
    if history_rows > committed + lost:
        return (f"miscount: the server has {history_rows} commits, driver counted {committed} "
                f"with {lost} lost clients (at most {committed + lost} explained)")
    return ""


# ------------------------------------------------------------------ the child


def child(spec: dict[str, Any]) -> int:
    from perflab import _engine
    from perflab.workloads.harness import engine_settings_of

    print("go", flush=True)
    try:
        out = _engine.tpcb_run(
            spec["conninfo"], script="tpcb-like", scale=1, protocol=spec["protocol"], t0_ns=time.monotonic_ns(),
            harness=engine_settings_of(clients=spec["clients"], threads=spec["threads"], duration=spec["duration"],
                                       seed=spec["seed"], io=spec["io"], pin=spec["pin"],
                                       follow=spec.get("follow", False)),
        )
    except _engine.EngineConnectionError as exc:
        print(json.dumps({"outcome": "connect-error", "message": str(exc)}), flush=True)
        return 0
    print(json.dumps({
        "outcome": "done", "transactions": out.transactions, "failed": out.failed,
        "lost_clients": out.lost_clients, "errors_by_kind": out.errors_by_kind, "io": out.io,
        "events": [[e.t_s, e.kind, e.message] for e in out.events],
    }), flush=True)
    return 0


# ------------------------------------------------------------------ the server


class Server:
    """perflab's own managed PostgreSQL, and the faults applied to it."""

    def __init__(self, workdir: Path) -> None:
        from perflab.targets.postgres import PostgresSettings, PostgresTarget

        # synchronous_commit on: an acknowledged commit survives a crash,
        # else the driver's count could exceed the server's for a reason
        # that is not the driver's.
        self.settings = PostgresSettings.model_validate({
            "kind": "postgres", "restart": "always",
            "settings": {"synchronous_commit": "on", "max_connections": 50, "restart_after_crash": "on"},
        })
        self.target = PostgresTarget(self.settings, workdir / "target")
        self.endpoint: Any = None
        self.known: set[int] = set()

    def start(self) -> None:
        self.endpoint = self.target.provision()

    def stop(self) -> None:
        self.resume_all()
        self.target.teardown()

    def conninfo(self) -> str:
        from psycopg.conninfo import make_conninfo

        return make_conninfo(self.endpoint.wire_conninfo(APPLICATION), connect_timeout=CONNECT_TIMEOUT_S)

    def connect(self, wait_s: float = 60.0) -> Any:
        """A connection, waiting out crash recovery and restarts."""
        import psycopg

        deadline = time.monotonic() + wait_s
        while True:
            try:
                return psycopg.connect(self.endpoint.conninfo, autocommit=True, connect_timeout=5)
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def ensure_up(self) -> None:
        self.reap()
        if self.target.check_alive() is not None:
            self.target.reconfigure(self.settings)

    def pids(self) -> dict[int, str]:
        found = self.target.processes()
        self.known.update(found)
        return found

    def reap(self) -> None:
        """Reap server processes that ended: this process is their subreaper
        (see `soak`), and an unreaped postmaster would look alive to the
        target's stale-lock check for 10 s."""
        for pid in list(self.known):
            try:
                gone, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                gone = pid  # not ours, or already reaped
            if gone:
                self.known.discard(pid)

    def backends(self) -> list[int]:
        return sorted(pid for pid, role in self.pids().items() if role == "backend")

    def resume_all(self) -> None:
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def restart(self, mode: str) -> str:
        pid = self.target.postmaster_pid()
        if mode == "immediate" and pid is not None:
            os.kill(pid, signal.SIGQUIT)  # PostgreSQL's immediate shutdown
            self.wait_gone([pid], 10)
        self.target.reconfigure(self.settings)  # restart = "always": a fast stop when still up
        return f"restart ({mode})"

    def kill_server(self) -> str:
        pid = self.target.postmaster_pid()
        if pid is None:
            return "kill-server: no postmaster"
        children = list(self.pids())
        os.kill(pid, signal.SIGKILL)
        left = self.wait_gone([c for c in children if c != pid], 2.0)
        for c in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(c, signal.SIGKILL)
        self.wait_gone([pid, *left], 5.0)
        self.target.reconfigure(self.settings)
        return f"kill-server: SIGKILL postmaster {pid}; {len(left)} children killed after 2 s; restarted"

    def wait_gone(self, pids: list[int], seconds: float) -> list[int]:
        """Wait until `pids` have exited (and are reaped); returns those left."""
        deadline = time.monotonic() + seconds
        while True:
            self.reap()
            left = [p for p in pids if Path(f"/proc/{p}").exists()]
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.02)


def apply_fault(server: Server, plan: Plan, go: threading.Event, done: threading.Event) -> str:
    """Wait for the moment, apply the plan's fault, undo a stall. Returns what was done."""
    if plan.fault == "none":
        return "none"
    if not go.wait(30):
        return "the child never said go"
    if done.wait(plan.at_s):
        return f"{plan.fault}: the run ended before {plan.at_s} s"
    if plan.fault == "kill-server":
        return server.kill_server()
    if plan.fault == "restart":
        return server.restart(plan.restart_mode)
    if plan.fault == "stall-server":
        victims = sorted(server.pids())
    else:
        backends = server.backends()
        if not backends:
            return f"{plan.fault}: no backend at {plan.at_s} s"
        victims = [backends[int(plan.victim_draw * len(backends))]]
    sig = {"kill-backend": signal.SIGKILL, "terminate-backend": signal.SIGTERM}.get(plan.fault, signal.SIGSTOP)
    for pid in victims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    if sig != signal.SIGSTOP:
        return f"{plan.fault}: {sig.name} to {victims}"
    try:
        time.sleep(plan.stall_s)
    finally:
        for pid in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    return f"{plan.fault}: SIGSTOP {len(victims)} processes for {plan.stall_s} s"


# ------------------------------------------------------------------ one run


def diagnose(pid: int) -> str:
    """What a hung child is waiting for: each thread's kernel wait channel
    and state, and its io_uring instances' fdinfo (SqHead/CqHead, the poll list)."""
    lines = []
    for task in sorted(Path(f"/proc/{pid}/task").glob("*")):
        with contextlib.suppress(OSError):
            comm = (task / "comm").read_text().strip()
            wchan = (task / "wchan").read_text().strip()
            state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
            lines.append(f"thread {task.name} {comm}: state {state}, wchan {wchan}")
            with contextlib.suppress(OSError):
                lines.append("  " + (task / "stack").read_text().replace("\n", "\n  "))
    for fd in sorted(Path(f"/proc/{pid}/fd").glob("*")):
        with contextlib.suppress(OSError):
            if "io_uring" in os.readlink(fd):
                lines.append(f"fd {fd.name} (io_uring):\n" + Path(f"/proc/{pid}/fdinfo/{fd.name}").read_text())
    return "\n".join(lines)


def run_once(server: Server, round_: int, io: str, plan: Plan, args: argparse.Namespace) -> tuple[Outcome, str]:
    """One run; returns its outcome and its full record (kept for a failure)."""
    outcome = Outcome(round=round_, io=io, plan=plan)
    server.ensure_up()
    with server.connect() as conn:
        conn.execute("TRUNCATE pgbench_history")
    log_from = server.target.log_path.stat().st_size
    spec = {"conninfo": server.conninfo(), "clients": args.clients, "threads": args.threads, "pin": args.pin,
            "follow": args.follow, "protocol": plan.protocol, "duration": args.duration, "seed": plan.seed, "io": io}
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", json.dumps(spec)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    lines: list[str] = []
    go, done = threading.Event(), threading.Event()
    go_at: list[float] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.strip() == "go" and not go.is_set():
                go_at.append(time.monotonic())
                go.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    notes: list[str] = []

    def fault() -> None:
        try:
            notes.append(apply_fault(server, plan, go, done))
        except Exception as exc:  # recorded with the run; the soak goes on
            notes.append(f"{plan.fault} failed: {exc!r}")

    faulter = threading.Thread(target=fault, daemon=True)
    faulter.start()
    bound = args.duration + END_GRACE_S + HANG_MARGIN_S
    diagnosis = ""
    if not go.wait(60):
        diagnosis = "the child did not start within 60 s"
    try:
        deadline = (go_at[0] if go_at else time.monotonic()) + bound
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        outcome.hung = True
        diagnosis = diagnose(proc.pid)
    finally:
        if proc.poll() is None:  # a hang, or Ctrl-C: the child never outlives its run
            proc.kill()
            proc.wait()
    outcome.seconds = round(time.monotonic() - go_at[0], 3) if go_at else 0.0
    done.set()
    reader.join(10)
    if proc.stdout is not None:
        proc.stdout.close()
    faulter.join()
    outcome.fault_note = notes[0] if notes else ""
    server.resume_all()
    server.ensure_up()
    with server.connect() as conn:
        outcome.history_rows = int(conn.execute("SELECT count(*) FROM pgbench_history").fetchone()[0])
    results = [json.loads(line) for line in lines if line.startswith("{")]
    outcome.result = results[-1] if results else {"outcome": "no-output", "message": f"exit {proc.returncode}"}
    if outcome.hung:
        outcome.verdict = f"hang: no result within {bound} s of go"
    else:
        outcome.verdict = check_counts(outcome.result, outcome.history_rows)
    outcome.ok = not outcome.verdict
    with server.target.log_path.open("rb") as f:
        f.seek(log_from)
        server_log = f.read().decode(errors="replace")
    record = (
        f"round {round_} io {io} seed {args.seed}\nplan {json.dumps(asdict(plan))}\n"
        f"fault: {outcome.fault_note}\nverdict: {outcome.verdict or 'ok'}\n"
        f"seconds from go: {outcome.seconds}\nhistory rows: {outcome.history_rows}\n"
        f"--- child output (exit {proc.returncode})\n{''.join(lines)}"
        f"--- diagnosis\n{diagnosis}\n--- server log of the run\n{server_log}"
    )
    return outcome, record


# ------------------------------------------------------------------ the soak


def soak(args: argparse.Namespace, say: Any = print) -> list[Outcome]:
    rng = random.Random(args.seed)
    if args.out is None:
        args.out = tempfile.mkdtemp(prefix="perflab-soak-out-", dir="/tmp")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    say(f"soak: seed {args.seed}, {args.runs} runs per io method ({', '.join(args.io)}), "
        f"{args.duration} s each, {args.clients} clients on {args.threads} threads "
        f"(pin {args.pin}, follow {args.follow}); "
        f"hang bound {args.duration + END_GRACE_S + HANG_MARGIN_S} s; failures in {out_dir}")
    # Become the subreaper of the server pg_ctl daemonizes, so that a killed
    # postmaster is reaped here at once (PID 1 in a container may never reap).
    import ctypes

    PR_SET_CHILD_SUBREAPER = 36
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    work = Path(tempfile.mkdtemp(prefix="perflab-soak-", dir="/tmp"))
    work.chmod(0o755)
    server = Server(work)
    outcomes: list[Outcome] = []
    try:
        server.start()
        from perflab import _engine

        _engine.tpcb_load(server.endpoint.wire_conninfo(APPLICATION), scale=1)
        for round_ in range(args.runs):
            plan = draw_plan(rng, args.duration, args.long_stall_share, tuple(args.faults))
            for io in rng.sample(list(args.io), len(args.io)):
                outcome, record = run_once(server, round_, io, plan, args)
                outcomes.append(outcome)
                with (out_dir / "runs.jsonl").open("a") as f:
                    f.write(json.dumps(asdict(outcome)) + "\n")
                r = outcome.result
                line = (f"{round_:4d} {io:5s} {plan.fault:17s} at {plan.at_s:5.2f}s {plan.protocol:8s} "
                        f"{outcome.seconds:6.2f}s committed {r.get('transactions', '-')} "
                        f"lost {r.get('lost_clients', '-')} history {outcome.history_rows}")
                if not outcome.ok:
                    path = out_dir / f"failed-{round_:04d}-{io}.log"
                    path.write_text(record)
                    line += f"  FAILED: {outcome.verdict} -> {path}"
                say(line)
    finally:
        server.stop()
        server.reap()  # what is left in `known` are our own children
        server.wait_gone(list(server.known), 10)
        # Not a subreaper after the soak (pytest runs other servers afterwards).
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        shutil.rmtree(work, ignore_errors=True)
    return outcomes


def by_fault(outcomes: list[Outcome], ios: list[str]) -> list[str]:
    """Per fault and io method: runs, runs where the fault landed inside the
    run, lost clients, and commits in doubt (server rows - driver count)."""
    lines = ["| fault | " + " | ".join(f"{io}: runs / hit / lost clients / in doubt" for io in ios) + " |",
             "| --- |" + " ---: |" * len(ios)]
    for fault in FAULTS:
        cells = []
        for io in ios:
            mine = [o for o in outcomes if o.io == io and o.plan.fault == fault]
            hit = sum(not any(w in o.fault_note for w in ("ended before", "no backend", "never said go"))
                      for o in mine)
            lost = sum(int(o.result.get("lost_clients", 0)) for o in mine)
            doubt = sum((o.history_rows or 0) - int(o.result.get("transactions", 0)) for o in mine
                        if o.result.get("outcome") == "done")
            cells.append(f"{len(mine)} / {hit} / {lost} / {doubt}")
        lines.append(f"| {fault} | " + " | ".join(cells) + " |")
    return lines


def load_outcomes(path: Path) -> list[Outcome]:
    """A finished soak's runs.jsonl, back as outcomes (for --report)."""
    outcomes = []
    for line in path.read_text().splitlines():
        raw = json.loads(line)
        raw["plan"] = Plan(**raw["plan"])
        outcomes.append(Outcome(**raw))
    return outcomes


def moves(outcome: Outcome) -> int:
    """How many times the run's clients moved to another driver thread (its
    `follow` event's count; 0 when they did not follow)."""
    return follow_moves((kind, message) for _, kind, message in outcome.result.get("events", [])) or 0


def summary(outcomes: list[Outcome], ios: list[str]) -> list[str]:
    lines = ["| io | runs | hangs | miscounts | other failures | committed | lost clients | in doubt | max s "
             "| runs with moves (moves) |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for io in ios:
        mine = [o for o in outcomes if o.io == io]
        hangs = sum(o.hung for o in mine)
        miscounts = sum(o.verdict.startswith(("lost", "miscount", "no run")) for o in mine)
        other = sum(not o.ok for o in mine) - hangs - miscounts
        committed = sum(int(o.result.get("transactions", 0)) for o in mine)
        lost = sum(int(o.result.get("lost_clients", 0)) for o in mine)
        doubt = sum((o.history_rows or 0) - int(o.result.get("transactions", 0)) for o in mine
                    if o.result.get("outcome") == "done")
        longest = max((o.seconds for o in mine), default=0.0)
        moved = [moves(o) for o in mine]
        lines.append(f"| {io} | {len(mine)} | {hangs} | {miscounts} | {other} | {committed} | {lost} | "
                     f"{doubt} | {longest:.1f} | {sum(m > 0 for m in moved)} ({sum(moved)}) |")
    return lines


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=200, help="rounds; each runs once per io method")
    p.add_argument("--seed", type=int, default=None, help="default: a new one, printed")
    p.add_argument("--io", nargs="+", default=["epoll", "uring"], choices=["epoll", "uring"])
    p.add_argument("--duration", type=float, default=1.0)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--pin", default="off", choices=["auto", "on", "off"],
                   help="the driver threads' pin (off: as before it existed; on: each thread on a CPU of its own, "
                        "the path read-only runs take by default)")
    p.add_argument("--follow", action="store_true",
                   help="clients move to the pinned thread on their backend's CPU (the harness's follow; with "
                        "--pin on, a run of 3 s or more, since a move waits for two samples a second apart)")
    p.add_argument("--long-stall-share", type=float, default=0.1,
                   help="share of stalls that last past the end of the run and its grace")
    p.add_argument("--out", default=None, help="where failing runs' records go (default: a new /tmp dir)")
    p.add_argument("--faults", nargs="+", default=list(FAULTS), choices=FAULTS,
                   help="draw only these faults (to study one)")
    p.add_argument("--report", default=None, metavar="RUNS_JSONL",
                   help="print the tables of a finished soak's runs.jsonl instead of running one")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.seed is None:
        args.seed = random.SystemRandom().getrandbits(32)
    return args


def main() -> int:
    args = parse_args()
    if args.report:
        outcomes = load_outcomes(Path(args.report))
        args.io = sorted({o.io for o in outcomes})
    else:
        outcomes = soak(args)
        print(f"\nseed {args.seed}; records in {args.out}")
    print("\n".join(summary(outcomes, args.io)))
    print()
    print("\n".join(by_fault(outcomes, args.io)))
    failed = [o for o in outcomes if not o.ok]
    return 1 if failed else 0


if __name__ == "__main__":
    if "--child" in sys.argv:
        sys.exit(child(json.loads(sys.argv[sys.argv.index("--child") + 1])))
    run_main(main)
