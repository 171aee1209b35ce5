"""Two runs are one set-up only when everything perflab applied was equal
(issue 43, item 6). What is no part of the set-up (a pid, a port, a socket
directory, a path perflab picked) is declared by the target that describes
it, never guessed from a setting's name: a `wal_dir` factor ran two set-ups
and is tested as an effect."""

from __future__ import annotations

import copy
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from conftest import postmasters_under
from perflab.report.data import applied, setup_key

# A managed PostgreSQL's description as it stores it (targets/postgres), with
# what it declares no part of the set-up.
POSTGRES: dict[str, Any] = {
    "kind": "postgres", "managed": True, "endpoint": "host=/tmp/perflab-pg-x port=5433",
    "bin_dir": "/usr/lib/postgresql/18/bin", "data_dir": "/out/targets/postgres-1/pgdata", "run_as": "postgres",
    "server": "PostgreSQL 18.1", "wal_dir": "/out/targets/postgres-1/pgdata/pg_wal", "postmaster_pid": 4242,
    "requested_settings": {}, "restart": "auto",
    "effective_settings": {"shared_buffers": "128MB", "log_directory": "log", "checkpoint_timeout": "5min"},
    "connection_settings": {"port": "5433", "unix_socket_directories": "/tmp/perflab-pg-x"},
    "resources": {"name": "perflab-pg-0123", "controllers": {"cpu": {"version": 2, "kernel_name": "cpu",
                  "path": "/sys/fs/cgroup/perflab-pg-0123", "limits": {"cpu.max": "95000 100000"}}},
                  "setup_ignores": ["name", "controllers.cpu.path"]},
    "scratch_fs": {"wal": {"name": "perflab-fs-1", "type": "tmpfs", "size": "1GB", "mountpoint": "/out/m",
                           "loop_device": None, "setup_ignores": ["name", "loop_device", "backing_file", "mountpoint"]}},
    "setup_ignores": ["postmaster_pid", "data_dir", "wal_dir", "endpoint", "notes", "connection_settings",
                      "requested_settings"],
}
# A managed MariaDB's, with directories the experiment gave (so they are the set-up).
MARIADB: dict[str, Any] = {
    "kind": "mariadb", "managed": True, "server": "MariaDB 11.4", "mariadbd": "/usr/sbin/mariadbd",
    "data_dir": "/data/my", "redo_dir": "/data/my", "undo_dir": "/data/my", "option_file": "/out/my.cnf",
    "server_pid": 77, "key_settings": {"innodb_flush_method": "O_DIRECT", "innodb_data_home_dir": ""},
    "setup_ignores": ["server_pid", "option_file", "endpoint", "notes", "requested_settings"],
}


def run(target: dict[str, Any], **factors: Any) -> dict[str, Any]:
    return {"factors": factors, "target": json.loads(json.dumps(target))}


