"""Every engine name perflab uses exists in the built engine.

The stub (_engine.pyi) states the engine's shared API; a workload registered
by declaration states its own bindings in its own module (issue 46: a new
workload is one Rust module and one Python module), which the stub allows
with a module `__getattr__`. So a misspelt `_engine.NAME` would type-check:
this test reads every `_engine.NAME` in perflab's code and finds it in the
extension, and every registered workload's bindings are there too.
"""

from __future__ import annotations

import re
from pathlib import Path

from perflab import _engine
from perflab.workloads import WORKLOADS

PACKAGE = Path(_engine.__file__).parent
USE = re.compile(r"\b_engine\.([A-Za-z_][A-Za-z0-9_]*)")


def test_every_engine_name_used_is_in_the_built_engine() -> None:
    used: dict[str, str] = {}
    for path in PACKAGE.rglob("*.py"):
        for name in USE.findall(path.read_text()):
            used.setdefault(name, str(path.relative_to(PACKAGE)))
    assert len(used) > 20  # the reader found the uses (a changed idiom would find none)
    missing = {name: where for name, where in used.items() if not hasattr(_engine, name)
               and not re.search(rf"\b(class|def) {name}\b|\b{name}\s*[:=]", (PACKAGE / "_engine.pyi").read_text())}
    assert missing == {}, f"not in the built engine: {missing}"


def test_a_registered_workloads_bindings_are_typed_in_its_own_module() -> None:
    """ycsb, registered by declaration: its bindings exist at run time and
    its module states them (not the stub)."""
    from perflab.workloads import ycsb

    assert "ycsb" in WORKLOADS.names()
    assert ycsb.ycsb_run is _engine.ycsb_run and ycsb.ycsb_load is _engine.ycsb_load
    assert "def ycsb_run" not in (PACKAGE / "_engine.pyi").read_text()
