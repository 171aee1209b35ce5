"""The `storage` collector's fio probe against a plain fio run of the same
jobs, on the same layout (issue 49: within 10%).

For each layout perflab makes (hostctl: a local ext4 on a loop device, a
btrfs RAID-0 over two loop devices, sshfs to perflab's own sshd in a
namespace over a 1 ms, 1 Gbit/s link), --pairs pairs alternate (probe then
plain in odd pairs, plain then probe in even ones):

- the probe: `perflab.collectors.storage.run_fio`, what the collector runs
  before a layout's first run;
- plain fio: one `fio JOBFILE --output-format=json` of a job file written
  here from the collector's documented jobs (not from its argument list):
  sequential write of --size in 1 MiB blocks with end_fsync, the sequential
  read of that file with its cache invalidated, random 8 KiB writes with
  end_fsync and 8 KiB writes each followed by fdatasync for --runtime, one
  after the other
  (stonewall), psync, on one file in a fresh directory on the layout.

The table gives each figure's mean over the pairs for both, the ratio
probe/plain per pair (geometric mean and range), and how far plain fio's
own runs of the same job spread (its largest over its smallest): a gap
between the two sides means something only where it is well outside that. Needs root (loop devices, mounts,
namespaces), fio, btrfs-progs, sshfs and openssh-server.

    .venv/bin/python benchmarks/fio_vs_plain.py [--pairs 3] [--size 64MB] [--runtime 3s]
        [--layouts local striped sshfs] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import run_main, spread  # noqa: E402
from perflab.collectors.storage import FIGURES, StorageSettings, _jobs, run_fio  # noqa: E402
from perflab.hostctl.netfs import NetFs  # noqa: E402
from perflab.hostctl.scratchfs import FsSettings, ScratchFs  # noqa: E402
from perflab.hostctl.stripe import StripedFs  # noqa: E402

LAYOUTS = {
    "local": {"type": "ext4", "size": "1GB", "mount_options": "noatime"},
    "striped": {"type": "btrfs", "size": "1GB", "raid": {"level": 0, "devices": 2}},
    "sshfs": {"type": "sshfs", "delay": "1ms", "rate": "1gbit"},
}


def job_file(size: int, runtime_s: int, filename: Path) -> str:
    """The collector's four jobs as a plain fio job file, run one after the other."""
    common = f"ioengine=psync\nfilename={filename}\nsize={size}\nstonewall\n"
    timed = f"time_based\nruntime={runtime_s}s\n"
    return (f"[seq_write]\n{common}rw=write\nbs=1M\nend_fsync=1\n\n"
            f"[seq_read]\n{common}rw=read\nbs=1M\ninvalidate=1\n\n"
            f"[randwrite]\n{common}rw=randwrite\nbs=8k\n{timed}end_fsync=1\n\n"
            f"[fdatasync]\n{common}rw=write\nbs=8k\nfdatasync=1\n{timed}")


def same_options(settings: StorageSettings) -> list[str]:
    """Each job's options where the probe's and the job file's differ, as
    fio itself reads the job file (`fio --showcmd`): [] when they are the same."""
    jobs = Path(tempfile.mkdtemp(prefix="perflab-fio-jobs-")) / "jobs.fio"
    try:
        jobs.write_text(job_file(settings.size, max(1, round(settings.runtime)), Path("/dev/null")))
        shown = subprocess.run(["fio", "--showcmd", str(jobs)], capture_output=True, text=True, check=True).stdout
    finally:
        shutil.rmtree(jobs.parent)
    plain: dict[str, set[str]] = {}
    for arg in shown.split()[1:]:
        if arg.startswith("--name="):
            current = plain.setdefault(arg.split("=", 1)[1], set())
        elif not arg.startswith(("--filename=", "--stonewall")):
            current.add(arg)
    differ = []
    for name, args in _jobs(settings):
        probe = {*args, "--ioengine=psync"}  # run_fio adds the engine, the name, the file and json output
        if probe != plain.get(name):
            differ.append(f"{name}: probe only {sorted(probe - plain.get(name, set()))}, "
                          f"plain only {sorted(plain.get(name, set()) - probe)}")
    return differ


