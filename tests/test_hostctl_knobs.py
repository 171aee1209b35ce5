"""[host] knobs on the real /proc and /sys: applied, read back, restored, and
restored by the guardian after a SIGKILL. Every test that changes the host
goes through the `host` fixture, which puts back and checks every file a test
here may touch, even when the test fails."""

from __future__ import annotations

import json
import os
import pwd
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from perflab.errors import UserError
from perflab.guardian import UNDO
from perflab.hostctl.knobs import (
    NEEDS_SERVER_RESTART,
    NR_HUGEPAGES,
    THP_ENABLED,
    HostSettings,
    HostState,
    drop_page_cache,
    host_problems,
    hugepage_meminfo,
    knob_files,
    read_value,
    sysctl_path,
    undo_host_file,
)

# serial: measures the machine (timings, rates, other CPU) or changes it for everyone; runs after the parallel tests, alone
pytestmark = pytest.mark.serial

# The guardian's undo after a SIGKILL, waited for: its promise (within 5 s)
# is a quiet machine's figure, measured by benchmarks/host_changes.py.
GONE_WITHIN_S = 60.0
LOOP = "loop7"  # an unused loop device: never the disk the tests run on
SCHEDULER = Path(f"/sys/block/{LOOP}/queue/scheduler")
READAHEAD = Path(f"/sys/block/{LOOP}/queue/read_ahead_kb")
CPUFREQ = Path("/sys/devices/system/cpu/cpu0/cpufreq")

# Every file a test here may change.
TOUCHED = [sysctl_path(k) for k in ("vm.dirty_background_ratio", "vm.dirty_background_bytes",
                                    "net.ipv4.tcp_rmem", "kernel.printk", "vm.swappiness")]
TOUCHED += [THP_ENABLED, NR_HUGEPAGES, SCHEDULER, READAHEAD]

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="changing kernel settings needs root")


def _snapshot() -> dict[Path, str]:
    return {p: read_value(p) for p in TOUCHED if p.exists()}


def _put_back(values: dict[Path, str]) -> None:
    """Write `values` by hand, not through the code under test; zeros first
    (of vm.dirty_background_bytes/_ratio the kernel keeps the one written last)."""
    for path, value in sorted(values.items(), key=lambda item: item[1] != "0"):
        try:
            path.write_text(value + "\n")
        except OSError:
            continue


@pytest.fixture
def host() -> Iterator[HostState]:
    """A HostState whose changes are undone after the test, pass or fail; then
    every file a test may touch must read as before (or the test fails, after
    the file has been put back by hand)."""
    before = _snapshot()
    state = HostState()
    try:
        yield state
    finally:
        try:
            state.restore_all()
        finally:
            wrong = {p: (v, read_value(p)) for p, v in before.items() if read_value(p) != v}
            _put_back({p: v for p, (v, _) in wrong.items()})
            still = {p: (v, read_value(p)) for p, v in before.items() if read_value(p) != v}
            assert not wrong, f"not restored: {wrong} (put back by the test, still wrong: {still})"


def _other(current: str, *candidates: str) -> str:
    """A value to set that differs from the current one."""
    return next(c for c in candidates if c != current)


def _problems(raw: dict[str, Any]) -> dict[str, str]:
    return dict(host_problems(HostSettings.model_validate(raw)))


# -- shapes ---------------------------------------------------------------------------------------


def test_settings_defaults_leave_the_host_alone() -> None:
    settings = HostSettings()
    assert knob_files(settings) == {} and host_problems(settings) == []
    full = HostSettings.model_validate({
        "hugepages": 4, "transparent_hugepage": "never", "drop_caches": True,
        "sysctl": {"vm.dirty_ratio": 5, "net.ipv4.tcp_rmem": "4096 131072 6291456", "kernel.x-y_z": 0.5},
        "io_scheduler": {"device": "vda", "scheduler": "mq-deadline"},
        "readahead_kb": {"device": "vda", "kb": 4096}, "cpu_governor": "performance"})
    assert full.readahead_kb is not None and full.readahead_kb.kb == 4096
    assert HostSettings.model_validate({"hugepages": "auto"}).hugepages == "auto"


