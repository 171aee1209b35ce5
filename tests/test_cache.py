"""perflab's cache, visible: `perflab cache` lists what runs put there with
sizes and ages, `perflab cache prune` removes it (never an entry a running
experiment uses, never what perflab did not make), PERFLAB_CACHE moves it, a
run that adds to it says how much, and `check` warns when its disk lacks the
room. Every test points PERFLAB_CACHE at a directory of its own: the real
cache is never touched."""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from perflab import _engine, cache

NGINX = shutil.which("nginx", path=os.environ.get("PATH", "") + ":/usr/sbin")
DIRS = 3  # about 15 MB
ENTRY = f"perflab-fileset-v1-{DIRS}d-seed1"


def _experiment(workdir: Path, size: str = str(DIRS * 5_000_000)) -> Path:
    path = workdir / "web.toml"
    path.write_text(textwrap.dedent(f"""
        [experiment]
        name = "cache"
        [target]
        kind = "nginx"
        [workload]
        kind = "http"
        clients = 2
        requests = 200
        [workload.fileset]
        size = "{size}"
        [collect]
    """))
    return path


def test_the_cache_is_where_perflab_cache_says(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("PERFLAB_CACHE", str(tmp_path / "c"))
    assert cache.cache_root() == tmp_path / "c"
    from perflab.workloads.http import default_cache_dir, fileset_entry

    assert default_cache_dir() == tmp_path / "c" / "filesets"
    monkeypatch.delenv("PERFLAB_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "perflab" / "filesets"
    # The entry's name is the engine's.
    report = _engine.fileset_prepare(str(tmp_path / "sets"), dirs=1, seed=7, jobs=1)
    assert Path(report.root) == fileset_entry(tmp_path / "sets", 1, 7)


@pytest.mark.skipif(NGINX is None, reason="nginx is not installed (./dev setup installs it)")
def test_perflab_cache_lists_the_file_set_of_an_http_run_and_prune_removes_it(workdir, tmp_path, run_cli) -> None:
    # Under pytest's tmp_path (0700 as root): the workers' user cannot reach it,
    # so the run also serves the set through hard links (targets/webserver.py).
    root = tmp_path / "cache"
    env = {"PERFLAB_CACHE": str(root)}
    experiment = _experiment(workdir)
    proc = run_cli("run", experiment, "--out", workdir / "out", "--no-report", env=env)
    entry = root / "filesets" / ENTRY
    [line] = [x for x in proc.stdout.splitlines() if x.startswith("cache: added")]
    assert re.fullmatch(rf"cache: added 1[45]\.\dMB of file set under {entry}", line), line
    assert (entry / ".perflab-fileset-complete").is_file()
    db = sqlite3.connect(workdir / "out" / "perflab.sqlite")
    metrics = dict(db.execute("SELECT name, value FROM metric WHERE name IN ('requests', 'errors')").fetchall())
    db.close()
    assert metrics == {"requests": 400, "errors": 0}, metrics  # 2 clients x 200, every file read by the workers
    # A second run finds it there and says nothing of the cache.
    again = run_cli("run", experiment, "--out", workdir / "out2", "--no-report", env=env)
    assert "cache: added" not in again.stdout

    listing = run_cli("cache", env=env).stdout
    assert f"cache: {root} (PERFLAB_CACHE)" in listing
    [row] = [x for x in listing.splitlines() if ENTRY in x]
    assert row.split()[0] == "filesets" and re.fullmatch(r"1[45]\.\dMB", row.split()[2]) and "ago" in row, listing
    assert "total: 1 entries" in listing

    # Asked, with no one to answer: exit 2 naming --yes, nothing removed.
    refused = run_cli("cache", "prune", check=False, env=env)
    assert refused.returncode == 2 and "--yes" in refused.stderr and "Traceback" not in refused.stderr
    assert entry.is_dir()
    # Used seconds ago: not older than a day.
    kept = run_cli("cache", "prune", "--older-than", "1d", "--yes", env=env)
    assert "nothing to remove" in kept.stdout and entry.is_dir()
    bad = run_cli("cache", "prune", "--older-than", "soon", check=False, env=env)
    assert bad.returncode == 2 and "--older-than" in bad.stderr and entry.is_dir()
    pruned = run_cli("cache", "prune", "--yes", env=env)
    assert f"removed filesets/{ENTRY}" in pruned.stdout and "pruned: 1 entries" in pruned.stdout
    assert not entry.exists() and not cache.lock_path(entry).exists()
    assert "empty" in run_cli("cache", env=env).stdout


def test_prune_never_removes_an_entry_a_running_experiment_uses(tmp_path, run_cli) -> None:
    root = tmp_path / "cache"
    entry = root / "filesets" / "perflab-fileset-v1-1d-seed1"
    _engine.fileset_prepare(str(entry.parent), dirs=1, seed=1, jobs=1)
    # Another process uses it (as an experiment's prepare does) until it exits.
    user = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from perflab import cache
        cache.use(Path({str(entry)!r}))
        print("ready", flush=True)
        time.sleep(120)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert user.stdout is not None and user.stdout.readline().strip() == "ready"
        env = {"PERFLAB_CACHE": str(root)}
        listing = run_cli("cache", env=env).stdout
        assert f"in use (pid {user.pid})" in listing, listing
        proc = run_cli("cache", "prune", "--yes", env=env)
        assert f"kept filesets/{entry.name}: in use by pid {user.pid}" in proc.stdout, proc.stdout
        assert (entry / ".perflab-fileset-complete").is_file()
    finally:
        user.kill()
        user.wait()
        if user.stdout is not None:
            user.stdout.close()
    # Its lock went with it (a SIGKILL): now the entry goes.
    proc = run_cli("cache", "prune", "--yes", env={"PERFLAB_CACHE": str(root)})
    assert f"removed filesets/{entry.name}" in proc.stdout and not entry.exists()


def test_prune_touches_nothing_perflab_did_not_make(tmp_path, run_cli) -> None:
    root = tmp_path / "cache"
    sets = root / "filesets"
    sets.mkdir(parents=True)
    (root / "notes.txt").write_text("mine")
    (sets / "mine").mkdir()
    (sets / "mine" / "a").write_text("mine")
    # A perflab-looking name without the engine's mark of a whole set, and a
    # "scratch directory" holding a file a generator never writes.
    fake = sets / "perflab-fileset-v1-2d-seed9"
    fake.mkdir()
    (fake / "data").write_text("mine")
    scratch = sets / "perflab-fileset-v1-2d-seed9.partial-1"
    scratch.mkdir()
    (scratch / "data").write_text("mine")
    # A generator's scratch directory left by a dead process is perflab's.
    left = sets / "perflab-fileset-v1-4d-seed1.partial-999999999"
    (left / "dir00000").mkdir(parents=True)
    (left / "dir00000" / "class0_0").write_bytes(b"x" * 1024)
    env = {"PERFLAB_CACHE": str(root)}
    listing = run_cli("cache", env=env).stdout
    assert "perflab-fileset-v1-4d-seed1" in listing and "partial" in listing
    assert "seed9" not in listing and "mine" not in listing
    proc = run_cli("cache", "prune", "--yes", env=env)
    assert "pruned: 1 entries" in proc.stdout, proc.stdout
    assert not left.exists()
    for path in (root / "notes.txt", sets / "mine" / "a", fake / "data", scratch / "data"):
        assert path.read_text() == "mine"


def test_check_warns_when_the_cache_disk_lacks_room_for_the_file_set(workdir, tmp_path, run_cli) -> None:
    root = tmp_path / "cache"
    env = {"PERFLAB_CACHE": str(root)}
    free = shutil.disk_usage(tmp_path).free
    big = _experiment(workdir, size=f"{free // 2**30 + 50}GB")
    proc = run_cli("check", big, env=env)
    [warning] = [x for x in proc.stderr.splitlines() if "cache:" in x]
    assert "an estimate" in warning and str(root / "filesets") in warning and "free" in warning, warning
    assert "PERFLAB_CACHE" in warning and "perflab cache prune" in warning
    assert not root.exists()  # check generated nothing
    small = _experiment(workdir)
    assert "cache:" not in run_cli("check", small, env=env).stderr
    # An external server is never given a set: nothing to warn about.
    text = big.read_text().replace('kind = "nginx"', 'kind = "http"\nurl = "http://127.0.0.1:9/"')
    big.write_text(text)
    from perflab import spec

    exp = spec.load(big)
    assert not [w for w in spec.preflight(exp, workdir) if "cache:" in w]


def test_a_use_after_a_prune_takes_a_new_lock(tmp_path) -> None:
    entry = tmp_path / "filesets" / "perflab-fileset-v1-1d-seed2"
    _engine.fileset_prepare(str(entry.parent), dirs=1, seed=2, jobs=1)
    [found] = cache.entries(tmp_path)
    assert found.whole and found.size_bytes >= _engine.fileset_dir_bytes() and not found.in_use
    before = time.time()
    assert cache.remove(found) and not entry.exists()
    try:
        cache.use(entry)
        [again] = [e for e in cache.entries(tmp_path)] or [None]
        assert again is None  # a lock file alone is no entry
        assert os.getpid() in cache.lock_holders(entry)
        assert cache.lock_path(entry).stat().st_mtime >= before - 1
    finally:
        cache.release(entry)
    assert cache.lock_holders(entry) == []
