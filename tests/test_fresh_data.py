"""[experiment] data = "fresh": every run of a workload that writes starts
from its data as loaded, on a real managed PostgreSQL with TPC-C, whose
orders and history otherwise grow run by run."""

from __future__ import annotations

from pathlib import Path

import pytest

from perflab.store import Store

TPCC = """
experiment = {{ name = "fresh-data", repetitions = 3, order = "sequential"{data} }}
target.kind = "postgres"
workload = {{ kind = "tpcc", warehouses = 1, clients = 2, duration = "3s", warmup = "0s" }}
"""


def _at_start(out: Path) -> tuple[list[dict], list[dict], dict[int, list[str]], list[dict]]:
    """Each run's TPC-C figures as its run began (the tpcc.orders effect: the
    order ids and history rows it found), its load records, the runs'
    marks, and the runs."""
    store = Store.open(out, write=False)
    try:
        effects = store.effects()
        return ([e["data"] for e in effects if e["kind"] == "tpcc.orders"],
                [e | {"run": e["run_id"]} for e in effects if e["kind"] == "load"], store.run_marks(), store.runs())
    finally:
        store.close()


@pytest.mark.parametrize("data", ["fresh", "kept"])
def test_fresh_data_starts_every_run_from_the_load(workdir: Path, run_cli, data: str) -> None:
    """Fresh: each run found the order ids and history rows of the load
    (3,001 orders a district, 30,000 history rows a warehouse, TPC-C 4.3.3.1),
    each loaded its data again (stored, timed, said in an event) and none is
    marked "fresh load" (it is the design, not a repair). Kept, the default:
    one load, and every run found what the runs before it committed."""
    f = workdir / "e.toml"
    f.write_text(TPCC.format(data=', data = "fresh"' if data == "fresh" else ""))
    run_cli("run", f, "--out", workdir / "out", "--no-report", timeout=600)
    found, loads, marks, runs = _at_start(workdir / "out")
    assert [r["status"] for r in runs] == ["done"] * 3
    assert len(found) == 3
    if data == "fresh":
        assert all(d["next_o_id_min"] == d["next_o_id_max"] == 3001 and d["history_rows"] == 30000 for d in found)
        assert [ld["run"] for ld in loads] == [1, 2, 3] and not any(ld["data"]["reload"] for ld in loads)
        assert [bool(ld["data"].get("fresh")) for ld in loads] == [False, True, True]
        assert marks == {}
        plan = run_cli("plan", f).stdout
        assert 'data = "fresh"' in plan and "4 data loads" not in plan and "3 data loads" in plan
    else:
        assert [ld["run"] for ld in loads] == [1]
        assert found[0]["next_o_id_min"] == 3001
        assert found[0]["next_o_id_sum"] < found[1]["next_o_id_sum"] < found[2]["next_o_id_sum"]
        assert found[0]["history_rows"] < found[1]["history_rows"] < found[2]["history_rows"]
