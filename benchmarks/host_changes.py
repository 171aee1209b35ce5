"""What perflab's host changes cost, and how fast a killed perflab's are undone.

    sudo .venv/bin/python benchmarks/host_changes.py [--repeat 5] [--types ext4 xfs btrfs ext2 tmpfs]
        [--size 2GB] [--json out.json]

Needs root (it writes /proc/sys, makes cgroups, loop devices and mounts, each
named perflab-bench-*, and undoes every one of them, also when interrupted).
Per step, the median and range over --repeat tries:

- a [host] knob applied and restored (vm.dirty_background_ratio, transparent
  huge pages, 64 huge pages);
- a server cgroup made with a cpuset, quota and memory limit, and removed;
- a scratch filesystem of each type made (sparse file, loop device, mkfs,
  mount), remounted as a resume does (no mkfs), unmounted, discarded;
- the dead man's switch: a child makes one of each (a sysctl, THP, huge pages,
  a cgroup with a process inside, an ext4 scratch filesystem) and is
  SIGKILLed; the time until the host is as it was, as the guardian restores it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from _common import run_main  # noqa: E402
from perflab.hostctl import knobs  # noqa: E402
from perflab.hostctl.cgroups import ResourceSettings, ServerCgroup  # noqa: E402
from perflab.hostctl.mounts import mount_entry  # noqa: E402
from perflab.hostctl.scratchfs import FsSettings, ScratchFs, loop_devices_of  # noqa: E402

SYSCTL = Path("/proc/sys/vm/dirty_background_ratio")
THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")
NR_HUGEPAGES = Path("/proc/sys/vm/nr_hugepages")


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def summary(values: list[float], unit: float = 1e3, label: str = "ms") -> str:
    return (f"{statistics.median(values) * unit:8.1f} {label} "
            f"({min(values) * unit:.1f}-{max(values) * unit:.1f}, n={len(values)})")


def bench_knobs(repeat: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    state = knobs.HostState()
    original = SYSCTL.read_text().strip()
    level = "3" if original != "3" else "4"
    cases = {
        "sysctl vm.dirty_background_ratio": knobs.knob_files(knobs.HostSettings(
            sysctl={"vm.dirty_background_ratio": int(level)})),
        "transparent_hugepage never": knobs.knob_files(knobs.HostSettings(transparent_hugepage="never")),
        "hugepages 64": knobs.knob_files(knobs.HostSettings(hugepages=64)),
    }
    try:
        for name, files in cases.items():
            [(key, values)] = files.items()
            for _ in range(repeat):
                out.setdefault(f"{name}: apply", []).append(
                    timed(lambda k=key, v=values: state.apply(k, v)))
                out.setdefault(f"{name}: restore", []).append(timed(lambda k=key: state.restore(k)))
    finally:
        state.restore_all()
    return out


def bench_cgroup(repeat: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    settings = ResourceSettings(cpus="0", cpu_quota=1.0, memory=2**30)
    for i in range(repeat):
        cgroup = ServerCgroup(f"perflab-bench-{os.getpid()}-{i}", settings)
        try:
            out.setdefault("cgroup (cpuset, quota, memory): create", []).append(timed(cgroup.create))
            out.setdefault("cgroup: remove", []).append(timed(lambda c=cgroup: c.remove(kill=True)))
        finally:
            cgroup.remove(kill=True)
    return out


def bench_fs(repeat: int, types: list[str], size: int, base: Path) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for fstype in types:
        for i in range(repeat):
            settings = FsSettings.model_validate({"type": fstype, "size": size, "mount_options": "noatime"})
            fs = ScratchFs(f"perflab-bench-{fstype}-{i}", settings, base / f"perflab-bench-mnt-{fstype}-{i}",
                           base / f"perflab-bench-{fstype}-{i}.img")
            fs.mountpoint.mkdir()
            try:
                out.setdefault(f"{fstype} {size >> 20} MB: make and mount", []).append(timed(fs.mount))
                out.setdefault(f"{fstype}: unmount", []).append(timed(fs.unmount))
                if fstype != "tmpfs":
                    out.setdefault(f"{fstype}: mount again (resume, no mkfs)", []).append(timed(fs.mount))
                out.setdefault(f"{fstype}: discard", []).append(timed(fs.discard))
            finally:
                fs.discard()
    return out


CHILD = textwrap.dedent("""
    import os, signal, subprocess, sys
    from pathlib import Path
    from perflab.hostctl import knobs
    from perflab.hostctl.cgroups import ResourceSettings, ServerCgroup
    from perflab.hostctl.scratchfs import FsSettings, ScratchFs
    base = Path(sys.argv[1])
    state = knobs.HostState()
    settings = knobs.HostSettings(sysctl={"vm.dirty_background_ratio": int(sys.argv[2])},
                                  transparent_hugepage="never", hugepages=64)
    for key, files in knobs.knob_files(settings).items():
        state.apply(key, files)
    cgroup = ServerCgroup("perflab-bench-kill", ResourceSettings(cpus="0", memory=2**30))
    cgroup.create()
    subprocess.Popen(cgroup.wrap(["sleep", "60"]))
    (base / "perflab-bench-mnt").mkdir()
    ScratchFs("perflab-bench-kill", FsSettings(type="ext4", size=256 << 20), base / "perflab-bench-mnt",
              base / "perflab-bench-kill.img").mount()
    print("ready", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def host_back(before: dict[str, str], base: Path) -> bool:
    now = {"sysctl": SYSCTL.read_text().strip(), "thp": THP.read_text(), "hugepages": NR_HUGEPAGES.read_text()}
    cgroups = subprocess.run(["find", "/sys/fs/cgroup", "-maxdepth", "8", "-type", "d", "-name", "perflab-bench-kill"],
                             capture_output=True, text=True).stdout.strip()
    return (now == before and not cgroups and mount_entry(base / "perflab-bench-mnt") is None
            and not loop_devices_of(base / "perflab-bench-kill.img"))


def bench_sigkill(repeat: int, base: Path) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    python = sys.executable
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "python")}
    for i in range(repeat):
        before = {"sysctl": SYSCTL.read_text().strip(), "thp": THP.read_text(), "hugepages": NR_HUGEPAGES.read_text()}
        work = base / f"kill-{i}"
        work.mkdir()
        level = "3" if before["sysctl"] != "3" else "4"
        proc = subprocess.run([python, "-c", CHILD, str(work), level], capture_output=True, text=True, env=env,
                              timeout=120)
        killed = time.perf_counter()
        if "ready" not in proc.stdout:
            raise SystemExit(f"the child failed: {proc.stderr[-2000:]}")
        while not host_back(before, work):
            if time.perf_counter() - killed > 30:
                raise SystemExit("the host was not put back within 30 s")
            time.sleep(0.01)
        out.setdefault("SIGKILL -> host as it was (guardian)", []).append(time.perf_counter() - killed)
        (work / "perflab-bench-kill.img").unlink(missing_ok=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--types", nargs="+", default=["ext4", "xfs", "btrfs", "ext2", "tmpfs"])
    parser.add_argument("--size", default="2GB")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("host_changes: needs root (it changes the host, and undoes it)", file=sys.stderr)
        return 2
    from perflab.units import parse_size_bytes

    results: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="perflab-bench-", dir="/var/tmp") as tmp:
        base = Path(tmp)
        for part in (lambda: bench_knobs(args.repeat), lambda: bench_cgroup(args.repeat),
                     lambda: bench_fs(args.repeat, args.types, parse_size_bytes(args.size), base),
                     lambda: bench_sigkill(args.repeat, base)):
            found = part()
            for name, values in found.items():
                print(f"{name:55s} {summary(values)}", flush=True)
            results |= found
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    run_main(main)
