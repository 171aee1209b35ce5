"""HTTP failures as figures of their own: a server answering 10% of its
requests with a 500 has its 5xx class counted, shown by `show`, tabled in
the report and flagged `http-errors`; a server that ends every connection
without a `Connection: close` header is counted as closing it
(`server-closes`); a request-mix URL of another scheme or host is refused at
`check`, with the fix. Real Python HTTP servers on 127.0.0.1 (port 0),
started and stopped by the test."""

from __future__ import annotations

import http.server
import json
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from perflab.workloads.http import ERROR_FLAG_SHARE
from test_http_any_server import _experiment, _metrics

REQUESTS_PER_CLIENT = 200


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # kept alive unless the server ends the connection
    wbufsize = -1  # a response in one write (flushed after each request), not its head and body apart
    every = 0  # answer every Nth request with a 500 (0: never)
    close_silently = False  # end the connection after each response, without saying so
    count = 0
    lock = threading.Lock()

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        with self.lock:
            type(self).count += 1
            n = type(self).count
        failing = self.every and n % self.every == 0
        body = b"boom" if failing else b"x" * 100
        self.send_response(500 if failing else 200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        if self.close_silently:
            self.close_connection = True  # no Connection: close header was sent

    def log_message(self, *args: object) -> None:
        pass


def _serve(handler: type[_Handler]) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def failing_server() -> Iterator[str]:
    """Every tenth request answered 500."""
    yield from _serve(type("Failing", (_Handler,), {"every": 10, "count": 0, "lock": threading.Lock()}))


@pytest.fixture
def closing_server() -> Iterator[str]:
    """Every connection ended after one response, with no Connection: close header."""
    yield from _serve(type("Closing", (_Handler,), {"close_silently": True, "count": 0, "lock": threading.Lock()}))


def _store(out: Path) -> tuple[dict[str, float], list[str]]:
    conn = sqlite3.connect(out / "perflab.sqlite")
    try:
        return _metrics(out), json.loads(conn.execute("SELECT flags_json FROM run").fetchone()[0])
    finally:
        conn.close()


def test_ten_percent_500s_are_a_class_a_note_a_table_column_and_a_flag(failing_server, workdir, run_cli) -> None:
    f = _experiment(workdir / "e.toml", failing_server,
                    f'requests = {REQUESTS_PER_CLIENT}\nrequest_mix = [{{ path = "/a" }}]\n')
    run_cli("run", f, "--out", workdir / "out", "--quiet")
    m, flags = _store(workdir / "out")
    sent = m["requests"] + m["errors"]
    assert m["errors_class.5xx"] == m["errors.5xx"] == m["errors"] > 0, m
    assert m["error_share.5xx"] == pytest.approx(m["errors"] / sent)
    assert 0.05 < m["error_share.5xx"] < 0.15, m  # every tenth request, of those measured
    assert m["error_share.5xx"] > ERROR_FLAG_SHARE and "http-errors" in flags, flags
    show = run_cli("show", workdir / "out").stdout
    assert "http-errors" in show and f"5xx {m['error_share.5xx']:.1%}" in show, show
    report = (workdir / "out" / "report.html").read_text()
    runs = report[report.rindex("Web server runs"):]
    assert "<th>5xx %</th>" in runs and "http-errors" in runs, runs[:3000]


def test_a_server_closing_without_the_header_is_counted_as_closing(closing_server, workdir, run_cli) -> None:
    f = _experiment(workdir / "e.toml", closing_server,
                    f'requests = {REQUESTS_PER_CLIENT}\nrequest_mix = [{{ path = "/a" }}]\n')
    run_cli("run", f, "--out", workdir / "out", "--quiet", "--no-report")
    m, flags = _store(workdir / "out")
    # every request but each client's first found its connection closed and was sent again
    assert m["errors"] == 0, m
    assert m["connections_per_req"] > 0.9, m
    assert m["closed_by_server"] >= 0.9 * 2 * REQUESTS_PER_CLIENT, m
    assert m["server_closed_share"] > 0.9 and "server-closes" in flags, (m, flags)
    assert "server-closes" in run_cli("show", workdir / "out").stdout


@pytest.mark.parametrize("url", ["http://example.com/a", "https://127.0.0.1/a", "//example.com/a"])
def test_a_request_mix_url_of_another_host_is_refused_at_check(workdir, run_cli, url: str) -> None:
    f = _experiment(workdir / "e.toml", "http://127.0.0.1:9/", f'request_mix = [{{ path = "{url}" }}]\n')
    proc = run_cli("check", f, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "workload.request_mix[0].path" in proc.stderr and "'/a'" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    (workdir / "urls.txt").write_text(f"GET /b 2\nGET {url}\n")
    f = _experiment(workdir / "file.toml", "http://127.0.0.1:9/", 'request_mix_file = "urls.txt"\n')
    proc = run_cli("check", f, check=False)
    assert proc.returncode == 2 and "line 2" in proc.stderr and "'/a'" in proc.stderr, proc.stderr
