"""A run's state named as it is: a run stopped by Ctrl-C (or a refused
start) or whose perflab was killed is `interrupted` in `show` until it runs
again (not "planned ... resumed"), the resumed event of a killed attempt says
killed; web runs that loaded nothing carry no "fresh load" mark; the console
says when a crashed server is started again; counts read "1 run"; a search
over a path of whole numbers is one problem."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from perflab.store import Store
from synthetic_store import build_store

NGINX = shutil.which("nginx", path=os.environ.get("PATH", "") + ":/usr/sbin")


def _show_rows(run_cli, out: Path) -> dict[int, str]:
    rows = run_cli("show", out).stdout.splitlines()[3:]
    return {int(line.split()[0]): line for line in rows if line.strip() and line.split()[0].isdigit()}


def test_a_stopped_run_is_interrupted_until_it_runs_again(tmp_path: Path, run_cli) -> None:
    out = build_store(tmp_path / "out", clients=[1], sync=["on"], repetitions=3)
    store = Store.open(out)
    store.start_run(3, 0)
    store.interrupt_run(3, "interrupted: KeyboardInterrupt")  # what a Ctrl-C (or a refused start) stores
    store.start_run(2, 0)
    store.close()
    store = Store.open(out)
    store.recover()  # what resume finds of a killed perflab's run
    store.close()
    rows = _show_rows(run_cli, out)
    for run in (2, 3):
        assert " interrupted " in rows[run] and "planned" not in rows[run] and "resumed" not in rows[run], rows
    assert " done " in rows[1]
    store = Store.open(out)
    try:
        assert store.run_marks() == {}
        # the attempt is stored as killed, and the event that says it is run again says so too
        killed = [a for a in store.attempts(2)]
        resumed = [e for e in store.events(2) if e["kind"] == "resumed"]
        assert [a["status"] for a in killed] == ["killed"] and len(resumed) == 1
        assert "killed" in resumed[0]["message"] and "interrupted" not in resumed[0]["message"]
    finally:
        store.close()


def _one_run(path: Path, extra: str = "") -> Path:
    path.write_text(f"""
[experiment]
name = "one"
[target]
kind = "duckdb"
[workload]
kind = "sql"
statements = [{{ name = "one", sql = "SELECT 1" }}]
duration = "1s"
{extra}
""")
    return path


def test_one_run_is_counted_in_the_singular(tmp_path: Path, run_cli) -> None:
    text = run_cli("check", _one_run(tmp_path / "one.toml")).stdout
    assert "1 run " in text and "1 combination " in text and "1 repetition)" in text, text
    assert "1 runs" not in text and "1 combinations" not in text
    assert "# one: 1 run," in run_cli("plan", tmp_path / "one.toml").stdout
    ran = run_cli("run", tmp_path / "one.toml", "--out", tmp_path / "out", "--no-report")
    assert "plan: 1 run" in ran.stdout + ran.stderr and "1 runs" not in ran.stdout + ran.stderr
    assert "# one: 1 run," in run_cli("show", tmp_path / "out").stdout


def test_a_search_over_whole_numbers_is_one_problem(tmp_path: Path, run_cli) -> None:
    f = tmp_path / "search.toml"
    f.write_text("""
[experiment]
name = "search"
[target]
kind = "postgres"
[workload]
kind = "tpcb"
duration = "1s"
[search]
over = "workload.clients"
goal = "latency_p99_ms <= 10"
from = 1
to = 64
""")
    proc = run_cli("check", f, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    problems = [ln for ln in proc.stderr.splitlines() if ln.startswith("  ")]
    assert len(problems) == 1 and problems[0].strip().startswith("search.over:"), proc.stderr
    assert "1.0" not in proc.stderr and "64.0" not in proc.stderr


def _web_experiment(workdir: Path, targets: str, requests: int) -> Path:
    site = workdir / "site"
    site.mkdir(exist_ok=True)
    (site / "index.html").write_text("<p>hello</p>" * 50)
    f = workdir / "web.toml"
    f.write_text(f"""
[experiment]
name = "web"
repetitions = 2
[workload]
kind = "http"
clients = 2
threads = 1
requests = {requests}
root = "site"
request_mix = [{{ path = "/index.html" }}]
{targets}
""")
    return f


@pytest.mark.skipif(NGINX is None, reason="nginx is not installed (./dev setup installs it)")
def test_web_runs_that_loaded_nothing_have_no_fresh_load(workdir: Path, run_cli) -> None:
    """Two servers as a factor, two blocks: each server is started again in
    the second block, and its request mix needed no load: no fresh load."""
    command = f"{sys.executable} -m http.server {{port}} --bind 127.0.0.1 --directory {{root}}"
    f = _web_experiment(workdir, f"""[factors]
"target" = [{{ kind = "nginx", label = "nginx" }},
            {{ kind = "process", command = {json.dumps(command)}, label = "python" }}]""", 50)
    run_cli("run", f, "--out", workdir / "out", "--quiet", "--no-report")
    store = Store.open(workdir / "out")
    try:
        assert [r["status"] for r in store.runs()] == ["done"] * 4
        # every run prepared (a server started), none loaded anything
        assert len([e for e in store.effects() if e["kind"] == "load"]) >= 3
        assert store.run_marks() == {}
    finally:
        store.close()
    assert "fresh load" not in run_cli("show", workdir / "out").stdout


SERVER = """
import http.server, os, sys
LIMIT = 40
served = 0
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    wbufsize = -1
    def do_GET(self):
        global served
        served += 1
        if served > LIMIT:
            os._exit(3)  # a crash: the server is gone mid-run
        self.send_response(200)
        self.send_header("Content-Length", "5")
        self.end_headers()
        self.wfile.write(b"hello")
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""


def test_the_console_says_a_crashed_server_is_started_again(workdir: Path, run_cli) -> None:
    """A server that dies after a few requests: its run fails, and the next
    run on the same server says on the console that it starts it again."""
    script = workdir / "crashing_server.py"
    script.write_text(SERVER)
    script.chmod(0o644)
    command = f"{sys.executable} {script} {{port}}"
    f = _web_experiment(workdir, f"""[target]
kind = "process"
command = {json.dumps(command)}""", 100)
    proc = run_cli("run", f, "--out", workdir / "out", "--no-report", check=False)
    store = Store.open(workdir / "out")
    try:
        runs = store.runs()
        assert runs[0]["status"] == "failed", runs
        assert [e for e in store.events(2) if e["kind"] == "restart"], store.events(2)
    finally:
        store.close()
    assert "restart" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