@pytest.mark.parametrize(("raw", "says"), [
    ({"hugepages": -1}, "greater than or equal to 0"),
    ({"hugepages": "lots"}, "auto"),
    ({"hugepages": True}, "hugepages"),
    ({"transparent_hugepage": "sometimes"}, "madvise"),
    ({"sysctl": {"vm..dirty_ratio": 5}}, "no empty part"),
    ({"sysctl": {"vm/dirty_ratio": 5}}, 'no "/"'),
    ({"sysctl": {"../../etc/passwd": 5}}, 'no "/"'),
    ({"sysctl": {".vm": 5}}, "no empty part"),
    ({"sysctl": {"vm.drop_caches": 3}}, "drop_caches = true"),
    ({"sysctl": {"vm.swappiness": True}}, "sysctl"),
    ({"sysctl": {"kernel.core_pattern": "a\nb"}}, "one line"),
    ({"sysctl": {"kernel.core_pattern": "  "}}, "non-empty"),
    ({"sysctl": {"vm.dirty_ratio": 5, "vm.dirty_bytes": 2**26}}, "one of them"),
    ({"hugepages": 4, "sysctl": {"vm.nr_hugepages": 4}}, "hugepages alone"),
    ({"io_scheduler": {"device": "../vda", "scheduler": "none"}}, "block device name"),
    ({"io_scheduler": {"device": "vda"}}, "scheduler"),
    ({"readahead_kb": {"device": "vda", "kb": -1}}, "greater than or equal to 0"),
    ({"readahead_kb": {"device": "vda", "kb": "4MB"}}, "integer"),
    ({"cpu_governor": "perf ormance"}, "cpufreq governor"),
    ({"drop_caches": "yes"}, "bool"),
    ({"hugepage": 4}, "hugepage"),
])
def test_settings_refuse_bad_shapes(raw: dict[str, Any], says: str) -> None:
    with pytest.raises(ValidationError) as caught:
        HostSettings.model_validate(raw)
    assert says in str(caught.value)


def test_knob_files_are_keyed_as_the_user_writes_them() -> None:
    settings = HostSettings.model_validate({
        "hugepages": "auto", "transparent_hugepage": "never",
        "sysctl": {"vm.dirty_ratio": 5, "net.ipv4.tcp_rmem": "4096 131072 6291456"},
        "io_scheduler": {"device": LOOP, "scheduler": "kyber"}, "readahead_kb": {"device": LOOP, "kb": 512},
        "drop_caches": True})
    with pytest.raises(ValueError, match="auto"):
        knob_files(settings)
    files = knob_files(settings, hugepages=12)
    assert files == {
        "host.hugepages": [(NR_HUGEPAGES, "12")],
        "host.transparent_hugepage": [(THP_ENABLED, "never")],
        "host.sysctl.vm.dirty_ratio": [(Path("/proc/sys/vm/dirty_ratio"), "5")],
        "host.sysctl.net.ipv4.tcp_rmem": [(Path("/proc/sys/net/ipv4/tcp_rmem"), "4096 131072 6291456")],
        "host.io_scheduler": [(SCHEDULER, "kyber")],
        "host.readahead_kb": [(READAHEAD, "512")],
    }
    assert NEEDS_SERVER_RESTART == {"host.hugepages", "host.transparent_hugepage"}
    assert knob_files(HostSettings(hugepages=3))["host.hugepages"] == [(NR_HUGEPAGES, "3")]
    governor = knob_files(HostSettings(cpu_governor="performance"))["host.cpu_governor"]
    assert governor and all(p.name == "scaling_governor" for p, _ in governor)


def test_undo_is_registered_idempotent_and_quiet_about_missing_files() -> None:
    assert UNDO["host-file"] is undo_host_file
    undo_host_file({"path": "/proc/sys/vm/perflab_no_such_setting", "value": "1"})
    undo_host_file({"path": "/sys/block/perflab-no-such-device/queue/scheduler", "value": "none"})
    if os.geteuid() == 0:
        path = sysctl_path("vm.swappiness")
        value = read_value(path)
        for _ in range(2):
            undo_host_file({"path": str(path), "value": value})
        assert read_value(path) == value


# -- applying and restoring -----------------------------------------------------------------------


@needs_root
def test_a_sysctl_is_applied_read_back_and_restored(host: HostState) -> None:
    path = sysctl_path("vm.dirty_background_ratio")
    original = read_value(path)
    new = _other(original, "5", "7")
    files = knob_files(HostSettings(sysctl={"vm.dirty_background_ratio": int(new)}))
    key = "host.sysctl.vm.dirty_background_ratio"
    assert host.apply(key, files[key]) == (original, new)
    assert read_value(path) == new == host.current(key)
    assert host.applied() == [key]
    assert host.restore(key) == (new, original)
    assert read_value(path) == original and host.applied() == []
    assert host.restore(key) == ("", "")  # nothing left to restore


