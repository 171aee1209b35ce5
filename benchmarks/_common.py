"""What every benchmark script shares: the cores it may use, a peer tool
run as a child with its CPU, a range of ratios, and a main that always tears
down what it started."""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NoReturn

from perflab.cache import cache_root
from perflab.model import Event


def cores() -> int:
    return len(os.sched_getaffinity(0))


def mariadb_cpu_s(target: Any) -> float:
    """A managed MariaDB's CPU seconds so far: its one process, every thread
    (`target` a MariadbTarget)."""
    from perflab import proc

    return sum(proc.cpu_seconds(pid) or 0.0 for pid in target.processes())


def processes_cpu_s(pids: Iterable[int]) -> dict[int, float]:
    """utime + stime of each live process among `pids` (seconds), from /proc/PID/stat."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[pid] = (int(fields[11]) + int(fields[12])) / tick
    return out


def cross_cpu_interrupts() -> int | None:
    """Rescheduling and function-call interrupts (RES + CAL) over all CPUs
    so far, from /proc/interrupts: the inter-processor interrupts a wake-up
    on another CPU costs (a VM exit each on a virtual machine). None where
    the file has neither line."""
    try:
        lines = Path("/proc/interrupts").read_text().splitlines()
    except OSError:
        return None
    ncpu = len(lines[0].split()) if lines else 0
    total, seen = 0, False
    for line in lines[1:]:
        name, _, rest = line.partition(":")
        if name.strip() in ("RES", "CAL"):
            total += sum(int(v) for v in rest.split()[:ncpu] if v.isdigit())
            seen = True
    return total if seen else None


def machine_cpu() -> tuple[float, float] | None:
    """(busy, idle) CPU seconds of the whole machine so far, summed over its
    CPUs, from the `cpu` line of /proc/stat: idle and iowait are idle, every
    other column (user, nice, system, irq, softirq, steal) busy. guest time
    is inside user already. None where the file cannot be read."""
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    if first[0] != "cpu" or len(first) < 9:
        return None
    ticks = [int(v) for v in first[1:9]]  # user nice system idle iowait irq softirq steal
    tick = os.sysconf("SC_CLK_TCK")
    idle = ticks[3] + ticks[4]
    return (sum(ticks) - idle) / tick, idle / tick


def machine_figures(before: tuple[float, float] | None, transactions: float) -> dict[str, float | None]:
    """The whole machine's busy CPU per transaction (µs: driver, server,
    kernel and anything else) and its idle share since `before`
    (machine_cpu()). Both None without /proc/stat."""
    after = machine_cpu()
    if before is None or after is None or transactions <= 0:
        return {"machine_per_tx_us": None, "idle_share": None}
    busy, idle = after[0] - before[0], after[1] - before[1]
    return {"machine_per_tx_us": busy / transactions * 1e6,
            "idle_share": idle / (busy + idle) if busy + idle > 0 else None}


def driver_factors(peer: dict[str, Any], ours: dict[str, Any], driver_us: float | None = None) -> dict[str, float] | None:
    """A TPS ratio ours/peer taken apart (each run's cpu_per_tx_us,
    machine_per_tx_us, idle_share, tps). On a machine whose CPUs the driver
    and the server share, tps = busy cores / machine CPU per transaction,
    and that CPU is the driver's plus everything else's (the server's, the
    kernel's for it: "server" here). So the ratio is the product of:

    - driver: peer's machine CPU per transaction over what it would be with
      our driver's CPU and the peer run's server cost, i.e. the ratio the
      drivers' own CPU allows at an equal server cost per transaction;
    - server: how much less (above 1) or more the server spent per
      transaction in our run than in the peer's, with our driver's CPU (the
      scheduler's placement, mostly: cross-CPU wake-ups cost the server too);
    - busy: how much more of the machine was busy in our run.

    `driver_us` replaces our driver's CPU per transaction (a floor's): the
    driver factor is then the most any driver as cheap can gain at the peer
    run's server cost. None without /proc/stat figures."""
    if any(r.get(k) is None for r in (peer, ours) for k in ("machine_per_tx_us", "idle_share")):
        return None
    mine = ours["cpu_per_tx_us"] if driver_us is None else driver_us
    peer_server = peer["machine_per_tx_us"] - peer["cpu_per_tx_us"]
    our_server = ours["machine_per_tx_us"] - ours["cpu_per_tx_us"]
    return {"driver": peer["machine_per_tx_us"] / (peer_server + mine),
            "server": (peer_server + mine) / (our_server + mine),
            "busy": (1 - ours["idle_share"]) / (1 - peer["idle_share"])}


def factor_table(groups: list[tuple[str, list[dict[str, Any]]]], peer: str, ours: str = "perflab") -> None:
    """Print each group's TPS ratio ours/peer taken apart (driver_factors),
    per pair: `groups` are (a row label of "|"-separated cells, its rows),
    each row holding one run of each side under `peer` and `ours`. Groups
    without /proc/stat figures are left out."""
    print(f"\nthe TPS ratio taken apart, per pair (machine CPU per transaction = driver + server, from /proc/stat; "
          f"driver: the ratio the drivers' own CPU gives at {peer}'s server cost; server: the server's cost per "
          f"transaction in {ours}'s run against {peer}'s; busy: the machine's busy share, {ours}'s over {peer}'s; "
          "their product is the ratio, on a machine that driver and server share)")
    print("| group | tps ratio (pairs) | driver (pairs) | server (pairs) | busy (pairs) "
          f"| idle share, {peer} / {ours} (max) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for label, group in groups:
        factors = [driver_factors(r[peer], r[ours]) for r in group]
        known = [f for f in factors if f is not None]
        if not group or len(known) < len(group):
            continue
        print(f"| {label} | {mean_spread([r[ours]['tps'] / r[peer]['tps'] for r in group], 3)} "
              + "".join(f"| {mean_spread([f[k] for f in known], 3)} " for k in ("driver", "server", "busy"))
              + f"| {max(r[peer]['idle_share'] for r in group):.3f} / {max(r[ours]['idle_share'] for r in group):.3f} |")


def floor_factor(group: list[dict[str, Any]], peer: str) -> str:
    """driver_factors' driver factor with each pair's floor CPU per
    transaction (r["floor"]["cpu_per_req_us"]) in place of perflab's: the
    most a driver as cheap as the floor gains over `peer` at the peer run's
    server cost. Mean (pairs), or "-" without /proc/stat figures."""
    factors = [driver_factors(r[peer], r["perflab"], r["floor"]["cpu_per_req_us"]) for r in group]
    known = [f["driver"] for f in factors if f is not None]
    return mean_spread(known, 3) if known and len(known) == len(group) else "-"


def pinned(events: Iterable[Event]) -> bool:
    """Whether a run's driver threads were pinned, from its `pin` event."""
    return any(e.kind == "pin" and e.message.startswith("driver threads pinned") for e in events)


def follow_moves(events: Iterable[tuple[str, str]]) -> int | None:
    """How many times a run's clients moved to another driver thread, from
    its `follow` event among (kind, message) pairs; None when they did not
    follow."""
    for kind, message in events:
        found = re.search(r"(\d+) moves", message) if kind == "follow" else None
        if found:
            return int(found.group(1))
    return None


def driver_floor() -> str:
    """Build crates/engine/examples/driver_floor.rs (the cheapest epoll and
    io_uring drivers: what the kernel's side of a round trip costs) and
    return its path."""
    root = Path(__file__).resolve().parent.parent
    target = Path(os.environ.get("CARGO_TARGET_DIR", root / "target"))
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "perflab-engine", "--example", "driver_floor"],
                   cwd=root, check=True, env={**os.environ, "CARGO_TARGET_DIR": str(target)})
    return str(target / "release" / "examples" / "driver_floor")


