"""The managed web servers beside nginx (apache, lighttpd, h2o), each from
Debian's package and started by perflab on 127.0.0.1: every process runs as
run_as (never root), serves the file set with no error, stops, and nothing
is left after a SIGKILL of perflab; a misspelt setting, a port and a missing
binary are refused at check (exit 2) naming the fix; and the server as a
factor gives the study's Table 10 layout, a row per data set and a column
per server. Traffic to 127.0.0.1 only."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import _tempdir, cli_command
from perflab import _engine
from perflab.endpoints import HttpEndpoint
from perflab.section import Figure, Table
from perflab.targets import TARGETS
from perflab.targets.serverproc import server_processes
from perflab.workloads.harness import engine_settings_of

DIRS = 2  # about 10 MB
BINARIES = {"apache": "apache2", "lighttpd": "lighttpd", "h2o": "h2o"}
# (kind, settings): Apache under two of its MPMs, the others as they come
SERVERS = [("apache", {"mpm": "prefork"}), ("apache", {"mpm": "event"}), ("lighttpd", {}),
           ("h2o", {"num_threads": 2})]


def installed(kind: str) -> bool:
    return shutil.which(BINARIES[kind], path=os.environ.get("PATH", "") + ":/usr/sbin") is not None


def needs(kind: str) -> Any:
    return pytest.mark.skipif(not installed(kind), reason=f"{BINARIES[kind]} is not installed "
                              f"(./dev setup installs it: apt-get install {BINARIES[kind]})")


def server_params(servers: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    return [pytest.param(kind, settings, marks=needs(kind),
                         id="-".join([kind, *map(str, settings.values())])) for kind, settings in servers]


@pytest.fixture(scope="module")
def cache() -> Iterator[Path]:
    d = _tempdir("perflab-fileset-cache-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def root_set(cache: Path) -> Path:
    return Path(_engine.fileset_prepare(str(cache), dirs=DIRS, seed=1, jobs=2).root)


def _real_uid(pid: int) -> int:
    """The uid of a live process: real, effective, saved and fs alike (/proc/PID/status)."""
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("Uid:"))
    uids = {int(u) for u in line.split()[1:]}
    assert len(uids) == 1, line  # no way back to another user
    return uids.pop()


def _stat(pid: int) -> list[str] | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else fields


def descendants(pid: int) -> dict[int, str]:
    """The live processes under `pid` (children, theirs, ...), with their start times."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        fields = _stat(int(entry.name))
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: dict[int, str] = {}
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop()
        fields = _stat(child)
        if fields is not None:
            found[child] = fields[19]
            todo += children.get(child, [])
    return found


def alive(processes: dict[int, str]) -> list[int]:
    """Those of `processes` (pid: start time) still alive, the same processes."""
    return [pid for pid, start in processes.items() if (f := _stat(pid)) is not None and f[19] == start]


@pytest.mark.parametrize(("kind", "options"), server_params(SERVERS))
def test_each_server_serves_the_set_as_run_as_with_no_error_and_stops(kind, options, root_set, tmp_path) -> None:
    cls = TARGETS.get(kind)
    target = cls(cls.Settings.model_validate({"kind": kind, "settings": options}), tmp_path / "target")
    token = None
    try:
        endpoint = target.provision()
        assert isinstance(endpoint, HttpEndpoint) and endpoint.publish is not None
        endpoint.publish(root_set)
        token = target.token
        out = _engine.http_run(endpoint.address, host=endpoint.host_header, dirs=DIRS, t0_ns=time.monotonic_ns(),
                               harness=engine_settings_of(clients=4, threads=1, transactions=100, io="epoll", pin="off", follow=False))
        assert out.failed == 0 and out.transactions == 400, out.errors_by_kind
        processes = target.processes()
        assert processes
        # every process of it, its master too, is run_as (nobody) when perflab is root; else perflab's user
        owner = __import__("pwd").getpwnam("nobody").pw_uid if os.geteuid() == 0 else os.geteuid()
        assert {_real_uid(p) for p in processes} == {owner}, processes
        described = target.describe()
        assert described["version"].split()[0] in ("Apache", "lighttpd", "h2o")
        if kind == "apache":
            assert described["settings"]["mpm"] == options["mpm"]
        assert target.check_alive() is None
    finally:
        target.teardown()
    assert token is not None and server_processes(token) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="a tree of links for run_as is made only when perflab is root")