@needs_root
def test_an_exclusive_pair_is_restored_whole(host: HostState) -> None:
    """Writing vm.dirty_background_bytes zeroes vm.dirty_background_ratio, and
    *_bytes refuses 0: restoring it alone would fail and leave the bytes."""
    ratio, nbytes = sysctl_path("vm.dirty_background_ratio"), sysctl_path("vm.dirty_background_bytes")
    before = (read_value(ratio), read_value(nbytes))
    new = _other(before[1], str(64 * 2**20), str(32 * 2**20))
    host.apply("host.sysctl.vm.dirty_background_bytes", [(nbytes, new)])
    assert (read_value(ratio), read_value(nbytes)) == ("0", new)
    host.restore("host.sysctl.vm.dirty_background_bytes")
    assert (read_value(ratio), read_value(nbytes)) == before


@needs_root
def test_a_multi_value_sysctl_compares_whitespace_normalised(host: HostState) -> None:
    path = sysctl_path("net.ipv4.tcp_rmem")
    raw_original = path.read_text()
    assert "\t" in raw_original  # the kernel separates the values with tabs
    original = read_value(path)
    new = _other(original, "4096 131072 6291456", "4096 87380 6291456")
    old, got = host.apply("host.sysctl.net.ipv4.tcp_rmem", [(path, new.replace(" ", "   "))])
    assert (old, got) == (original, new)
    host.restore_all()
    assert path.read_text() == raw_original


@needs_root
def test_a_value_the_kernel_keeps_otherwise_is_refused_and_restored(host: HostState) -> None:
    """kernel.printk holds four numbers; writing one changes the first only,
    so it does not read back as written."""
    path = sysctl_path("kernel.printk")
    original = read_value(path)
    first = _other(original.split()[0], "5", "6")
    with pytest.raises(UserError) as caught:
        host.apply("host.sysctl.kernel.printk", [(path, first)])
    message = str(caught.value)
    assert f"wrote '{first}'" in message and "read back" in message and f"original '{original}' is restored" in message
    assert read_value(path) == original and host.applied() == []


@needs_root
def test_a_value_the_kernel_refuses_leaves_the_setting_as_it_was(host: HostState) -> None:
    path = sysctl_path("vm.swappiness")
    original = read_value(path)
    with pytest.raises(UserError, match="the kernel refused 'lots' for /proc/sys/vm/swappiness"):
        host.apply("host.sysctl.vm.swappiness", [(path, "lots")])
    assert read_value(path) == original and host.applied() == []


@needs_root
def test_reapplying_keeps_the_value_from_before_perflab(host: HostState) -> None:
    path = sysctl_path("vm.dirty_background_ratio")
    original = read_value(path)
    first, second = [v for v in ("5", "6", "7") if v != original][:2]
    key = "host.sysctl.vm.dirty_background_ratio"
    host.apply(key, [(path, first)])
    assert host.apply(key, [(path, second)]) == (original, second)
    assert host.original(key) == original and read_value(path) == second
    # through another HostState too: the journal holds one original per file
    other = HostState()
    assert other.apply(key, [(path, first)]) == (original, first)
    assert other.restore(key) == (first, original)
    assert read_value(path) == original


@needs_root
def test_transparent_huge_pages(host: HostState) -> None:
    if not THP_ENABLED.exists():
        pytest.skip(f"this kernel has no transparent huge pages ({THP_ENABLED})")
    original = read_value(THP_ENABLED)
    new = _other(original, "never", "madvise")
    files = knob_files(HostSettings.model_validate({"transparent_hugepage": new}))
    assert host.apply("host.transparent_hugepage", files["host.transparent_hugepage"]) == (original, new)
    assert f"[{new}]" in THP_ENABLED.read_text()
    assert host.restore_all() == [("host.transparent_hugepage", new, original)]
    assert f"[{original}]" in THP_ENABLED.read_text()


@needs_root
def test_huge_pages_are_allocated_counted_and_freed(host: HostState) -> None:
    if not NR_HUGEPAGES.exists():
        pytest.skip(f"this kernel has no huge pages ({NR_HUGEPAGES})")
    original = int(read_value(NR_HUGEPAGES))
    before = hugepage_meminfo()
    assert set(before) == {"hugepages_total", "hugepages_free", "hugepages_rsvd", "hugepages_surp",
                           "hugepagesize_kb"}
    assert before["hugepagesize_kb"] > 0
    asked = original + 4
    files = knob_files(HostSettings(hugepages=asked))
    assert host.apply("host.hugepages", files["host.hugepages"]) == (str(original), str(asked))
    during = hugepage_meminfo()
    assert during["hugepages_total"] == asked and during["hugepages_free"] >= 4
    host.restore("host.hugepages")
    assert int(read_value(NR_HUGEPAGES)) == original
    assert hugepage_meminfo()["hugepages_total"] == before["hugepages_total"]


