"""The http workload against any server: a request mix of a user's own
server's URLs (an external `python3 -m http.server` the test starts on
loopback), connection churn stated, and the server itself as a factor
(nginx and a `process` server as two levels of one target factor).
Traffic to 127.0.0.1 only; every run is short (1-2 s or a fixed count)."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

HTTP_SERVER_TIMEOUT_S = 10.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """`python3 -m http.server` serving a temporary directory on 127.0.0.1,
    started by the test and stopped by its pid; (base URL, directory)."""
    root = tmp_path / "site"
    root.mkdir()
    (root / "a.txt").write_text("a" * 100)
    (root / "b.txt").write_text("b" * 2000)
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                             "--directory", str(root)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + HTTP_SERVER_TIMEOUT_S
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise AssertionError("python3 -m http.server did not start") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/", root
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _metrics(out: Path) -> dict[str, float]:
    conn = sqlite3.connect(out / "perflab.sqlite")
    try:
        return {name: value for name, value in conn.execute("SELECT name, value FROM metric")}
    finally:
        conn.close()


def _experiment(path: Path, url: str, workload: str) -> Path:
    path.write_text(f"""
[experiment]
name = "any-server"
[target]
kind = "http"
url = "{url}"
[workload]
kind = "http"
clients = 2
threads = 1
seed = 7
{workload}
""")
    return path


def test_a_weighted_mix_on_a_users_own_server_counts_each_path_and_the_churn(site, workdir, run_cli) -> None:
    url, _ = site
    # a fixed seed and count: the draws are the same every time (the engine's own test checks them at 1%)
    f = _experiment(workdir / "mix.toml", url, """requests = 1500
request_mix = [{ path = "/a.txt", weight = 1 }, { path = "b.txt", weight = 3 },
               { path = "/missing", weight = 1, headers = { "X-Test" = "1" } }]
""")
    run_cli("run", f, "--out", workdir / "out", "--quiet")
    m = _metrics(workdir / "out")
    sent = [m["requests.r1"], m["requests.r2"], m["requests.r3"]]
    assert sum(sent) == 3000, m
    for n, weight in zip(sent, (1, 3, 1), strict=True):
        assert abs(n / 3000 - weight / 5) < 0.02, sent
    # the missing path is an error by kind; the others are good, their size unknown and unchecked
    assert m["errors.4xx"] == sent[2] and m["errors"] == sent[2], m
    assert m["requests"] == sent[0] + sent[1]
    # Python's server answers HTTP/1.0 and closes every connection: stated
    assert m["connections_per_req"] == pytest.approx(1.0, abs=0.01)
    assert m["server_closed_share"] == 1.0 and m["http10_share"] == 1.0
    show = run_cli("show", workdir / "out").stdout
    assert "server-closes" in show and "http/1.0" in show, show
    # ... and in the report: the flag, what it means for latency, and a mix's throughput by req/s (no Mb/s)
    report = (workdir / "out" / "report.html").read_text()
    assert "server-closes: the HTTP server ended its connection" in report
    assert re.search(r"in 1 run\(s\), 1\.0\d connections opened per request", report), report
    headline = report[report.rindex("Web server: throughput"):report.rindex("Web server runs")]
    assert "req/s per request mix and configuration" in headline, headline
    assert "<th>req/s</th>" in headline and "<th>Mb/s</th>" not in headline, headline


def test_late_and_skipped_requests_under_a_latency_limit_are_in_show_and_the_report(site, workdir,
                                                                                    run_cli) -> None:
    url, _ = site
    # far above what Python's server answers, with a limit below its connect-and-answer time:
    # requests complete late, and slots already past the limit are skipped
    f = _experiment(workdir / "limit.toml", url, """duration = "2s"
rate = 20000
latency_limit = "1ms"
request_mix = [{ path = "/a.txt" }]
""")
    run_cli("run", f, "--out", workdir / "out", "--quiet")
    m = _metrics(workdir / "out")
    assert m["late"] > 0 and m["skipped"] > 0, m
    show = run_cli("show", workdir / "out").stdout
    assert f"late {m['late']:.0f}" in show and f"skipped {m['skipped']:.0f}" in show, show
    report = (workdir / "out" / "report.html").read_text()
    runs = report[report.rindex("Web server runs"):]
    assert "<th>late</th>" in runs and "<th>skipped</th>" in runs, runs[:3000]
    plan = report[report.index('<section id="plan">'):]
    assert f"late {m['late']:.0f}, skipped {m['skipped']:.0f}" in plan, plan[:3000]


def test_a_mix_file_is_read_a_request_a_line(site, workdir, run_cli) -> None:
    url, _ = site
    (workdir / "urls.txt").write_text("# my URLs\nGET /a.txt 2\n\n/b.txt\nHEAD /b.txt 1\n")
    f = _experiment(workdir / "file.toml", url, 'requests = 100\nrequest_mix_file = "urls.txt"\n')
    run_cli("run", f, "--out", workdir / "out", "--quiet", "--no-report")
    m = _metrics(workdir / "out")
    assert m["errors"] == 0 and m["requests"] == 200, m
    assert m["requests.r1"] > m["requests.r2"] > 0 and m["requests.r3"] > 0, m
    bad = _experiment(workdir / "bad.toml", url, 'request_mix_file = "urls.txt"\n')
    (workdir / "urls.txt").write_text("GET /a.txt two words\n")
    proc = run_cli("check", bad, check=False)
    assert proc.returncode == 2 and "line 1" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


NGINX = shutil.which("nginx", path=os.environ.get("PATH", "") + ":/usr/sbin")


@pytest.mark.skipif(NGINX is None, reason="nginx is not installed (./dev setup installs it)")
def test_the_server_is_a_factor_nginx_against_a_process_server(workdir, run_cli) -> None:
    site = workdir / "site"
    site.mkdir()
    (site / "index.html").write_text("<p>hello</p>" * 50)
    command = f"{sys.executable} -m http.server {{port}} --bind 127.0.0.1 --directory {{root}}"
    f = workdir / "servers.toml"
    f.write_text(f"""
[experiment]
name = "servers"
[workload]
kind = "http"
clients = 2
threads = 1
duration = "1s"
root = "site"
request_mix = [{{ path = "/index.html" }}]
[factors]
"target" = [{{ kind = "nginx", label = "nginx" }},
            {{ kind = "process", command = {json.dumps(command)}, label = "python" }}]
""")
    run_cli("run", f, "--out", workdir / "out", "--quiet")
    conn = sqlite3.connect(workdir / "out" / "perflab.sqlite")
    try:
        statuses = [s for (s,) in conn.execute("SELECT status FROM run ORDER BY id")]
    finally:
        conn.close()
    assert statuses == ["done", "done"]
    show = run_cli("show", workdir / "out").stdout
    assert "nginx" in show and "python" in show, show
    report = (workdir / "out" / "report.html").read_text()
    table = report[report.index("Web server runs"):]
    assert "nginx" in table and "python" in table
    # a level is validated whole: a process level without its command is refused, named by index
    bad = workdir / "bad.toml"
    bad.write_text(f.read_text().replace(f"command = {json.dumps(command)}, ", ""))
    proc = run_cli("check", bad, check=False)
    assert proc.returncode == 2 and "factors.target[1]" in proc.stderr and "command" in proc.stderr, proc.stderr
