"""The benchmarks' account of a TPS ratio (benchmarks/_common.py): the whole
machine's CPU from the real /proc/stat, and the ratio taken apart into what
the drivers' own CPU gives, what the server's cost per transaction changed
and how busy the machine was."""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _common() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_common", BENCHMARKS / "_common.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_common"] = module
    spec.loader.exec_module(module)
    return module


common = _common()


def _run(cores_busy: float, driver_us: float, server_us: float) -> dict[str, float]:
    """A run on a machine where TPS is its busy cores over the CPU a
    transaction costs (driver + server): what a saturated shared machine does."""
    machine = driver_us + server_us
    return {"tps": cores_busy / machine * 1e6, "cpu_per_tx_us": driver_us, "machine_per_tx_us": machine,
            "idle_share": 1 - cores_busy / 2}


def test_the_factors_multiply_to_the_tps_ratio_and_each_moves_only_with_its_cause() -> None:
    peer = _run(1.99, 5.5, 19.0)
    # a cheaper driver, the same server cost and busy share: all of it is the driver's
    ours = _run(1.99, 4.0, 19.0)
    f = common.driver_factors(peer, ours)
    assert f["driver"] == pytest.approx(24.5 / 23.0) and f["server"] == pytest.approx(1.0)
    assert f["busy"] == pytest.approx(1.0)
    assert f["driver"] * f["server"] * f["busy"] == pytest.approx(ours["tps"] / peer["tps"])
    # the same driver cost, a dearer server (cross-CPU wake-ups) and a less busy machine
    ours = _run(1.90, 5.5, 21.0)
    f = common.driver_factors(peer, ours)
    assert f["driver"] == pytest.approx(1.0)
    assert f["server"] == pytest.approx(24.5 / 26.5) and f["busy"] == pytest.approx(1.90 / 1.99)
    assert f["driver"] * f["server"] * f["busy"] == pytest.approx(ours["tps"] / peer["tps"])
    # a floor's CPU in place of ours: the most a driver that cheap gains at the peer's server cost
    floor = common.driver_factors(peer, ours, driver_us=3.0)
    assert floor["driver"] == pytest.approx(24.5 / 22.0)
    # without /proc/stat figures there is no account
    assert common.driver_factors({**peer, "machine_per_tx_us": None}, ours) is None


def test_the_machine_s_cpu_is_read_from_proc_stat_and_counts_a_busy_loop() -> None:
    before = common.machine_cpu()
    assert before is not None and before[0] > 0 and before[1] >= 0
    until = time.process_time() + 0.3
    while time.process_time() < until:
        pass
    # other work on the machine only adds to the busy time
    figures = common.machine_figures(before, 1000)
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert figures["machine_per_tx_us"] >= (0.3 - 2 * tick) / 1000 * 1e6, figures
    assert 0 <= figures["idle_share"] < 1
    assert common.machine_figures(None, 1000) == {"machine_per_tx_us": None, "idle_share": None}