@needs("apache")
def test_a_server_started_again_in_its_directory_after_a_tree_of_links_was_served(workdir, root_set) -> None:
    """Apache checks its DocumentRoot at start: the link left to the tree of
    links of a set served before (removed at teardown) must not stop the next
    server in that directory, as when the data set changes between runs."""
    cls = TARGETS.get("apache")
    hidden = workdir / "hidden"  # a set run_as (nobody) cannot read: served as a tree of links
    hidden.mkdir(mode=0o700)
    shutil.copytree(root_set, hidden / "set")
    settings = cls.Settings.model_validate({"kind": "apache", "settings": {"mpm": "prefork"}})
    first = cls(settings, workdir / "target")
    try:
        first.provision().publish(hidden / "set")  # type: ignore[misc]
        assert any(first.home.glob("files-*")), "not served as a tree of links"
    finally:
        first.teardown()
    second = cls(settings, workdir / "target")
    try:
        endpoint = second.provision()
        assert second.check_alive() is None
        assert endpoint.publish is not None
        endpoint.publish(root_set)
        out = _engine.http_run(endpoint.address, host=endpoint.host_header, dirs=DIRS, t0_ns=time.monotonic_ns(),
                               harness=engine_settings_of(clients=2, threads=1, transactions=20, io="epoll", pin="off", follow=False))
        assert out.failed == 0, out.errors_by_kind
    finally:
        second.teardown()


@needs("apache")
def test_the_process_collector_follows_the_workers_apache_prefork_forks_under_load(root_set, tmp_path) -> None:
    """Apache prefork forks a process per connection as the load comes: the
    process collector finds them at every sample (a master's children), so
    their CPU and storage reads count as the server's."""
    from perflab.collectors.base import CollectorContext
    from perflab.collectors.process import ProcessCollector, ProcessSettings
    from perflab.context import RunContext

    cls = TARGETS.get("apache")
    target = cls(cls.Settings.model_validate({"kind": "apache", "settings": {"mpm": "prefork", "start_servers": 1}}),
                 tmp_path / "target")
    try:
        endpoint = target.provision()
        assert endpoint.publish is not None
        endpoint.publish(root_set)
        known = len(target.processes())  # at the collector's start
        collector = ProcessCollector("process", ProcessSettings(interval=1.0))
        collector.open(CollectorContext(run=RunContext(run_number=1, run_dir=tmp_path, t0_ns=time.monotonic_ns()),
                                        endpoint=endpoint, target=target))
        collector.sample()
        clients = known + 12  # more connections at once than processes it had
        # (for some seconds: prefork forks at most 1, 2, 4, ... processes a second)
        out = _engine.http_run(endpoint.address, host=endpoint.host_header, dirs=DIRS, t0_ns=time.monotonic_ns(),
                               harness=engine_settings_of(clients=clients, threads=2, duration=4.0, io="epoll", pin="off", follow=False))
        assert out.failed == 0, out.errors_by_kind
        values = collector.sample()  # its idle workers linger past the load (MaxSpareServers trims one a second)
        assert values["worker.count"] + values["master.count"] > known, (values, known)
        assert values["worker.cpu_user_pct"] + values["worker.cpu_system_pct"] > 0, values
    finally:
        target.teardown()


