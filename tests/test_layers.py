"""No module imports one from a higher layer (the map is CONTRIBUTING.md's).

Read from the source with `ast`, imports inside functions and under
TYPE_CHECKING included: a lazy import of a higher layer is still a
dependency the wrong way round. So is a module named in a string
("perflab.targets.postgres:undo_server", importlib.import_module(...)): it
is imported all the same, by whoever reads the string.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "python" / "perflab"

# Lowest first. A module may import its own layer or any below it.
LAYERS: list[set[str]] = [
    {"perflab", "perflab._engine", "perflab.errors", "perflab.units", "perflab.secrets", "perflab.settings_model", "perflab.problems",
     "perflab.registry", "perflab.model", "perflab.endpoints", "perflab.context", "perflab.section",
     "perflab.host", "perflab.progress", "perflab.proc", "perflab.guardian", "perflab.hostctl", "perflab.cache"},
    {"perflab.analysis", "perflab.targets", "perflab.store", "perflab.drivers"},
    {"perflab.workloads", "perflab.collectors"},
    {"perflab.spec", "perflab.plan", "perflab.search", "perflab.keys", "perflab.cost"},
    {"perflab.runner", "perflab.hostrun", "perflab.drivernet", "perflab.export", "perflab.report", "perflab.clean",
     "perflab.serve"},
    {"perflab.cli"},
]


def layer_of(module: str) -> int:
    """The layer of the longest listed prefix of `module`."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        for index, layer in enumerate(LAYERS):
            if prefix in layer:
                return index
    raise AssertionError(f"{module} is in no layer: add it to LAYERS (and to CONTRIBUTING.md's map)")


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


# A string that is a module of perflab's, or "module:function" in one.
NAMED = re.compile(r"^(perflab(?:\.[A-Za-z_]\w*)+)(?::[A-Za-z_]\w*)?$")


def named_by_string(tree: ast.AST) -> list[tuple[int, str]]:
    """Modules named by a string constant (not a docstring: prose may name any module)."""
    docstrings = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            match = NAMED.match(node.value)
            if match:
                out.append((node.lineno, match.group(1)))
    return out


def imported(path: Path) -> list[tuple[int, str]]:
    out = []
    tree = ast.parse(path.read_text(), str(path))
    out += named_by_string(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.startswith("perflab")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("perflab"):
            # `from perflab import _engine` names a module; `from perflab.x import y` names x
            if node.module == "perflab":
                out += [(node.lineno, f"perflab.{a.name}") for a in node.names]
            else:
                out.append((node.lineno, node.module))
    return out


def test_no_module_imports_from_a_higher_layer() -> None:
    violations = []
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 40
    for path in modules:
        importer = module_name(path)
        for line, target in imported(path):
            if layer_of(target) > layer_of(importer):
                violations.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {importer} "
                                  f"(layer {layer_of(importer)}) imports {target} (layer {layer_of(target)})")
    assert not violations, "\n".join(violations)


def test_the_check_sees_a_violation() -> None:
    # the workloads sit above the targets: the other way round is flagged
    assert layer_of("perflab.targets.postgres") < layer_of("perflab.workloads.tpcb")
    assert layer_of("perflab.context") < layer_of("perflab.store") < layer_of("perflab.report.builder")


def test_a_module_named_in_a_string_counts_as_imported() -> None:
    # the guardian's old undo table named the targets above it as strings
    tree = ast.parse('"""Docs may name perflab.targets.postgres."""\n'
                     'UNDO = {"postgres": "perflab.targets.postgres:undo_server"}\n'
                     'importlib.import_module("perflab.drivers.ray")\n'
                     'x = "perflab-tpcb"\n')
    assert named_by_string(tree) == [(2, "perflab.targets.postgres"), (3, "perflab.drivers.ray")]