@pytest.mark.skipif(not os.environ.get("PERFLAB_TEST_HUGEPAGE_SHORTFALL"),
                    reason="takes nearly all of the machine's memory for a moment, which may hurt whatever "
                    "else runs here; set PERFLAB_TEST_HUGEPAGE_SHORTFALL=1 to run it")
@needs_root
def test_fewer_huge_pages_than_asked_is_an_error_and_restored(host: HostState) -> None:
    original = read_value(NR_HUGEPAGES)
    info = hugepage_meminfo()
    total_kb = int(next(line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines()
                        if line.startswith("MemTotal:")))
    asked = total_kb // info["hugepagesize_kb"] - 1  # more than the kernel can ever give
    with pytest.raises(UserError, match=rf"asked for {asked} huge pages of \d+ kB, the kernel allocated \d+") as caught:
        host.apply("host.hugepages", [(NR_HUGEPAGES, str(asked))])
    assert caught.value.hint is not None and "free memory or ask fewer" in caught.value.hint
    assert read_value(NR_HUGEPAGES) == original


@needs_root
def test_scheduler_and_readahead_of_a_loop_device(host: HostState) -> None:
    if not SCHEDULER.exists():
        pytest.skip(f"no {LOOP} here ({SCHEDULER})")
    sched, ra = read_value(SCHEDULER), read_value(READAHEAD)
    choices = SCHEDULER.read_text().replace("[", " ").replace("]", " ").split()
    new_sched = _other(sched, *choices)
    new_ra = _other(ra, "4096", "512")
    settings = HostSettings.model_validate({"io_scheduler": {"device": LOOP, "scheduler": new_sched},
                                            "readahead_kb": {"device": LOOP, "kb": int(new_ra)}})
    assert host_problems(settings) == []
    for key, files in knob_files(settings).items():
        host.apply(key, files)
    assert f"[{new_sched}]" in SCHEDULER.read_text() and read_value(READAHEAD) == new_ra
    assert host.restore_all() == [("host.readahead_kb", new_ra, ra), ("host.io_scheduler", new_sched, sched)]
    assert f"[{sched}]" in SCHEDULER.read_text() and read_value(READAHEAD) == ra


@needs_root
def test_drop_page_cache_takes_measurable_time() -> None:
    seconds = drop_page_cache()
    assert 0 <= seconds < 60


# -- preflight ------------------------------------------------------------------------------------


def test_problem_missing_sysctl() -> None:
    problems = _problems({"sysctl": {"vm.perflab_no_such_setting": 1, "vm": 1}})
    assert problems["host.sysctl.vm.perflab_no_such_setting"].startswith(
        "no such kernel setting vm.perflab_no_such_setting (/proc/sys/vm/perflab_no_such_setting); "
        "allowed: a key under /proc/sys; fix: ")
    assert "a group of kernel settings" in problems["host.sysctl.vm"]


def test_problem_read_only_and_write_only_sysctls() -> None:
    if os.geteuid() != 0:
        pytest.skip("as another user every setting needs root first")
    problems = _problems({"sysctl": {"fs.file-nr": "1", "vm.compact_memory": 1}, "drop_caches": True})
    assert "is read-only" in problems["host.sysctl.fs.file-nr"]
    assert "is write-only" in problems["host.sysctl.vm.compact_memory"]
    assert "host.drop_caches" not in problems  # written, never restored: write-only is right


def test_problem_missing_device_lists_the_devices() -> None:
    problems = _problems({"io_scheduler": {"device": "perflab-nodev", "scheduler": "none"},
                          "readahead_kb": {"device": "perflab-nodev", "kb": 1}})
    devices = ", ".join(sorted(p.name for p in Path("/sys/block").iterdir()))
    for knob in ("host.io_scheduler", "host.readahead_kb"):
        text = problems[f"{knob}.device"]
        assert text.startswith(f"no such block device 'perflab-nodev' (/sys/block/perflab-nodev); "
                               f"allowed: one of {devices}; fix: ")


def test_problem_scheduler_not_offered_lists_the_choices() -> None:
    if not SCHEDULER.exists():
        pytest.skip(f"no {LOOP} here ({SCHEDULER})")
    problems = _problems({"io_scheduler": {"device": LOOP, "scheduler": "cfq"}})
    choices = ", ".join(SCHEDULER.read_text().replace("[", " ").replace("]", " ").split())
    assert problems["host.io_scheduler.scheduler"].startswith(
        f"got 'cfq'; allowed for {LOOP}: {choices} ({SCHEDULER}); fix: ")