def changed(base: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(base)
    where = out
    *parents, last = key.split(".")
    for p in parents:
        where = where[p]
    where[last] = value
    return out


# (description, dotted key, other value): one kind of setting each, the
# `_dir`, `_path`, `_s` and `pid` names a name pattern once dropped among them
APPLIED = [
    (POSTGRES, "effective_settings.shared_buffers", "1GB"),
    (POSTGRES, "effective_settings.log_directory", "/var/log/pg"),
    (POSTGRES, "effective_settings.checkpoint_timeout", "30min"),
    (POSTGRES, "bin_dir", "/usr/lib/postgresql/15/bin"),
    (POSTGRES, "server", "PostgreSQL 15.8"),
    (POSTGRES, "resources.controllers.cpu.limits", {"cpu.max": "100000 100000"}),
    (POSTGRES, "scratch_fs.wal.type", "ext4"),
    (MARIADB, "data_dir", "/fast/my"),
    (MARIADB, "redo_dir", "/fast/redo"),
    (MARIADB, "undo_dir", "/fast/undo"),
    (MARIADB, "mariadbd", "/opt/mariadb-10.11/bin/mariadbd"),
    (MARIADB, "key_settings.innodb_data_home_dir", "/fast"),
    (MARIADB, "key_settings.innodb_flush_method", "fsync"),
    (changed(POSTGRES, "setup_ignores", ["postmaster_pid", "data_dir", "endpoint"]), "wal_dir", "/dev/shm/pg_wal"),
    (changed(POSTGRES, "effective_settings", {"io_path": "a", "commit_delay_s": 1, "walwriter_pid": 3}),
     "effective_settings.io_path", "b"),
    (changed(POSTGRES, "effective_settings", {"io_path": "a", "commit_delay_s": 1, "walwriter_pid": 3}),
     "effective_settings.commit_delay_s", 2),
    (changed(POSTGRES, "effective_settings", {"io_path": "a", "commit_delay_s": 1, "walwriter_pid": 3}),
     "effective_settings.walwriter_pid", 4),
]


@pytest.mark.parametrize(("base", "key", "value"), APPLIED, ids=[k for _, k, _ in APPLIED])
def test_every_kind_of_setting_applied_is_the_set_up(base: dict[str, Any], key: str, value: Any) -> None:
    assert setup_key(run(base)) != setup_key(run(changed(base, key, value)))


@pytest.mark.parametrize("factor", ["host.drop_caches", "workload.clients", "workload.data_dir", "driver.cpus"])
def test_every_factor_that_is_not_the_targets_is_the_set_up(factor: str) -> None:
    assert setup_key(run(POSTGRES, **{factor: 1})) != setup_key(run(POSTGRES, **{factor: 2}))


@pytest.mark.parametrize("key, value", [
    ("postmaster_pid", 9999), ("endpoint", "host=/tmp/perflab-pg-y port=5999"),
    ("connection_settings.unix_socket_directories", "/tmp/perflab-pg-y"), ("data_dir", "/out/targets/pg-2/pgdata"),
    ("resources.name", "perflab-pg-4567"), ("resources.controllers.cpu.path", "/sys/fs/cgroup/perflab-pg-4567"),
    ("scratch_fs.wal.mountpoint", "/out/m2"),
])
def test_what_a_target_declares_its_own_choice_is_not(key: str, value: Any) -> None:
    assert setup_key(run(POSTGRES)) == setup_key(run(changed(POSTGRES, key, value)))
    assert key not in applied(POSTGRES)


def test_a_wal_dir_factor_on_a_real_server_is_tested_as_an_effect(workdir: Path, run_cli) -> None:
    """The WAL-placement study's factor on a real managed PostgreSQL: the two
    wal_dir levels are two set-ups, and their comparison is tested; the two
    spellings of one synchronous_commit are one set-up, across server
    restarts (a new pid, port and socket directory each start)."""
    from perflab.report.data import load
    from perflab.report.sections.base import ReportContext
    from perflab.report.sections.effects import effect_rows
    from perflab.store import Store

    wal = workdir / "wal"
    f = workdir / "e.toml"
    f.write_text(f"""
[experiment]
name = "wal-identity"
repetitions = 3
seed = 5
[target]
kind = "postgres"
[workload]
kind = "sql"
statements = ["SELECT 1"]
iterations = 2
[factors]
"target.storage.wal_dir" = ["", "{wal}"]
"target.settings.synchronous_commit" = ["on", "true"]
""")
    out = workdir / "out"
    run_cli("run", f, "--out", out, "--no-report", timeout=600)
    assert postmasters_under(workdir) == []
    conn = sqlite3.connect(out / "perflab.sqlite")
    assert {s for (s,) in conn.execute("SELECT status FROM run")} == {"done"}
    conn.close()
    store = Store.open(out)
    try:
        data = load(store)
        groups = [{json.dumps(c.factors, sort_keys=True) for c in g} for g in data.setups()]
        # two set-ups, by wal_dir; "on" and "true" one set-up within each
        assert len(groups) == 2 and all(len(g) == 2 for g in groups)
        for g in groups:
            assert len({json.loads(k)["target.storage.wal_dir"] for k in g}) == 1
        rows = effect_rows(ReportContext(store, data, workdir / "figures"))
    finally:
        store.close()
    wal_rows = [r for r in rows if r[0] == "target.storage.wal_dir"]
    assert wal_rows and all(r[5].verdict != "same set-up" for r in wal_rows)
    assert any(r[5].tested for r in wal_rows)
    sync_rows = [r for r in rows if r[0] == "target.settings.synchronous_commit"]
    assert sync_rows and all(r[5].verdict == "same set-up" for r in sync_rows)