def run_floor(args: list[str]) -> dict[str, float]:
    """One driver_floor run: its JSON line, plus cpu_per_req_us and the
    user and system shares of it (its own getrusage over its measured
    window, connecting excluded)."""
    code, text, error, _usage = run_child(args)
    if code != 0:
        raise RuntimeError(f"driver_floor failed: {(text + error)[-2000:]}")
    r: dict[str, float] = json.loads(text.strip().splitlines()[-1])
    n = max(1.0, r["requests"])
    return {**r, "req_per_s": r["requests"] / r["seconds"], "cpu_per_req_us": r["cpu_s"] / n * 1e6,
            "user_per_req_us": r["user_s"] / n * 1e6, "system_per_req_us": r["system_s"] / n * 1e6,
            "cs_per_req": r["switches"] / n}


def run_child(args: list[str], cwd: Path | None = None) -> tuple[int, str, str, resource.struct_rusage]:
    """Run a peer tool (pgbench, wrk, ...) to its end: (exit code, stdout,
    stderr, its rusage from os.wait4). No other child may run meanwhile."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(args, stdout=out, stderr=err, text=True, cwd=cwd)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return child.returncode, out.read(), err.read(), usage


# A run whose io_uring enters per transaction exceed this multiple of the
# lowest run's of its group is counted in the slow mode (issue 33's check;
# the slow mode makes 3-7 times the fast mode's, benchmarks/README.md).
SLOW_MODE_RATIO = 1.3


def modes(enters: list[float], fast_level: float | None = None) -> tuple[int, int]:
    """(fast, slow) runs by io_uring enters per transaction: a run above
    SLOW_MODE_RATIO x `fast_level` (default: the group's lowest) is in the slow
    mode (issue 33's check)."""
    level = min(enters) if fast_level is None else fast_level
    slow = sum(1 for e in enters if e > SLOW_MODE_RATIO * level)
    return len(enters) - slow, slow


def spread(values: list[float], digits: int = 2) -> str:
    return f"{min(values):.{digits}f}-{max(values):.{digits}f}"


def mean_spread(values: list[float], digits: int = 2) -> str:
    """A table cell: the mean, and the range in brackets."""
    return f"{statistics.mean(values):.{digits}f} ({spread(values, digits)})"


def pair_table(rows: list[dict[str, Any]], scripts: list[str], key: str, counts: list[int],
               sides: tuple[str, str], over: tuple[str, str],
               labels: tuple[str, str]) -> list[tuple[str, int, list[float], list[float]]]:
    """Print the markdown table of alternating pairs of two drivers: per
    script and count (`key`: "threads", "clients"), each side's mean TPS, the
    TPS ratio over[0]/over[1] (the mean of the per-pair ratios and their
    range), each side's mean CPU per transaction (cpu_per_tx_us) and its
    ratio. `rows` hold "script", `key` and one dict per side; `sides` is the
    columns' order, `labels` the two ratio columns' names. Returns each
    table row's (script, count, TPS ratios, CPU ratios)."""
    a, b = sides
    print(f"| script | {key} | {a} tps | {b} tps | {labels[0]} (pairs) | {a} us/tx | {b} us/tx | {labels[1]} (pairs) |")
    print("| --- | ---: | ---: | ---: | --- | ---: | ---: | --- |")
    out = []
    for script, n in ((s, c) for s in scripts for c in counts):
        group = [r for r in rows if r["script"] == script and r[key] == n]
        tps = [r[over[0]]["tps"] / r[over[1]]["tps"] for r in group]
        cpu = [r[over[0]]["cpu_per_tx_us"] / r[over[1]]["cpu_per_tx_us"] for r in group]

        def mean(side: str, field: str, group: list[dict[str, Any]] = group) -> float:
            return statistics.mean(r[side][field] for r in group)

        print(f"| {script} | {n} | {mean(a, 'tps'):.0f} | {mean(b, 'tps'):.0f} "
              f"| {statistics.mean(tps):.3f} ({spread(tps, 3)}) | {mean(a, 'cpu_per_tx_us'):.1f} "
              f"| {mean(b, 'cpu_per_tx_us'):.1f} | {statistics.mean(cpu):.3f} ({spread(cpu, 3)}) |")
        out.append((script, n, tps, cpu))
    return out


def run_main(main: Callable[[], int]) -> NoReturn:
    """Run `main` with SIGINT and SIGTERM raising Interrupted, so its
    `finally` blocks stop every server it started; exit 130 when interrupted."""
    from perflab.runner import Interrupted, interrupt_on_signals

    with interrupt_on_signals():
        try:
            sys.exit(main())
        except Interrupted:
            sys.exit(130)


def go_tool(name: str, version: str, build: Callable[[Path], None]) -> Path:
    """A peer tool written in Go, built once into perflab's cache as
    tools/<name>-<version>/<name>: `build(home)` builds it there (exits with
    the reason when it cannot)."""
    home = cache_root() / "tools" / f"{name}-{version}"
    binary = home / name
    if binary.is_file():
        return binary
    if shutil.which("go") is None:
        raise SystemExit(f"needs the Go toolchain on PATH to build {name} (https://go.dev/dl/)")
    home.mkdir(parents=True, exist_ok=True)
    print(f"building {name} {version} into {home} (once; minutes) ...", flush=True)
    build(home)
    if not binary.is_file():
        raise SystemExit(f"building {name} {version} left no {binary}")
    return binary