def module_edges(tree: ast.AST, importer: str, modules: set[str]) -> set[str]:
    """The perflab modules a module imports when it runs, each import where it
    stands (at the top, inside a function, or named in a string): `from
    perflab.x import y` names the module perflab.x.y where there is one. An
    import under TYPE_CHECKING (an annotation's type, never run) and a string
    naming the module's own package (where its data files are, for
    importlib.resources: Python imports a package before any module in it)
    are no import of code."""
    names = [name for _, name in named_by_string(tree) if not importer.startswith(f"{name}.")]
    typing_only = {id(inner) for node in ast.walk(tree)
                   if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                   for stmt in node.body for inner in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names += [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                      for a in node.names]
    return {name for name in names if name in modules} - {importer}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The modules that import each other in a loop: the strongly connected
    components of more than one module (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        work = [(root, iter(sorted(edges[root])))]
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None and child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                work.append((child, iter(sorted(edges.get(child, ())))))
            elif child is not None:
                if child in stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = stack[stack.index(node):]
                    del stack[stack.index(node):]
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_modules_import_each_other_in_a_circle() -> None:
    paths = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    edges = {m: module_edges(ast.parse(p.read_text(), str(p)), m, set(paths)) for m, p in paths.items()}
    found = circles(edges)
    said = [", ".join(f"{m} -> {' '.join(sorted(edges[m] & set(c)))}" for m in c) for c in found]
    assert not found, "modules that import each other in a loop (lazy imports count):\n" + "\n".join(said)


def test_the_circle_check_sees_a_circle_and_a_lazy_import() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
    tree = ast.parse("import perflab.spec\nif TYPE_CHECKING:\n    from perflab.keys import keys\n\n"
                     "def f():\n    from perflab.hostctl import netns, Rate\n")
    modules = {"perflab.spec", "perflab.hostctl", "perflab.hostctl.netns", "perflab.plan", "perflab.keys"}
    assert module_edges(tree, "perflab.plan", modules) == {"perflab.spec", "perflab.hostctl", "perflab.hostctl.netns"}
    resources = ast.parse('files("perflab.hostctl")\nfiles("perflab.spec")\n')
    assert module_edges(resources, "perflab.hostctl.netns", modules) == {"perflab.spec"}


def test_workloads_and_collectors_do_not_import_each_other() -> None:
    """Plug-ins of the two kinds share a layer, not code: what both need (a
    /proc reader, say) lives a layer down."""
    kinds = ("perflab.workloads", "perflab.collectors")
    crossing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        importer = module_name(path)
        own = next((k for k in kinds if importer == k or importer.startswith(f"{k}.")), None)
        if own is None:
            continue
        crossing += [f"{path.relative_to(PACKAGE.parent)}:{line}: {target}" for line, target in imported(path)
                     if any(target == k or target.startswith(f"{k}.") for k in kinds if k != own)]
    assert not crossing, "\n".join(crossing)


ENGINE = PACKAGE.parents[1] / "crates" / "engine" / "src"
RUST_PATH = re.compile(r"\b((?:crate|super|self)(?:::(?:super|[a-z_][a-z0-9_]*))*)::")
RUST_MOD = re.compile(r"^\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+([a-z_0-9]+)\s*;", re.MULTILINE)


def rust_module(path: Path) -> tuple[str, ...]:
    parts = list(path.relative_to(ENGINE).with_suffix("").parts)
    return tuple(parts[:-1] if parts[-1] in ("lib", "mod") else parts)


def rust_edges(text: str, module: tuple[str, ...], modules: set[tuple[str, ...]]) -> set[tuple[str, ...]]:
    """The engine's modules that `module` names (`crate::pg::PgError`,
    `super::run::Shared`, `child::X` of a `mod child;`), each taken to the
    deepest module file of its path; its tests (after `#[cfg(test)]`) and
    the module's own parents (whose `mod` lines make them name it) left out."""
    text = re.sub(r"//.*", "", text.split("#[cfg(test)]")[0])
    named = set()
    for match in RUST_PATH.finditer(text):
        path: list[str] = list(module)
        for i, word in enumerate(match.group(1).split("::")):
            if word == "crate" and i == 0:
                path = []
            elif word == "super":
                path = path[:-1]
            elif word != "self":
                path.append(word)
        while path and tuple(path) not in modules:
            path.pop()
        named.add(tuple(path))
    named |= {(*module, child) for child in RUST_MOD.findall(text) if re.search(rf"\b{child}::", text)}
    return {m for m in named if m in modules and m != module[:len(m)]}


def test_no_engine_modules_name_each_other_in_a_circle() -> None:
    paths = {rust_module(p): p for p in ENGINE.rglob("*.rs") if p.name != "tests.rs" and "tests" not in p.parts}
    assert len(paths) > 40
    edges = {"::".join(m): {"::".join(t) for t in rust_edges(p.read_text(), m, set(paths))} for m, p in paths.items()}
    found = circles(edges)
    said = [", ".join(f"{m} -> {' '.join(sorted(edges[m] & set(c)))}" for m in c) for c in found]
    assert not found, "engine modules that name each other in a loop:\n" + "\n".join(said)


def test_the_engine_check_sees_a_module_named_through_super_and_crate() -> None:
    modules = {(), ("error",), ("harness",), ("harness", "run"), ("harness", "worker"), ("pg",), ("pg", "error")}
    text = "use super::worker::worker;\nuse super::{EngineError, Protocol};\nuse crate::pg::error::PgError;\n"
    assert rust_edges(text, ("harness", "run"), modules) == {("harness", "worker"), ("pg", "error")}
    assert rust_edges("mod run;\npub use run::Run;\n", ("harness",), modules) == {("harness", "run")}
