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
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import cli_command, postmasters_under, start_run_until
from perflab.hostctl.cgroups import cgroup_of
from perflab.hostctl.scratchfs import loop_devices_of, mount_entry
from perflab.store import Store
from perflab.targets.postgres import PostgresSettings, PostgresTarget

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="host changes need root")

GONE_WITHIN_S = 5.0
SYSCTL = Path("/proc/sys/vm/dirty_background_ratio")
THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")
NR_HUGEPAGES = Path("/proc/sys/vm/nr_hugepages")


def _thp() -> str:
    text = THP.read_text()
    return text[text.index("[") + 1:text.index("]")]


def _snapshot() -> dict[str, str]:
    return {"sysctl": SYSCTL.read_text().strip(), "thp": _thp(), "hugepages": NR_HUGEPAGES.read_text().strip()}


def _perflab_cgroups() -> list[Path]:
    """perflab's server cgroups, wherever they are (under perflab's own cgroup on v1)."""
    found = subprocess.run(["find", "/sys/fs/cgroup", "-maxdepth", "8", "-type", "d", "-name", "perflab-pg-*"],
                           capture_output=True, text=True).stdout.split()
    return [Path(d) for d in found]


@pytest.fixture
def host_as_found() -> Iterator[dict[str, str]]:
    """The host's knobs before the test, put back after it whatever happened."""
    before = _snapshot()
    yield before
    SYSCTL.write_text(before["sysctl"])
    THP.write_text(before["thp"])
    NR_HUGEPAGES.write_text(before["hugepages"])
    for d in _perflab_cgroups():
        for pid in (d / "cgroup.procs").read_text().split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        time.sleep(0.2)
        with contextlib.suppress(OSError):
            d.rmdir()


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
    messages = [e["message"] for e in store.events(1) if e["kind"] == "host"]
    assert any("shared_memory_size_in_huge_pages" in m for m in messages), messages
    assert _snapshot() == host_as_found


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
    assert _perflab_cgroups() == []


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


def _start_and_wait_for_server(workdir: Path, host: dict[str, str], env: dict[str, str]) -> tuple[
        subprocess.Popen[bytes], Path]:
    ratio = 3 if host["sysctl"] != "3" else 4
    experiment = _write(workdir, SIGKILL_EXPERIMENT.format(ratio=ratio))
    out = workdir / "out"
    run = start_run_until(experiment, out, lambda: list(out.glob("targets/*/perflab-target.json"))
                          and _perflab_cgroups(), env=env)
    time.sleep(0.5)  # mid-run
    assert _snapshot() != host  # the knobs are set
    return run, out


def _host_is_back(host: dict[str, str], out: Path) -> list[str]:
    wrong = [f"{k}: {v} (was {host[k]})" for k, v in _snapshot().items() if v != host[k]]
    wrong += [f"cgroup {d}" for d in _perflab_cgroups()]
    wrong += [f"mount {m[1]}" for m in (line.split() for line in Path("/proc/mounts").read_text().splitlines())
              if m[1].startswith(str(out))]
    wrong += [f"loop device of {f}" for f in out.glob("targets/*/perflab-*.img") if loop_devices_of(f)]
    wrong += [f"server {pid}" for pid in postmasters_under(out)]
    return wrong


def test_sigkill_mid_run_leaves_knobs_cgroups_mounts_and_loop_devices_as_they_were(
        workdir: Path, host_as_found) -> None:
    run, out = _start_and_wait_for_server(workdir, host_as_found, dict(os.environ))
    try:
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)
        deadline = time.monotonic() + GONE_WITHIN_S
        while _host_is_back(host_as_found, out) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _host_is_back(host_as_found, out) == []
    finally:
        if run.poll() is None:
            run.kill()


def test_when_the_guardian_dies_too_the_next_perflab_start_puts_the_host_back(
        workdir: Path, run_cli, host_as_found) -> None:
    state = workdir / "state"
    env = {**os.environ, "PERFLAB_STATE_DIR": str(state)}
    run, out = _start_and_wait_for_server(workdir, host_as_found, env)
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
        assert _host_is_back(host_as_found, out) == []
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
