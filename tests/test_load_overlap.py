"""The load steps' statements overlapped on parallel sessions
(perflab.workloads.generated.run_overlapped): what waits for what, in
general and on the TPC-H schema, and a real server running a plan whose
statement fails."""

from __future__ import annotations

from typing import Any

import pytest

from perflab.workloads.generated import plan_overlapped, run_overlapped, statement_locks
from perflab.workloads.tpch import schema
from perflab.workloads.tpch.schema import Step


def test_each_statement_waits_for_the_earlier_ones_on_its_tables_but_two_index_builds_do_not() -> None:
    steps = [
        Step("primary keys", ("alter table a add constraint a_pkey primary key (x)",
                              "alter table b add constraint b_pkey primary key (y)")),
        Step("analyze", ("analyze a", "analyze b")),
        Step("foreign keys", ("alter table a add constraint a_b_fk_0 foreign key (x) references b (y)",)),
        Step("secondary indexes", ("create index a_x_idx on a (x)", "create index a_z_idx on a (z)",
                                   "create index b_y_idx on b (y)")),
        Step("other", ("vacuum",)),
    ]
    jobs = plan_overlapped(steps, {"a": 100, "b": 10})
    waits = {j.sql.split(" (")[0]: {b.sql.split(" (")[0] for b in j.blockers} for j in jobs}
    assert waits["alter table b add constraint b_pkey primary key"] == set()
    assert waits["analyze a"] == {"alter table a add constraint a_pkey primary key"}
    assert waits["alter table a add constraint a_b_fk_0 foreign key"] == {
        "alter table a add constraint a_pkey primary key", "alter table b add constraint b_pkey primary key",
        "analyze a", "analyze b"}
    fk = "alter table a add constraint a_b_fk_0 foreign key"
    assert waits["create index a_x_idx on a"] == {"alter table a add constraint a_pkey primary key",
                                                  "analyze a", fk}
    assert fk in waits["create index a_z_idx on a"]
    assert "create index a_x_idx on a" not in waits["create index a_z_idx on a"]  # SHARE with SHARE
    assert waits["vacuum"] == {j.sql.split(" (")[0] for j in jobs[:-1]}  # a form it does not know: alone
    assert [j.cost for j in jobs][:2] == [100, 10]


def test_the_tpch_plan_puts_lineitems_foreign_keys_before_its_indexes_and_locks_as_postgresql_does() -> None:
    steps = schema.load_steps("postgres")
    assert [s.name for s in steps] == ["primary keys", "analyze", "foreign keys", "secondary indexes"]
    assert statement_locks("alter table lineitem add constraint lineitem_orders_fk_6 foreign key (l_orderkey) "
                           "references orders (o_orderkey)") == {"lineitem": "share row exclusive",
                                                                 "orders": "share row exclusive"}
    assert statement_locks("create index x on lineitem (l_shipdate)") == {"lineitem": "share"}
    jobs = plan_overlapped(steps, {"lineitem": 6_000_000, "orders": 1_500_000})
    assert all("*" not in j.locks for j in jobs), "every statement of the TPC-H load is understood"


def test_a_failing_statement_stops_the_plan_and_is_raised(scratch_db: Any) -> None:
    with scratch_db.connect() as conn:
        conn.execute("create table a (x int)")
        conn.execute("create table b (y int)")
        conn.execute("insert into a select g from generate_series(1, 1000) g")
    done: list[str] = []
    ok = [Step("primary keys", ("alter table a add constraint a_pkey primary key (x)",
                                "alter table b add constraint b_pkey primary key (y)")),
          Step("secondary indexes", ("create index a_x_idx on a (x)", "create index b_y_idx on b (y)"))]
    run_overlapped(scratch_db, ok, 2, {"a": 1000}, done.append)
    assert done == ["primary keys", "secondary indexes"]
    # a foreign key that does not hold (no row in b): the error comes out, nothing hangs
    bad = [Step("foreign keys", ("alter table a add constraint a_b_fk foreign key (x) references b (y)",)),
           Step("analyze", ("analyze a", "analyze b"))]
    done.clear()
    with pytest.raises(Exception, match="violates foreign key constraint"):
        run_overlapped(scratch_db, bad, 2, {"a": 1000}, done.append)
    assert done == []
