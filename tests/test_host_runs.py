"""[host], [target.resources], [target.storage] *_fs and driver.cpus through
real experiments: applied before the runs that need them, recorded, and the
machine put back (at the end, and after a SIGKILL of perflab, and of perflab
and its guardian both, by the next perflab start).

Every test here changes the real host (it needs root): each puts back what it
changed itself too, in a `finally`, so a failing test leaves the machine as it
found it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import cli_command, postmasters_under, start_run_until
from perflab import proc
from perflab.hostctl.cgroups import cgroup_of
from perflab.hostctl.mounts import mount_entry
from perflab.hostctl.scratchfs import loop_devices_of
from perflab.store import STORE_NAME, Store
from perflab.targets.postgres import PostgresSettings, PostgresTarget, server_cgroup_name

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="host changes need root")

# The guardian's undo after a SIGKILL, waited for: its promise (within 5 s)
# is a quiet machine's figure, measured by benchmarks/host_changes.py.
GONE_WITHIN_S = 60.0
SYSCTL = Path("/proc/sys/vm/dirty_background_ratio")
THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")
NR_HUGEPAGES = Path("/proc/sys/vm/nr_hugepages")


def _thp() -> str:
    text = THP.read_text()
    return text[text.index("[") + 1:text.index("]")]


def _snapshot() -> dict[str, str]:
    return {"sysctl": SYSCTL.read_text().strip(), "thp": _thp(), "hugepages": NR_HUGEPAGES.read_text().strip()}


def _cgroups_named(name: str) -> list[Path]:
    """The cgroup directories of that name, in any hierarchy (under perflab's
    own cgroup on v1)."""
    found = subprocess.run(["find", "/sys/fs/cgroup", "-maxdepth", "8", "-type", "d", "-name", name],
                           capture_output=True, text=True).stdout.split()
    return [Path(d) for d in found]


def _server_cgroup_names(directory: Path) -> set[str]:
    """The names of the cgroups of the managed servers whose data directory
    lies under `directory` (a test's own): from the records of running
    servers and from the clusters themselves. Another experiment's are never
    among them."""
    data_dirs = {p.parent for p in directory.rglob("PG_VERSION") if (p.parent / "global").is_dir()}
    for record in directory.rglob("perflab-target.json"):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            data_dirs.add(Path(json.loads(record.read_text())["data_dir"]))
    return {server_cgroup_name(d) for d in data_dirs}


def _own_cgroups(names: set[str]) -> list[Path]:
    return [d for name in sorted(names) for d in _cgroups_named(name)]


class HostAsFound(dict[str, str]):
    """The host's knobs before the test (a dict, compared with `_snapshot()`),
    and the values the test sets them to (`sets`), so that the fixture puts a
    knob back only when the test changed it and it still holds that value."""

    def __init__(self, before: dict[str, str]) -> None:
        super().__init__(before)
        self.set_to: dict[str, set[str]] = {}

    def sets(self, **values: object) -> None:
        for knob, value in values.items():
            self.set_to.setdefault(knob, set()).add(str(value))


# Events a run stores, "host.<knob>: old -> new": which of _snapshot()'s keys.
EVENT_KNOBS = {"host.transparent_hugepage": "thp", f"host.sysctl.{'.'.join(SYSCTL.parts[3:])}": "sysctl",
               "host.hugepages": "hugepages"}
KNOB_FILES = {"sysctl": SYSCTL, "thp": THP, "hugepages": NR_HUGEPAGES}


def _knobs_set_by_runs(directory: Path) -> dict[str, set[str]]:
    """The values the runs stored under `directory` set the knobs to (their events)."""
    out: dict[str, set[str]] = {}
    for db in directory.rglob(STORE_NAME):
        with contextlib.suppress(Exception):
            for event in Store.open(db.parent).events():
                key, sep, change = event["message"].partition(": ")
                if event["kind"] == "host" and sep and key in EVENT_KNOBS and " -> " in change:
                    out.setdefault(EVENT_KNOBS[key], set()).add(change.split(" -> ", 1)[1].split(" (")[0].strip())
    return out


def put_back(found: HostAsFound, workdir: Path) -> None:
    """What a test (failing) left, put back, and only that: what its perflab
    runs journaled (undone when the perflab is dead, its guardian too), its
    own servers and their cgroups (by their data directory under the test's
    `workdir`), and each knob it changed, only while that still holds a
    value the test set. Another experiment's servers, cgroups and settings
    are never touched."""
    from perflab.guardian import recover_orphans
    from perflab.hostctl.cgroups import undo_cgroup

    for copy in workdir.rglob("host-journal.json"):
        recover_orphans(extra=copy.parent)  # acts only when that perflab is dead
    cgroups = _server_cgroup_names(workdir)
    for pid in postmasters_under(workdir):  # the test's own servers
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    undo_cgroup({"dirs": [str(d) for d in _own_cgroups(cgroups)]})
    set_to = {knob: set(values) for knob, values in found.set_to.items()}
    for knob, values in _knobs_set_by_runs(workdir).items():
        set_to.setdefault(knob, set()).update(values)
    now = _snapshot()
    for knob, values in set_to.items():
        if now[knob] != found[knob] and now[knob] in values:
            KNOB_FILES[knob].write_text(found[knob])


@pytest.fixture
def host_as_found(workdir: Path) -> Iterator[HostAsFound]:
    """The host's knobs before the test; afterwards, what the test left is put back (`put_back`)."""
    found = HostAsFound(_snapshot())
    yield found
    put_back(found, workdir)


def _write(workdir: Path, text: str) -> Path:
    path = workdir / "e.toml"
    path.write_text(textwrap.dedent(text))
    return path


def _run(run_cli, experiment: Path, out: Path, *more: str, check: bool = True):
    return run_cli("run", experiment, "--out", out, "--quiet", "--no-report", *more, check=check)


def test_host_settings_are_factors_recorded_per_run_and_restored(workdir: Path, run_cli, host_as_found) -> None:
    original = host_as_found["sysctl"]
    levels = [v for v in (3, 4, 5) if str(v) != original][:2]
    experiment = _write(workdir, f"""
        [experiment]
        name = "host-factors"
        [host]
        transparent_hugepage = "never"
        [target]
        kind = "duckdb"
        [workload]
        kind = "sql"
        statements = ["SELECT 1"]
        duration = "0.3s"
        [factors]
        "host.sysctl.vm.dirty_background_ratio" = {json.dumps(levels)}
        [collect]
    """)
    out = workdir / "out"
    proc = _run(run_cli, experiment, out)
    assert "host settings restored" in proc.stdout + proc.stderr
    assert _snapshot() == host_as_found  # put back at the end
    store = Store.open(out)
    events = [e for e in store.events() if e["kind"] == "host"]
    by_run: dict[int, list[str]] = {}
    for e in events:
        by_run.setdefault(e["run_id"], []).append(e["message"])
    # run 1 sets both knobs from their originals; run 2 changes only the sysctl
    assert f"host.sysctl.vm.dirty_background_ratio: {original} -> {levels[0]}" in by_run[1]
    assert f"host.transparent_hugepage: {host_as_found['thp']} -> never" in by_run[1]
    assert by_run[2] == [f"host.sysctl.vm.dirty_background_ratio: {original} -> {levels[1]}"]


def test_huge_pages_auto_are_sized_from_the_server_and_really_used(workdir: Path, run_cli, host_as_found) -> None:
    experiment = _write(workdir, """
        [experiment]
        name = "hugepages"
        [host]
        hugepages = "auto"
        [target]
        kind = "postgres"
        [target.settings]
        shared_buffers = "64MB"
        huge_pages = "on"
        [workload]
        kind = "sql"
        statements = ["SELECT 1"]
        duration = "0.5s"
        [collect]
    """)
    out = workdir / "out"
    _run(run_cli, experiment, out)
    store = Store.open(out)
    metrics = {m["name"]: m["value"] for m in store.metrics(1)}
    [run] = store.runs()
    assert run["status"] == "done", run
    # 64MB of buffers and the rest of shared memory: more than 32 pages of 2 MB, held by the server
    assert metrics["host.hugepages_total"] > 32
    assert metrics["host.hugepages_rsvd"] > 0  # reserved by the server's mapping, as the kernel says
    assert metrics["host.hugepages_in_use"] > 32
    # the server's own pages, from its processes' smaps: what the host's count holds of its
    assert 32 < metrics["server.hugepages_mapped"] <= metrics["host.hugepages_in_use"]
    messages = [e["message"] for e in store.events(1) if e["kind"] == "host"]
    assert any("shared_memory_size_in_huge_pages" in m for m in messages), messages
    assert _snapshot() == host_as_found


# A process that maps and touches N huge pages, then waits (MAP_SHARED |
# MAP_ANONYMOUS | MAP_HUGETLB: 0x01 | 0x20 | 0x40000 on Linux).
_HOLD_HUGE_PAGES = """
import mmap, sys
n = int(sys.argv[1]); size = 2 * 1024 * 1024
area = mmap.mmap(-1, n * size, flags=0x01 | 0x20 | 0x40000)
for i in range(n):
    area[i * size] = 1
print("holding", flush=True)
sys.stdin.read()
"""


def test_huge_pages_auto_leave_another_process_its_pages(workdir: Path, run_cli, host_as_found) -> None:
    """Another process holds huge pages: "auto" sizes the pool to the
    server's need plus what is held, so both keep their memory."""
    held = 8
    before = NR_HUGEPAGES.read_text().strip()
    holder = None
    try:
        # The test's own host change (not perflab's), put back in the finally.
        NR_HUGEPAGES.write_text(str(int(before) + held))
        holder = subprocess.Popen([sys.executable, "-c", _HOLD_HUGE_PAGES, str(held)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        assert proc.hugetlb_pages(holder.pid) == held
        experiment = _write(workdir, """
            [experiment]
            name = "hugepages-beside"
            [host]
            hugepages = "auto"
            [target]
            kind = "postgres"
            [target.settings]
            shared_buffers = "32MB"
            huge_pages = "on"
            [workload]
            kind = "sql"
            statements = ["SELECT 1"]
            duration = "0.3s"
            [collect]
        """)
        out = workdir / "out"
        _run(run_cli, experiment, out)
        store = Store.open(out)
        [run] = store.runs()
        assert run["status"] == "done", run
        messages = [e["message"] for e in store.events(1) if e["kind"] == "host"]
        assert any("held by other processes" in m for m in messages), messages
        assert holder.poll() is None  # the holder kept its pages throughout
        # the host's count takes in the holder's pages; the server's own does not
        metrics = {m["name"]: m["value"] for m in store.metrics(1)}
        assert 0 < metrics["server.hugepages_mapped"] <= metrics["host.hugepages_in_use"] - held
    finally:
        if holder is not None:
            holder.kill()
            holder.communicate()
        NR_HUGEPAGES.write_text(before)


def test_every_server_process_runs_in_its_cgroup_with_its_limits(workdir: Path, host_as_found) -> None:
    import psycopg

    settings = PostgresSettings.model_validate({
        "kind": "postgres", "settings": {"shared_buffers": "32MB"},
        "resources": {"cpus": "0", "memory": "512MB", "cpu_quota": 0.8}})
    target = PostgresTarget(settings, workdir / "t")
    try:
        endpoint = target.provision()
        postmaster = target.postmaster_pid()
        assert postmaster is not None
        with psycopg.connect(endpoint.conninfo) as conn:
            backend = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
            for pid in (postmaster, backend, *target.processes()):
                groups = cgroup_of(pid)
                assert groups["cpuset"].endswith("/" + target.cgroup.name), (pid, groups)
                assert groups["memory"].endswith("/" + target.cgroup.name), (pid, groups)
                assert os.sched_getaffinity(pid) == {0}
            assert set(target.cgroup.pids()) >= {postmaster, backend}
        described = target.describe()["resources"]
        assert described["controllers"]["memory"]["limits"]
        usage = target.resource_usage()
        assert usage["memory_current_bytes"] > 0
        # New limits: the same cluster restarts in a new cgroup (its charges start from nothing).
        assert target.reconfigure(settings.model_copy(update={"resources": settings.resources.model_copy(
            update={"cpus": "1"})}))
        postmaster = target.postmaster_pid()
        assert os.sched_getaffinity(postmaster) == {1}
        assert cgroup_of(postmaster)["cpuset"].endswith("/" + target.cgroup.name)
    finally:
        target.teardown()
        target.discard_data()
    assert _cgroups_named(target.cgroup.name if target.cgroup else server_cgroup_name(target.data_dir)) == []


def test_data_and_wal_on_scratch_filesystems_are_made_mounted_and_removed(workdir: Path, host_as_found) -> None:
    import psycopg

    settings = PostgresSettings.model_validate({
        "kind": "postgres", "settings": {"shared_buffers": "32MB"},
        "storage": {"data_fs": {"type": "ext4", "size": "512MB", "mount_options": "noatime"},
                    "wal_fs": {"type": "tmpfs", "size": "256MB"}}})
    target = PostgresTarget(settings, workdir / "t")
    mounts: list[Path] = []
    backing: list[Path] = []
    try:
        endpoint = target.provision()
        assert endpoint.fresh
        paths = target.data_paths()
        data_mount = mount_entry(target.mounted["data"].mountpoint)
        wal_mount = mount_entry(target.mounted["wal"].mountpoint)
        assert data_mount is not None and data_mount["type"] == "ext4" and "noatime" in data_mount["options"]
        assert wal_mount is not None and wal_mount["type"] == "tmpfs"
        assert paths["data"].is_relative_to(target.mounted["data"].mountpoint)
        assert paths["wal"].is_relative_to(target.mounted["wal"].mountpoint)
        mounts = [fs.mountpoint for fs in target.mounted.values()]
        backing = [target.mounted["data"].backing_file]
        with psycopg.connect(endpoint.conninfo, autocommit=True) as conn:
            conn.execute("CREATE TABLE kept AS SELECT 1 AS x")
        described = target.describe()["scratch_fs"]
        assert described["data"]["loop_backed"] and not described["wal"]["loop_backed"]
        target.teardown()
        assert [mount_entry(m) for m in mounts] == [None, None]
        assert loop_devices_of(backing[0]) == []
        assert backing[0].exists()  # the data stays for a resume
    finally:
        target.teardown()
        target.discard_data()
    assert not backing[0].exists()
    assert [mount_entry(m) for m in mounts] == [None, None]


SIGKILL_EXPERIMENT = """
    [experiment]
    name = "host-sigkill"
    [host]
    transparent_hugepage = "never"
    hugepages = 4
    sysctl = {{ "vm.dirty_background_ratio" = {ratio} }}
    [target]
    kind = "postgres"
    [target.settings]
    shared_buffers = "32MB"
    [target.resources]
    cpus = "0"
    memory = "1GB"
    [target.storage.data_fs]
    type = "ext4"
    size = "512MB"
    [workload]
    kind = "sql"
    statements = ["SELECT 1"]
    duration = "120s"
    [collect]
"""


def _running_server_cgroups(out: Path) -> list[Path]:
    """The cgroups of the servers the run in `out` has started (from their records)."""
    names = set()
    for record in out.glob("targets/*/perflab-target.json"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            names.add(server_cgroup_name(Path(json.loads(record.read_text())["data_dir"])))
    return _own_cgroups(names)


def _start_and_wait_for_server(workdir: Path, host: HostAsFound, env: dict[str, str]) -> tuple[
        subprocess.Popen[bytes], Path, list[Path]]:
    ratio = 3 if host["sysctl"] != "3" else 4
    host.sets(thp="never", hugepages=4, sysctl=ratio)
    experiment = _write(workdir, SIGKILL_EXPERIMENT.format(ratio=ratio))
    out = workdir / "out"
    run = start_run_until(experiment, out, lambda: _running_server_cgroups(out), env=env)
    time.sleep(0.5)  # mid-run
    assert _snapshot() != host  # the knobs are set
    return run, out, _running_server_cgroups(out)


def _host_is_back(host: dict[str, str], out: Path, cgroups: list[Path]) -> list[str]:
    """What the run in `out` changed and has not put back (its own objects only)."""
    wrong = [f"{k}: {v} (was {host[k]})" for k, v in _snapshot().items() if v != host[k]]
    wrong += [f"cgroup {d}" for d in cgroups if d.exists()]
    wrong += [f"mount {m[1]}" for m in (line.split() for line in Path("/proc/mounts").read_text().splitlines())
              if m[1].startswith(str(out))]
    wrong += [f"loop device of {f}" for f in out.glob("targets/*/perflab-*.img") if loop_devices_of(f)]
    wrong += [f"server {pid}" for pid in postmasters_under(out)]
    return wrong


def test_sigkill_mid_run_leaves_knobs_cgroups_mounts_and_loop_devices_as_they_were(
        workdir: Path, host_as_found) -> None:
    run, out, cgroups = _start_and_wait_for_server(workdir, host_as_found, dict(os.environ))
    try:
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)
        deadline = time.monotonic() + GONE_WITHIN_S
        while _host_is_back(host_as_found, out, cgroups) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _host_is_back(host_as_found, out, cgroups) == []
    finally:
        if run.poll() is None:
            run.kill()


def test_when_the_guardian_dies_too_the_next_perflab_start_puts_the_host_back(
        workdir: Path, run_cli, host_as_found) -> None:
    state = workdir / "state"
    env = {**os.environ, "PERFLAB_STATE_DIR": str(state)}
    run, out, cgroups = _start_and_wait_for_server(workdir, host_as_found, env)
    try:
        [journal_file] = state.glob("journal-*.json")
        guardian = json.loads(journal_file.read_text())["guardian"]
        os.kill(guardian, signal.SIGKILL)
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)
        time.sleep(1)
        assert _snapshot() != host_as_found  # nobody put it back yet
        assert (out / "host-journal.json").exists()
        # The next perflab start (here a check of another file) finds the journal.
        other = workdir / "other"
        other.mkdir()
        check = subprocess.run(cli_command("check", _write(other, """
            [experiment]
            name = "x"
            [target]
            kind = "duckdb"
            [workload]
            kind = "sql"
            statements = ["SELECT 1"]
        """)), capture_output=True, text=True, timeout=120, env=env)
        assert check.returncode == 0, check.stderr
        assert "left by a killed perflab" in check.stderr and str(out) in check.stderr
        assert _host_is_back(host_as_found, out, cgroups) == []
        assert not (out / "host-journal.json").exists()
    finally:
        if run.poll() is None:
            run.kill()
        for pid in postmasters_under(out):  # only if the test failed
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize(("section", "expected"), [
    ('[host]\nsysctl = { "vm.no_such_setting" = 1 }', "host.sysctl"),
    ('[host]\nsysctl = { "fs.file-nr" = 1 }', "host.sysctl"),
    ('[host]\ncpu_governor = "performance"', "host.cpu_governor"),
    ('[host]\nio_scheduler = { device = "nosuchdisk", scheduler = "none" }', "host.io_scheduler"),
    ('[host]\nhugepages = "auto"', "host.hugepages"),
])
def test_a_knob_the_machine_lacks_or_cannot_change_is_a_clear_error(
        workdir: Path, run_cli, section: str, expected: str) -> None:
    experiment = workdir / "e.toml"
    experiment.write_text(f'[experiment]\nname = "x"\n{section}\n[target]\nkind = "duckdb"\n'
                          '[workload]\nkind = "sql"\nstatements = ["SELECT 1"]\n')
    proc = run_cli("check", experiment, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert expected in proc.stderr and "Traceback" not in proc.stderr
    if "cpu_governor" in section and not Path("/sys/devices/system/cpu/cpu0/cpufreq").exists():
        assert "cpufreq" in proc.stderr


def test_an_external_server_cannot_be_limited(workdir: Path, run_cli) -> None:
    experiment = workdir / "e.toml"
    experiment.write_text('[experiment]\nname = "x"\n[target]\nkind = "postgres"\ndsn = "host=/tmp dbname=x"\n'
                          '[target.resources]\nmemory = "1GB"\n'
                          '[workload]\nkind = "sql"\nstatements = ["SELECT 1"]\n')
    proc = run_cli("check", experiment, check=False)
    assert proc.returncode == 2
    assert "target.resources" in proc.stderr and "cannot be limited" in proc.stderr


def test_driver_cpus_pin_perflab_and_warn_when_they_overlap_the_server(workdir: Path, run_cli) -> None:
    experiment = _write(workdir, """
        [experiment]
        name = "pinned"
        [driver]
        cpus = "1"
        [target]
        kind = "postgres"
        [target.resources]
        cpus = "1"
        [workload]
        kind = "sql"
        statements = ["SELECT 1"]
        duration = "0.3s"
        [collect]
        process = { interval = "0.1s" }
    """)
    out = workdir / "out"
    proc = _run(run_cli, experiment, out)
    assert "overlaps the server's target.resources.cpus" in proc.stderr
    [run] = Store.open(out).runs()
    assert run["status"] == "done"


def test_a_cluster_split_over_a_kept_and_an_emptied_filesystem_starts_again(workdir: Path, host_as_found) -> None:
    """Data on a tmpfs (emptied at teardown), WAL on a loop-backed ext4 (kept):
    the next start must not meet the old cluster's WAL (initdb refuses a
    non-empty WAL directory), and the other way round, kept data must not
    start without its WAL."""
    for data_type, wal_type in (("tmpfs", "ext4"), ("ext4", "tmpfs")):
        settings = PostgresSettings.model_validate({
            "kind": "postgres", "settings": {"shared_buffers": "32MB"},
            "storage": {"data_fs": {"type": data_type, "size": "256MB"},
                        "wal_fs": {"type": wal_type, "size": "256MB"}}})
        target = PostgresTarget(settings, workdir / f"t-{data_type}")
        try:
            assert target.provision().fresh
            target.teardown()
            again = PostgresTarget(settings, workdir / f"t-{data_type}")
            try:
                assert again.provision().fresh  # a new cluster, to be loaded again
                assert again.check_alive() is None
            finally:
                again.teardown()
        finally:
            target.teardown()
            target.discard_data()