def test_problem_no_cpufreq() -> None:
    if CPUFREQ.exists():
        pytest.skip(f"this machine has cpufreq ({CPUFREQ}); the refusal is for machines without")
    assert _problems({"cpu_governor": "performance"}) == {
        "host.cpu_governor": "this machine has no cpufreq (/sys/devices/system/cpu/cpu0/cpufreq): "
                             "cpu_governor cannot be set here; remove host.cpu_governor"}


def test_problem_huge_pages_beyond_memory() -> None:
    problems = _problems({"hugepages": 2**30})
    assert "allowed: less than this machine's memory" in problems["host.hugepages"]
    if os.geteuid() == 0:
        assert _problems({"hugepages": "auto"}) == {}  # the number is not known yet
    assert "host.hugepages" in dict(host_problems(HostSettings(hugepages="auto"), hugepages=2**30))


@needs_root
def test_no_problems_for_what_this_machine_can_do() -> None:
    raw: dict[str, Any] = {"hugepages": 4, "sysctl": {"vm.dirty_background_ratio": 5}, "drop_caches": True}
    if THP_ENABLED.exists():
        raw["transparent_hugepage"] = "madvise"
    if SCHEDULER.exists():
        raw["io_scheduler"] = {"device": LOOP, "scheduler": "none"}
        raw["readahead_kb"] = {"device": LOOP, "kb": 128}
    assert _problems(raw) == {}


@needs_root
def test_problem_not_root() -> None:
    """host_problems in a child that is `nobody`: every knob needs root."""
    raw: dict[str, Any] = {"hugepages": 4, "sysctl": {"vm.dirty_background_ratio": 5}, "drop_caches": True,
                           "io_scheduler": {"device": LOOP, "scheduler": "none"},
                           "readahead_kb": {"device": LOOP, "kb": 128}}
    if THP_ENABLED.exists():
        raw["transparent_hugepage"] = "madvise"
    nobody = pwd.getpwnam("nobody")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: become nobody, report, and leave without atexit
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            found = host_problems(HostSettings.model_validate(raw))
            os.write(write_end, json.dumps(found).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        output = pipe.read()
    os.waitpid(pid, 0)
    problems = dict(json.loads(output))
    expected = {"host.hugepages", "host.sysctl.vm.dirty_background_ratio", "host.drop_caches",
                "host.io_scheduler", "host.readahead_kb"} | ({"host.transparent_hugepage"} if THP_ENABLED.exists() else set())
    assert set(problems) == expected
    for knob, text in problems.items():
        assert "needs root" in text and text.endswith(f"fix: run perflab as root, or remove {knob}"), text


# -- the guardian ---------------------------------------------------------------------------------

APPLY_THEN_DIE = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from perflab.guardian import journal
    from perflab.hostctl.knobs import HostState, THP_ENABLED
    state = HostState()
    ratio = Path("/proc/sys/vm/dirty_background_ratio")
    first, second, thp = sys.argv[1:4]
    state.apply("host.sysctl.vm.dirty_background_ratio", [(ratio, first)])
    state.apply("host.sysctl.vm.dirty_background_ratio", [(ratio, second)])  # the journal keeps the first original
    state.apply("host.transparent_hugepage", [(THP_ENABLED, thp)])
    print(journal().guardian_pid(), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


@needs_root
def test_sigkill_leaves_the_guardian_to_restore_sysctl_and_thp(host: HostState) -> None:
    if not THP_ENABLED.exists():
        pytest.skip(f"this kernel has no transparent huge pages ({THP_ENABLED})")
    ratio = sysctl_path("vm.dirty_background_ratio")
    originals = (read_value(ratio), read_value(THP_ENABLED))
    first, second = [v for v in ("5", "6", "7") if v != originals[0]][:2]
    thp = _other(originals[1], "never", "madvise")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).resolve().parents[1] / "python"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", APPLY_THEN_DIE, first, second, thp], capture_output=True,
                          text=True, timeout=60, env=env)
    killed_at = time.monotonic()
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    guardian = int(proc.stdout)
    while time.monotonic() - killed_at < GONE_WITHIN_S and (
            _alive(guardian) or (read_value(ratio), read_value(THP_ENABLED)) != originals):
        time.sleep(0.05)
    assert (read_value(ratio), read_value(THP_ENABLED)) == originals, "not restored after the SIGKILL"
    assert not _alive(guardian), "the guardian outlived its work"