def _experiment(workdir: Path, cache: Path, target: str, duration: str = "1s", extra: str = "") -> Path:
    experiment = workdir / "e.toml"
    experiment.write_text(textwrap.dedent(f"""
        [experiment]
        name = "web-servers"
        order = "sequential"
        [target]
        {target}
        [workload]
        kind = "http"
        clients = 4
        duration = "{duration}"
        warmup = "0s"
        [workload.fileset]
        size = "5MB"
        cache_dir = "{cache}"
        {extra}
        [collect]
    """))
    return experiment


@pytest.mark.parametrize(("kind", "options"), server_params(SERVERS[:1] + SERVERS[2:]))
def test_nothing_is_left_after_a_sigkill_of_perflab(kind, options, workdir, cache) -> None:
    inline = ", ".join(f'{k} = {v if isinstance(v, int) else chr(34) + v + chr(34)}' for k, v in options.items())
    experiment = _experiment(workdir, cache, f'kind = "{kind}"\nsettings = {{ {inline} }}', duration="60s")
    run = subprocess.Popen(cli_command("run", experiment, "--out", workdir / "out", "--quiet", "--no-report"),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           env={**os.environ, "PERFLAB_STATE_DIR": str(workdir / "state")})
    servers: dict[int, str] = {}
    try:
        deadline = time.monotonic() + 90
        while not servers:
            assert time.monotonic() < deadline and run.poll() is None, "the server never started"
            time.sleep(0.1)
            servers = {p: s for p, s in descendants(run.pid).items()
                       if BINARIES[kind].encode() in Path(f"/proc/{p}/cmdline").read_bytes()}
        time.sleep(1.0)  # serving
        # its workers too, not perflab's guardian
        servers = {p: s for p, s in descendants(run.pid).items()
                   if p in servers or b"perflab.guardian" not in Path(f"/proc/{p}/cmdline").read_bytes()}
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)
        # perflab's guardian, which outlives it, ends every one of the server's processes
        deadline = time.monotonic() + 60
        while alive(servers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert alive(servers) == []
    finally:
        if run.poll() is None:
            run.kill()
        for pid in alive(servers):  # only if the test failed
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize(("kind", "typo"), [pytest.param("apache", "mpn", marks=needs("apache")),
                                            pytest.param("lighttpd", "port", marks=needs("lighttpd")),
                                            pytest.param("h2o", "num_thread", marks=needs("h2o"))])
def test_a_misspelt_setting_or_a_port_is_refused_at_check(kind, typo, workdir, cache, run_cli) -> None:
    experiment = _experiment(workdir, cache, f'kind = "{kind}"\nsettings = {{ {typo} = 80 }}')
    proc = run_cli("check", experiment, check=False)
    assert proc.returncode == 2, proc.stderr
    assert f"target.settings.{typo}" in proc.stderr and "allowed:" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("kind", [pytest.param(k, marks=needs(k)) for k in BINARIES])
def test_a_missing_binary_exits_2_naming_the_package(kind, workdir, cache, run_cli) -> None:
    missing = workdir / f"no-{BINARIES[kind]}"
    experiment = _experiment(workdir, cache, f'kind = "{kind}"\nbinary = "{missing}"')
    proc = run_cli("check", experiment, check=False)
    assert proc.returncode == 2 and "target.binary" in proc.stderr, proc.stderr
    assert f"apt-get install {BINARIES[kind]}" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_cli("run", experiment, "--out", workdir / "out", check=False)
    assert proc.returncode == 2 and f"apt-get install {BINARIES[kind]}" in proc.stderr, proc.stderr


@needs("apache")
@needs("lighttpd")
def test_server_kinds_as_a_factor_are_labelled_by_server_and_version(workdir, cache) -> None:
    from perflab.spec import load

    experiment = _experiment(workdir, cache, 'kind = "nginx"', extra=textwrap.dedent("""
        [factors]
        "target.kind" = ["apache", "lighttpd"]
    """))
    labels = [level["label"] for level in load(experiment).factors["target.kind"]]
    assert labels[0].startswith("Apache 2.") and labels[1].startswith("lighttpd 1."), labels


def test_a_server_level_names_its_architecture_setting_by_value_where_the_target_declares_it(workdir, cache) -> None:
    from perflab.spec import load

    experiment = _experiment(workdir, cache, 'kind = "nginx"', extra=textwrap.dedent("""
        [factors]
        "target" = [
          { kind = "apache", settings = { mpm = "prefork", keepalive = true } },
          { kind = "apache", settings = { mpm = "event", keepalive = false } },
          { kind = "h2o", settings = { num_threads = 2 } },
          { kind = "h2o", settings = { num_threads = 1 } },
          { kind = "nginx", settings = { sendfile = false } },
        ]
    """))
    labels = [level["label"] for level in load(experiment).factors["target"]]
    # the server ("Apache 2.4.71" where its binary is here, else its kind), then its architecture by value;
    # a setting its target does not declare stays key=value
    assert [label.rsplit(" ", 2)[-2:] for label in labels[:2]] == [["prefork", "keepalive=true"],
                                                                    ["event", "keepalive=false"]], labels
    assert labels[2].endswith(" 2 threads") and labels[3].endswith(" 1 thread"), labels
    assert labels[4].endswith(" sendfile=false"), labels
    assert "mpm=" not in " ".join(labels) and "num_threads=" not in " ".join(labels), labels


def test_a_setting_factor_of_one_server_reads_as_its_target_says(workdir, cache) -> None:
    from perflab.model import fmt_level
    from perflab.spec import load

    experiment = _experiment(workdir, cache, 'kind = "h2o"', extra=textwrap.dedent("""
        [factors]
        "target.settings.num_threads" = [1, 4]
    """))
    exp = load(experiment)
    assert [fmt_level(v) for v in exp.factors["target.settings.num_threads"]] == ["1 thread", "4 threads"]
    assert [exp.resolve(c).target.settings.num_threads for c in exp.combinations()] == [1, 4]  # applied as set
    experiment = _experiment(workdir, cache, 'kind = "apache"', extra=textwrap.dedent("""
        [factors]
        "target.settings.mpm" = ["prefork", "event"]
    """))
    assert load(experiment).factors["target.settings.mpm"] == ["prefork", "event"]  # the values say it already


@needs("apache")
@needs("lighttpd")
def test_two_servers_by_two_data_sets_give_table_10(workdir, cache, run_cli) -> None:
    from perflab.store import Store
    from perflab.workloads.http import HttpWorkload

    experiment = _experiment(workdir, cache, 'kind = "nginx"', extra=textwrap.dedent("""
        [factors]
        "workload.fileset.size" = ["5MB", "10MB"]
        "target" = [{ kind = "lighttpd" }, { kind = "apache", settings = { mpm = "prefork" } }]
    """))
    run_cli("run", experiment, "--out", workdir / "out", "--no-report")
    store = Store.open(workdir / "out", write=False)
    runs = store.runs()
    assert [r["status"] for r in runs] == ["done"] * 4
    [headline] = [s for s in HttpWorkload.report_sections(store, runs) if s.headline]
    tables = [b for b in headline.blocks if isinstance(b, Table)]
    throughput, *profiles = tables
    assert throughput.headers[0] == "data set" and len(throughput.headers) == 3
    assert throughput.headers[1].startswith("lighttpd 1.") and throughput.headers[2].startswith("Apache 2.")
    assert throughput.headers[2].endswith(" prefork") and "=" not in "".join(throughput.headers)  # not mpm=...
    assert [row[0] for row in throughput.rows] == ["5MB", "10MB"]
    assert all(cell != "–" for row in throughput.rows for cell in row[1:])
    assert len(profiles) == 2  # one per data set
    for table in profiles:
        assert table.headers[1:] == throughput.headers[1:]
        assert [row[0] for row in table.rows] == ["5%", "median", "95%", "mean"]
        assert all(cell != "–" for row in table.rows for cell in row[1:])
    assert [b.name for b in headline.blocks if isinstance(b, Figure)] == ["http-latency-cdf-by-server"]


@pytest.mark.serial  # drops the machine's page cache
@pytest.mark.skipif(os.geteuid() != 0, reason="drop_caches and the server's memory cgroup need root")
@needs("lighttpd")
def test_after_a_warm_up_a_set_below_the_memory_limit_is_served_from_memory_and_one_above_it_from_disk(
        workdir, run_cli) -> None:
    from perflab.hostctl.cgroups import ResourceSettings, resource_problems
    from perflab.store import Store
    from perflab.workloads.http import HttpWorkload
    from perflab.workloads.webstudy import FROM_MEMORY_SHARE

    if problems := resource_problems(ResourceSettings.model_validate({"memory": "16MB"})):
        pytest.skip(f"no memory cgroup here: {problems}")
    experiment = _experiment(workdir, workdir / "cache", 'kind = "lighttpd"', duration="3s", extra=textwrap.dedent("""
        [factors]
        "target.resources.memory" = ["16MB", "512MB"]
        [host]
        drop_caches = true
    """)).read_text()
    experiment = (experiment.replace('size = "5MB"', 'size = "50MB"').replace('warmup = "0s"', 'warmup = "5s"')
                  .replace("[collect]", "[collect]\nprocess = {}"))
    (workdir / "e.toml").write_text(experiment)
    run_cli("run", workdir / "e.toml", "--out", workdir / "out", "--no-report")
    store = Store.open(workdir / "out", write=False)
    runs = store.runs()
    [section] = [s for s in HttpWorkload.report_sections(store, runs) if s.title.endswith("page cache and disk, per run")]
    [table] = [b for b in section.blocks if isinstance(b, Table)]

    def column(name: str) -> dict[str, float]:
        return {row[2]: float(row[table.headers.index(name)].replace(",", "")) for row in table.rows}

    warm, window, served, page_cache = (column("warm-up reads MB"), column("from disk MB"), column("served MB"),
                                        column("page cache MB"))
    assert set(window) == {"16MB", "512MB"}, table.rows
    # each run starts cold (drop_caches): the server reads the set from disk in its warm-up, either way
    assert warm["16MB"] > 0 and warm["512MB"] > 0, table.rows
    # in the measured window: above its limit the server reads the set from disk again, below it, (nearly) never
    # (a rare file first asked for after the warm-up is read once: under 1% of the bytes served)
    assert window["16MB"] > FROM_MEMORY_SHARE * served["16MB"], table.rows
    assert window["512MB"] < FROM_MEMORY_SHARE * served["512MB"], table.rows
    assert page_cache["16MB"] <= 16.8 < page_cache["512MB"], table.rows  # the cgroup's own, within its limit


def test_each_run_says_how_its_measured_window_was_served() -> None:
    from perflab.workloads.webstudy import _where

    v = {"body_bytes": 1000e6, "fileset_bytes": 400e6}
    # under 1% of the bytes served read after the warm-up: from memory (a rare file read once)
    assert _where({"server_warmup": 390e6, "server_window": 5e6}, v, limited=False) == ("memory", 0.005)
    # warm-up and window together read past the set: pages evicted and read again
    assert _where({"server_warmup": 300e6, "server_window": 200e6}, v, limited=True)[0] == "re-read"
    # reading on at the memory limit: each page cached evicts another
    assert _where({"server_warmup": 200e6, "server_window": 100e6}, v, limited=True)[0] == "evicting"
    # below the limit and not yet through the set: still its first read
    assert _where({"server_warmup": 200e6, "server_window": 100e6}, v, limited=False)[0] == "cold"
    assert _where({}, v, limited=False) is None  # no process collector: nothing said
