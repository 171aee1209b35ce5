"""A workload is its own module (issue 46, item 2): the Python class declares
itself (`@WORKLOADS.declare`), the engine's protocol module declares
`WORKLOAD` (crates/engine/src/harness/registry.rs) and gets `NAME_run` and
`NAME_load` in perflab._engine with no binding file or list of its own."""

from __future__ import annotations

import ast
import inspect
import sys
import time
from pathlib import Path

import pytest

from perflab import _engine
from perflab.registry import Registry
from perflab.workloads import WORKLOADS
from perflab.workloads.base import Workload
from perflab.workloads.harness import engine_settings_of

STUB = Path(_engine.__file__).with_name("_engine.pyi")


def test_a_module_that_declares_a_kind_is_found_without_a_line_elsewhere(tmp_path, monkeypatch) -> None:
    package = tmp_path / "plugins46"
    package.mkdir()
    (package / "__init__.py").write_text('from perflab.registry import Registry\n'
                                         'KINDS = Registry("kind", package=__name__)\n')
    (package / "alpha.py").write_text('from plugins46 import KINDS\n\n'
                                      '@KINDS.declare("alpha", "the first")\nclass Alpha:\n    pass\n')
    (package / "helpers.py").write_text("X = 1\n")  # declares nothing: imported, not listed
    monkeypatch.syspath_prepend(str(tmp_path))
    kinds = __import__("plugins46").KINDS
    assert "plugins46.alpha" not in sys.modules  # nothing imported before the first lookup
    assert kinds.names() == ["alpha"]
    assert kinds.get("alpha").__name__ == "Alpha"
    assert [e.description for e in kinds.entries()] == ["the first"]


def test_a_module_that_fails_to_import_is_seen_again_at_the_next_lookup(tmp_path, monkeypatch) -> None:
    package = tmp_path / "plugins46b"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "broken.py").write_text("raise ImportError('missing library')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    kinds = Registry("kind", package="plugins46b")
    for _ in range(2):
        with pytest.raises(ImportError):
            kinds.names()


def test_every_workload_class_in_the_package_is_registered_under_its_kind() -> None:
    names = WORKLOADS.names()
    assert {"tpcb", "oltp", "tpcc", "http", "stream", "tpch", "sql", "ssb", "queries"} <= set(names)
    classes = {WORKLOADS.get(n) for n in names}
    for name in names:
        cls = WORKLOADS.get(name)
        assert issubclass(cls, Workload) and not inspect.isabstract(cls)
        assert cls.Settings.model_fields["kind"].annotation.__args__ == (name,)  # Literal["tpcb"]
    package = Path(inspect.getfile(Workload)).parent
    for path in package.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name.endswith("Workload") and node.name != "Workload":
                module = ".".join(path.relative_to(package.parent.parent).with_suffix("").parts)
                module = module.removesuffix(".__init__")
                cls = getattr(sys.modules[module], node.name)
                assert cls in classes, f"{path}: {node.name} is not declared (@WORKLOADS.declare)"


def test_the_engine_declares_its_workloads_and_binds_each_without_a_file_of_its_own() -> None:
    declared = _engine.workloads()
    assert "tpcb" in declared and declared == sorted(declared)
    stub = STUB.read_text()
    for name in declared:
        assert name in WORKLOADS  # a protocol is driven by a Python workload of the same kind
        assert getattr(_engine, f"{name}_run").__name__ == f"{name}_run"  # drivers call it by this name
        # its binding is typed: in the stub, or (a workload of two files) in its own module
        own = inspect.getsource(sys.modules[WORKLOADS.get(name).__module__])
        assert f"def {name}_run(" in stub or f"{name}_run: " in own and f"= _engine.{name}_run" in own, name


def test_a_declared_workloads_bad_own_settings_are_a_config_error_before_connecting() -> None:
    run = {"harness": engine_settings_of(clients=1, duration=1.0), "t0_ns": time.monotonic_ns()}
    conninfo = "host=127.0.0.1 port=1 user=nobody dbname=none"  # never reached
    with pytest.raises(_engine.ConfigError, match="script"):
        _engine.tpcb_run(conninfo, script="nope", scale=1, protocol="simple", **run)
    with pytest.raises(_engine.ConfigError, match="scale"):
        _engine.tpcb_run(conninfo, script="tpcb-like", protocol="simple", **run)
    with pytest.raises(_engine.ConfigError, match="scale"):
        _engine.tpcb_run(conninfo, script="tpcb-like", scale=-1, protocol="simple", **run)
    with pytest.raises(_engine.ConfigError, match="io"):
        _engine.tpcb_run(conninfo, script="tpcb-like", scale=1, protocol="simple", t0_ns=0,
                         harness=engine_settings_of(clients=1, duration=1.0) | {"io": "nope"})
    with pytest.raises(TypeError, match="harness"):
        _engine.tpcb_run(conninfo, script="tpcb-like", scale=1, protocol="simple", t0_ns=0)