def plain_fio(directory: Path, settings: StorageSettings) -> dict[str, float]:
    work = directory / f"perflab-plainfio-{secrets.token_hex(4)}"
    work.mkdir(mode=0o700)
    try:
        jobs = work / "jobs.fio"
        jobs.write_text(job_file(settings.size, max(1, round(settings.runtime)), work / "plain.dat"))
        proc = subprocess.run(["fio", "--output-format=json", str(jobs)], capture_output=True, text=True,
                              timeout=1200, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise RuntimeError(f"fio failed: {(proc.stderr or proc.stdout).strip()[-300:]}")
        by = {j["jobname"]: j for j in json.loads(proc.stdout[proc.stdout.index("{"):])["jobs"]}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    sync = by["fdatasync"]["sync"]["lat_ns"]
    out = {"seq_write_MBps": by["seq_write"]["write"]["bw_bytes"] / 1e6,
           "seq_read_MBps": by["seq_read"]["read"]["bw_bytes"] / 1e6,
           "randwrite_8k_iops": by["randwrite"]["write"]["iops"],
           "fdatasync_8k_mean_us": sync["mean"] / 1e3}
    p99 = next((v for k, v in (sync.get("percentile") or {}).items() if k.startswith("99.000")), None)
    if p99 is not None:
        out["fdatasync_8k_p99_us"] = p99 / 1e3
    return out


def make_layout(name: str, base: Path, run_as: str) -> ScratchFs:
    settings = FsSettings.model_validate(LAYOUTS[name])
    fs_name = f"perflab-bench-{name}"
    mountpoint = base / f"perflab-{name}-fs"
    images = base / "perflab-images"
    if name == "striped":
        return StripedFs(fs_name, settings, mountpoint, [images / f"{fs_name}-{i}.img" for i in range(2)])
    if name == "sshfs":
        return NetFs(fs_name, settings, mountpoint, base / f"perflab-{name}-export", run_as, base)
    return ScratchFs(fs_name, settings, mountpoint, images / f"{fs_name}.img")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--size", default="64MB")
    parser.add_argument("--runtime", default="3s")
    parser.add_argument("--layouts", nargs="+", default=list(LAYOUTS), choices=list(LAYOUTS))
    parser.add_argument("--user", default="postgres", help="the network filesystem's server's user")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("needs root (loop devices, mounts, namespaces)", file=sys.stderr)
        return 2
    pwd.getpwnam(args.user)
    settings = StorageSettings.model_validate({"size": args.size, "runtime": args.runtime})
    differ = same_options(settings)
    print("options: " + ("; ".join(differ) if differ else "the same in every job (fio --showcmd of the job file "
                         "against the probe's arguments)"), flush=True)
    base = Path(tempfile.mkdtemp(prefix="perflab-fio-bench-", dir="/var/tmp"))
    os.chmod(base, 0o711)  # the sshd (the server's user) passes through to its own directories
    results: dict[str, list[dict[str, Any]]] = {}
    try:
        for name in args.layouts:
            fs = make_layout(name, base, args.user)
            try:
                fs.mount()
                pairs = results.setdefault(name, [])
                for i in range(args.pairs):
                    order = ("probe", "plain") if i % 2 == 0 else ("plain", "probe")
                    pair: dict[str, Any] = {}
                    for side in order:
                        pair[side] = (run_fio if side == "probe" else plain_fio)(fs.mountpoint, settings)
                    pairs.append(pair)
                    print(f"{name} pair {i + 1}: " + json.dumps(pair), file=sys.stderr, flush=True)
            finally:
                fs.discard()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"\nfio probe (perflab) against plain fio, {args.pairs} pairs, size {args.size}, runtime {args.runtime}\n")
    print("| layout | figure | probe | plain fio | probe/plain: geometric mean (range) | plain's own max/min |")
    print("| --- | --- | ---: | ---: | --- | ---: |")
    worst = 0.0
    for name, pairs in results.items():
        for key, label, _unit, _higher in FIGURES:
            got = [(p["probe"][key], p["plain"][key]) for p in pairs if key in p["probe"] and key in p["plain"]]
            got = [(a, b) for a, b in got if a > 0 and b > 0]
            if not got:
                continue
            ratios = [a / b for a, b in got]
            geo = statistics.geometric_mean(ratios)
            worst = max(worst, abs(geo - 1))
            plain = [b for _, b in got]
            print(f"| {name} | {label} | {statistics.mean(a for a, _ in got):.1f} | {statistics.mean(plain):.1f} | "
                  f"{geo:.3f} ({spread(ratios, 3)}) | {max(plain) / min(plain):.2f} |")
    print(f"\nlargest gap of a geometric mean ratio from 1: {worst:.1%}; load average at end {os.getloadavg()[0]:.1f} "
          "(other work on this machine moves every figure)")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    run_main(main)
