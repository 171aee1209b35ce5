"""`perflab serve DIR`: a read-only web view of a running or finished experiment.

Its own process, the standard library's ThreadingHTTPServer, and the store
read through read-only connections only (views.StoreView): it never takes
perflab's writer lock and never writes, so the run it watches is neither
blocked nor slowed (it also lowers its own priority). It listens on loopback
unless told `--bind ADDRESS`; then every path must begin with a random token
printed at start (/TOKEN/...). On loopback the Host header must name
loopback, so that a web page elsewhere cannot read it by rebinding a name.

Paths: / (the page), /api/state, /api/series?run=N&points=K&window=SECONDS,
/api/events?after=ID[&run=N], /metrics (openmetrics.py), and the report
when one was written (/report.html, /figures/NAME), opened without following
a link. Anything else is 404; a bad parameter is 400.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import re
import secrets
import socket
import stat
import sys
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from perflab.analysis.degradation import WINDOW_S
from perflab.errors import UserError
from perflab.serve.openmetrics import CONTENT_TYPE
from perflab.serve.page import PAGE
from perflab.serve.views import (
    DEFAULT_POINTS,
    MAX_POINTS,
    BadRequest,
    NotFound,
    StoreView,
    parse_int,
)

__all__ = ["serve", "make_server"]

DEFAULT_BIND = "127.0.0.1"
LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1", "[::1]"}
# What /figures/ serves: a report figure's name, no path.
FIGURE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*\.(svg|png)$")
FILE_TYPES = {".svg": "image/svg+xml", ".png": "image/png", ".html": "text/html; charset=utf-8"}


class Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], view: StoreView, token: str | None) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, Handler)
        self.view = view
        self.token = token

    @property
    def url(self) -> str:
        host, port = str(self.server_address[0]), self.server_address[1]
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}/" + (f"{self.token}/" if self.token else "")


class Handler(BaseHTTPRequestHandler):
    server: Server
    server_version = "perflab-serve"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # a page polls every few seconds: no line per request

    def do_HEAD(self) -> None:  # noqa: N802 - http.server's name
        self.do_GET()

    def do_POST(self) -> None:  # noqa: N802
        self.send_error(HTTPStatus.METHOD_NOT_ALLOWED, "read-only")

    do_PUT = do_DELETE = do_PATCH = do_POST  # noqa: N815

    def do_GET(self) -> None:  # noqa: N802
        try:
            self.route()
        except BadRequest as exc:
            self.reply(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
        except NotFound as exc:
            self.reply(HTTPStatus.NOT_FOUND, {"error": str(exc)})
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as exc:  # a request's failure (a store being replaced, say) is its own
            with contextlib.suppress(OSError):
                self.reply(HTTPStatus.SERVICE_UNAVAILABLE, {"error": f"{type(exc).__name__}: {exc}"})

    def route(self) -> None:
        if not self.host_allowed():
            raise NotFound("unknown host")
        raw = self.path
        if "\\" in raw or "%" in urlsplit(raw).path:  # no escaped slashes or dots: what is served has plain names
            raise NotFound("no such path")
        parts = urlsplit(raw)
        path = parts.path
        if self.server.token is not None:
            prefix = f"/{self.server.token}"
            given = path[:len(prefix)]
            if not (hmac.compare_digest(given.encode(), prefix.encode()) and path[len(prefix):len(prefix) + 1] in ("/", "")):
                raise NotFound("no such path")
            path = path[len(prefix):] or "/"
        params = parse_qs(parts.query, keep_blank_values=True, max_num_fields=20)
        view = self.server.view
        if path == "/":
            self.reply(HTTPStatus.OK, PAGE.encode(), "text/html; charset=utf-8")
        elif path == "/api/state":
            self.reply(HTTPStatus.OK, view.state())
        elif path == "/api/series":
            run = parse_int(params, "run", low=1, high=2**62)
            points = parse_int(params, "points", DEFAULT_POINTS, low=10, high=MAX_POINTS)
            window = parse_int(params, "window", int(WINDOW_S), low=1, high=7 * 86400)
            self.reply(HTTPStatus.OK, view.series(run, points, float(window)))
        elif path == "/api/events":
            after = parse_int(params, "after", 0, low=0, high=2**62)
            run_id = parse_int(params, "run", low=1, high=2**62) if "run" in params else None
            self.reply(HTTPStatus.OK, view.events(after, run_id))
        elif path == "/metrics":
            self.reply(HTTPStatus.OK, view.metrics_text().encode(), CONTENT_TYPE)
        elif path == "/report.html":
            self.send_file(view.dir, "report.html")
        elif path.startswith("/figures/") and FIGURE_NAME.match(path[len("/figures/"):]):
            self.send_file(view.dir, "figures", path[len("/figures/"):])
        else:
            raise NotFound("no such path")

    def host_allowed(self) -> bool:
        """On loopback, only a Host that is loopback (no DNS rebinding)."""
        if self.server.token is not None:
            return True
        host = self.headers.get("Host", "")
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        return name in LOOPBACK_NAMES

    def reply(self, status: HTTPStatus, body: Any, content_type: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else json.dumps(body, allow_nan=False, default=str).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; "
                         "style-src 'unsafe-inline'; img-src 'self' data:")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def send_file(self, base: Path, *names: str) -> None:
        """A file of the report under DIR, each part opened relative to the one
        before with O_NOFOLLOW: a link anywhere on the way is not followed."""
        fds = [os.open(base, os.O_RDONLY | os.O_DIRECTORY)]
        try:
            for i, name in enumerate(names):
                last = i == len(names) - 1
                flags = os.O_RDONLY | os.O_NOFOLLOW | (0 if last else os.O_DIRECTORY)
                try:
                    fds.append(os.open(name, flags, dir_fd=fds[-1]))
                except OSError:
                    raise NotFound("no such file") from None
            st = os.fstat(fds[-1])
            if not stat.S_ISREG(st.st_mode):
                raise NotFound("no such file")
            with os.fdopen(os.dup(fds[-1]), "rb") as f:
                data = f.read()
        finally:
            for fd in fds:
                os.close(fd)
        self.reply(HTTPStatus.OK, data, FILE_TYPES.get(Path(names[-1]).suffix, "application/octet-stream"))


def make_server(out_dir: Path, port: int = 0, bind: str | None = None) -> Server:
    """The server, bound (port 0: any free one), not yet serving."""
    view = StoreView(out_dir)
    address = bind or DEFAULT_BIND
    # any address but the default needs the token: another loopback address too (a test's), as a rule with no exception
    token = None if address in (DEFAULT_BIND, "localhost") else secrets.token_urlsafe(18)
    try:
        return Server((address, port), view, token)
    except OSError as exc:
        raise UserError(f"cannot listen on {address}:{port}: {exc.strerror}",
                        "give another --port (0 picks a free one) or --bind ADDRESS") from None


def serve(out_dir: Path, port: int = 0, bind: str | None = None) -> None:
    """Serve until interrupted; the URL is stdout's first line."""
    server = make_server(out_dir, port, bind)
    with contextlib.suppress(OSError):
        os.nice(10)  # the run it watches comes first
    print(server.url, flush=True)
    if server.token:
        print(f"perflab serve: listening on {bind} beyond loopback: every path needs the token in the URL above",
              file=sys.stderr, flush=True)
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()
