"""The io_uring soak (benchmarks/uring_soak.py), bounded for the suite: a few
rounds of TPC-B runs whose server is killed, stalled or restarted at random
moments, on epoll and io_uring. The full soak (200 rounds) is run on demand;
its figures are in benchmarks/README.md.

The seed is random per session and printed on failure (set PERFLAB_SOAK_SEED
to replay one); every failing run's full record is written to a file whose
path is in the failure message."""

from __future__ import annotations

import importlib.util
import os
import random
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _soak_module() -> ModuleType:
    sys.path.insert(0, str(BENCHMARKS))  # for its `_common` import
    try:
        spec = importlib.util.spec_from_file_location("uring_soak", BENCHMARKS / "uring_soak.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["uring_soak"] = module  # its dataclasses look themselves up there
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCHMARKS))


soak = _soak_module()


def test_the_counting_rule_allows_one_unacknowledged_commit_per_lost_client() -> None:
    done = {"outcome": "done", "transactions": 100, "lost_clients": 2}
    assert soak.check_counts(done, 100) == ""
    assert soak.check_counts(done, 102) == "", "two replies lost with their connections"
    assert soak.check_counts(done, 103).startswith("miscount")
    assert soak.check_counts(done, 99).startswith("lost")
    none_lost = {"outcome": "done", "transactions": 5, "lost_clients": 0}
    assert soak.check_counts(none_lost, 6).startswith("miscount")
    refused = {"outcome": "connect-error", "message": "refused"}
    assert soak.check_counts(refused, 0) == ""
    assert soak.check_counts(refused, 1) != ""
    assert soak.check_counts({"outcome": "no-output"}, 0).startswith("no result")


def test_the_summary_counts_runs_whose_clients_moved() -> None:
    plan = soak.draw_plan(random.Random(1), 1.0)
    followed = soak.Outcome(round=1, io="uring", plan=plan, result={"events": [
        [0.0, "io", "io: io_uring"],
        [4.0, "follow", "clients followed their server processes: 3 moves of a client to the driver thread on "
                        "its server process's CPU (8 of 8 clients' processes known)"]]})
    stayed = soak.Outcome(round=2, io="uring", plan=plan, result={"events": [
        [4.0, "follow", "clients did not follow their server processes (follow = false)"]]})
    assert soak.moves(followed) == 3 and soak.moves(stayed) == 0
    assert soak.summary([followed, stayed], ["uring"])[2].endswith("| 1 (3) |")


@pytest.mark.slow
def test_no_hang_and_no_miscount_under_kills_stalls_and_restarts(tmp_path: Path) -> None:
    seed = int(os.environ.get("PERFLAB_SOAK_SEED") or random.SystemRandom().getrandbits(32))
    # Long stalls (past END_GRACE) take 12 s a run; the full soak has them.
    args = soak.parse_args(["--runs", "10", "--seed", str(seed), "--duration", "0.5",
                            "--long-stall-share", "0", "--out", str(tmp_path / "soak")])
    said: list[str] = []
    outcomes = soak.soak(args, say=said.append)
    failed = [line for line in said if "FAILED" in line]
    assert not failed, f"seed {seed}:\n" + "\n".join(failed)
    assert len(outcomes) == 20
    assert {o.io for o in outcomes} == {"epoll", "uring"}
    # Each run used the io method it asked for (no silent fallback).
    for o in outcomes:
        if o.result.get("outcome") == "done":
            assert o.result["io"].startswith({"epoll": "epoll", "uring": "io_uring"}[o.io]), o.result["io"]
    # Not vacuous: transactions were counted against the server's own count.
    assert sum(o.history_rows or 0 for o in outcomes) > 100, f"seed {seed}"
