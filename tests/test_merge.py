"""The distributed driver's merge has every field of the engine's result
record, read from the engine itself: a real harness run (HTTP GETs of one
file from a Python server on 127.0.0.1) shipped as a worker's result and
merged alone gives back the run's own figures, field by field."""

from __future__ import annotations

import functools
import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from perflab import _engine
from perflab.drivers import merge
from perflab.workloads.harness import engine_settings_of


def test_every_field_of_the_engine_record_has_a_merge_rule() -> None:
    assert "driver_cpu_s" in merge.RECORD and "by_type" in merge.RECORD
    assert merge.unmerged() == []


def test_a_merged_second_has_every_field_of_the_engine_s_second() -> None:
    """MergedInterval is written out for the type checker; the engine's
    Interval is the source: a field added there fails here until merged."""
    import dataclasses

    merged = [f.name for f in dataclasses.fields(merge.MergedInterval)]
    assert set(merged) == set(merge.record_fields(_engine.Interval)) | {"workers"}


class _Quiet(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the engine's client asks

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("fileset")
    path = root / "dir00000" / "class1_0"
    path.parent.mkdir()
    path.write_bytes(b"x" * _engine.fileset_file_size(1, 0))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_one_worker_merged_is_the_run_itself(server: str, tmp_path: Path) -> None:
    out = _engine.http_run(server, host="127.0.0.1", dirs=1, t0_ns=time.monotonic_ns(), only=(0, 1, 0),
                           harness=engine_settings_of(clients=2, threads=1, duration=1.0, seed=1, io="epoll", pin="off", follow=False))
    assert out.transactions > 0, out.errors_by_kind
    merged = merge.merge([merge.WorkerResult.of(0, "here", out)])
    for name in merge.RECORD:
        mine, theirs = getattr(merged, name), getattr(out, name)  # every field is there
        if name in ("latency", "lag", "failed_latency"):
            assert (mine.count, mine.p99_us, mine.max_us) == (theirs.count, theirs.p99_us, theirs.max_us), name
        elif name == "by_type":
            assert [(t.name, t.committed, t.failed, t.body_bytes) for t in mine] == \
                [(t.name, t.committed, t.failed, t.body_bytes) for t in theirs]
        elif name == "series":
            assert sum(i.transactions for i in mine) == sum(i.transactions for i in theirs if not i.warmup)
        elif name == "events":
            assert [(e.kind, e.message) for e in mine] == [(e.kind, f"driver worker 0 (here): {e.message}")
                                                           for e in theirs]
        elif name == "tps":
            assert mine == pytest.approx(theirs, rel=1e-6)
        elif name.endswith("histogram") and theirs is not None:
            assert _engine.hdr_summary(bytes(mine)).count == _engine.hdr_summary(bytes(theirs)).count, name
        else:
            assert mine == (dict(theirs) if isinstance(theirs, dict) else theirs), name
