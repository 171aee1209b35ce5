"""Property-based tests of the experiment file (hypothesis).

Random documents are built from the real schema's keys (the settings models of
every registered target, workload and collector), then spoiled: wrong types,
out-of-range and huge numbers, unknown keys, keys and tables given twice, odd
unicode, deep nesting. The property: `perflab check` never shows a traceback
and exits 0 or 2, and `perflab plan` agrees with it (the same exit status, the
same message, the same number of runs).

Examples are derandomized and bounded so the suite stays quick and repeatable;
PERFLAB_FUZZ_EXAMPLES=5000 explores further, with new random examples each time. A failure found here is kept as a
regular case in tests/data/broken.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import annotated_types
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from perflab import cli
from perflab.collectors import COLLECTORS
from perflab.hostctl.cgroups import ResourceSettings
from perflab.hostctl.knobs import HostSettings
from perflab.hostctl.netns import DriverNetwork
from perflab.hostctl.scratchfs import FsSettings
from perflab.spec import ExperimentSection, FileModel
from perflab.targets import TARGETS
from perflab.tomldoc import tomllib
from perflab.workloads import WORKLOADS

EXAMPLES = int(os.environ.get("PERFLAB_FUZZ_EXAMPLES", "150"))
# In the suite the same examples every time; exploring (the variable set), new ones.
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize="PERFLAB_FUZZ_EXAMPLES" not in os.environ,
                database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _keys(model: Any) -> list[str]:
    return list(model.model_fields)


TARGET_KEYS = {kind: _keys(TARGETS.get(kind).Settings) for kind in TARGETS.names()}
WORKLOAD_KEYS = {kind: _keys(WORKLOADS.get(kind).Settings) for kind in WORKLOADS.names()}
COLLECTOR_KEYS = {name: _keys(COLLECTORS.get(name).Settings) for name in COLLECTORS.names()}
# Valid starting points, so that many documents get past the first error: the
# kinds that need more than their kind say so here; every other registered kind
# starts from its kind alone (the list follows the registries).
TARGET_NEEDS = {"process": {"kind": "process", "command": "true {port} {root}"},
                "http": {"kind": "http", "url": "http://127.0.0.1:8080/"},
                "mysql": {"kind": "mysql", "dsn": "mysql://perflab@127.0.0.1:1/"}}
TARGET_BASES = {kind: TARGET_NEEDS.get(kind, {"kind": kind}) for kind in TARGET_KEYS}
# A workload's starting point is its own: its class's `example` (perflab.workloads.base).
WORKLOAD_BASES = {kind: {"kind": kind, **WORKLOADS.get(kind).example} for kind in WORKLOAD_KEYS}
# [host], [target.resources] and [target.storage]'s scratch filesystems:
# their keys, fuzzed like the rest (check reads /proc and /sys; it changes nothing).
HOST_KEYS = _keys(HostSettings)
RESOURCE_KEYS = _keys(ResourceSettings)
FS_KEYS = _keys(FsSettings)

HUGE = [2**63 - 1, 2**63, -(2**63) - 1, 2**64, 2**32, 10**30, 10**400, 10_001, 0, -1]
DURATIONS = ["60s", "1e400s", "99999999999999999999h", "-1s", "0s", "250ms", "31d", "32d", "", "1h30m", "NaNs"]
# Right-to-left marks, zero-width joiners, combining marks, emoji, NUL and DEL.
ODD = st.text(st.characters(exclude_categories=("Cs",)), max_size=12) | st.sampled_from(
    ["\u202e", "e\u0301", "\u200d", "\U0001f600", "\x00", "\x7f", "ｋｉｎｄ", "name\n", " "]
)
scalars = st.one_of(
    st.integers(-3, 40), st.integers(), st.sampled_from(HUGE),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e300, -0.0, 5e-324, 1e-300]),
    st.sampled_from(DURATIONS), ODD, st.booleans(),
)
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(ODD, inner, max_size=3), max_leaves=12
)


def _nested(depth: int, leaf: Any, table: bool) -> Any:
    for _ in range(depth):
        leaf = {"x": leaf} if table else [leaf]
    return leaf


deep = st.builds(_nested, st.integers(10, 400), scalars, st.booleans())
anything = st.one_of(scalars, values, deep)


@st.composite
def section(draw: Any, base: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    out = dict(base)
    for key in draw(st.lists(st.sampled_from(keys), max_size=2)):
        out[key] = draw(scalars if draw(st.booleans()) else anything)
    if draw(st.integers(0, 5)) == 0 and out:
        out.pop(draw(st.sampled_from(sorted(out))))
    if draw(st.integers(0, 5)) == 0:
        out[draw(ODD)] = draw(anything)  # an unknown key
    return out


# A factor each workload takes, with values from its range: its class's
# `sample_factor`, an integer setting whose bounds its model states.
def _factor(kind: str) -> tuple[str, int, int]:
    name = WORKLOADS.get(kind).sample_factor
    assert name, f"workload {kind} names no sample_factor"  # a new workload must name its factor
    field = WORKLOADS.get(kind).Settings.model_fields[name]
    (lo,) = [m.ge for m in field.metadata if isinstance(m, annotated_types.Ge)]
    (hi,) = [m.le for m in field.metadata if isinstance(m, annotated_types.Le)]
    return f"workload.{name}", lo, hi


GOOD_FACTORS = {kind: _factor(kind) for kind in WORKLOAD_KEYS}


def valid_document(draw: Any, target_kind: str, workload_kind: str) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "experiment": {"name": "fuzz", "repetitions": draw(st.integers(1, 10_000)),
                       "order": draw(st.sampled_from(["sequential", "random"])), "seed": draw(st.integers(0, 2**63 - 1))},
        "target": dict(TARGET_BASES[target_kind]),
        "workload": dict(WORKLOAD_BASES[workload_kind]),
        "collect": {"vmstat": {"interval": draw(st.sampled_from(["10ms", "1s", "31d", 0.01, 2678400]))}},
    }
    web = ("nginx", "process", "http")
    if ((target_kind == "duckdb" and workload_kind == "tpcb") or (target_kind == "router") != (workload_kind == "stream")
            or (target_kind in web) != (workload_kind == "http")
            or (target_kind in ("mariadb", "mysql") and workload_kind not in ("sql", "queries"))):
        # the nearest valid pair: the workload decides the target
        nearest = {"stream": "router", "http": "nginx"}.get(workload_kind, "postgres")
        doc["target"] = dict(TARGET_BASES[nearest])
    path, low, high = GOOD_FACTORS[workload_kind]
    doc["factors"] = {path: draw(st.lists(st.integers(low, high), min_size=1, max_size=120, unique=True))}
    return doc


@st.composite
def documents(draw: Any) -> dict[str, Any]:
    target_kind = draw(st.sampled_from(sorted(TARGET_KEYS)))
    workload_kind = draw(st.sampled_from(sorted(WORKLOAD_KEYS)))
    if draw(st.integers(0, 2)) == 0:  # a valid file near the bounds
        return valid_document(draw, target_kind, workload_kind)
    doc: dict[str, Any] = {
        "experiment": draw(section({"name": "fuzz"}, _keys(ExperimentSection))),
        "target": draw(section(TARGET_BASES[target_kind], TARGET_KEYS[target_kind])),
        "workload": draw(section(WORKLOAD_BASES[workload_kind], WORKLOAD_KEYS[workload_kind])),
    }
    if draw(st.booleans()):
        paths = [f"workload.{k}" for k in WORKLOAD_KEYS[workload_kind]] + [
            f"target.{k}" for k in TARGET_KEYS[target_kind]
        ] + ["target.settings.work_mem", "collect.vmstat.interval", "experiment.repetitions", "workload",
             "host.sysctl.vm.dirty_ratio", "host.hugepages", "target.resources.memory",
             "target.storage.data_fs.size", "driver.cpus", "driver.network.namespace", "driver.network.delay",
             "driver.workers"]
        factor_values = st.lists(scalars, min_size=0, max_size=4) | anything
        doc["factors"] = draw(st.dictionaries(st.sampled_from(paths) | ODD, factor_values, max_size=3))
    if draw(st.booleans()):
        collect = {name: draw(st.booleans() | section({}, keys)) for name, keys in COLLECTOR_KEYS.items()
                   if draw(st.booleans())}
        doc["collect"] = collect if draw(st.integers(0, 4)) else draw(anything)
    if draw(st.integers(0, 3)) == 0:
        doc["host"] = draw(section({}, HOST_KEYS)) if draw(st.integers(0, 4)) else draw(anything)
    if target_kind == "postgres" and draw(st.integers(0, 3)) == 0:
        doc["target"]["resources"] = draw(section({}, RESOURCE_KEYS))
    if target_kind == "postgres" and draw(st.integers(0, 3)) == 0:
        doc["target"]["storage"] = {"data_fs": draw(section({"type": "ext4", "size": "1GB"}, FS_KEYS))}
    if draw(st.integers(0, 6)) == 0:
        doc["driver"] = draw(section({}, ["cpus", "kind", "address", "workers", "network"]))
        if draw(st.booleans()):
            doc["driver"]["network"] = draw(section({"namespace": True}, _keys(DriverNetwork)))
    if draw(st.integers(0, 6)) == 0:
        doc.pop(draw(st.sampled_from(sorted(doc))))
    if draw(st.integers(0, 6)) == 0:
        doc[draw(st.sampled_from([k for k in _keys(FileModel) if k not in doc] or ["extra"]))] = draw(anything)
    return doc


# ------------------------------------------------------------------ TOML text


def toml_string(text: str) -> str:
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else toml_string(key)


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + "}"


def to_toml(doc: dict[str, Any]) -> list[str]:
    top = [f"{toml_key(k)} = {toml_value(v)}" for k, v in doc.items() if not isinstance(v, dict)]
    tables = []
    for k, v in doc.items():
        if isinstance(v, dict):
            tables += [f"[{toml_key(k)}]", *(f"{toml_key(kk)} = {toml_value(vv)}" for kk, vv in v.items())]
    return top + tables


# Lines that are not TOML, or TOML that tomllib reads only in part.
BROKEN_LINES = ['"\\uD800x" = 1', '[ "\\uD800" ]', "a.b = 1", "a = {b = 1, b = 2}", "[[experiment]]", "= 1",
                'x = """', "x = '" + "''", "[", "[]", "x = 1979-05-27T07:32:00Z", "x = 0x_1", "\ufeff[experiment]",
                "x = [1, 2", "[target.settings.a.b]", "x = 1 2", "'\\u0' = 1"]


@st.composite
def experiment_texts(draw: Any) -> str:
    lines = to_toml(draw(documents()))
    if lines and draw(st.integers(0, 4)) == 0:  # a key or a table given twice
        i = draw(st.integers(0, len(lines) - 1))
        lines.insert(draw(st.integers(i + 1, len(lines))), lines[i])
    if draw(st.integers(0, 5)) == 0:  # a line that is not (quite) TOML
        lines.insert(draw(st.integers(0, len(lines))), draw(st.sampled_from(BROKEN_LINES) | ODD))
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ the property


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = cli.main(argv)
    return status, out.getvalue(), err.getvalue()


def _runs(line: str) -> int:
    m = re.search(r": (\d+) runs?\b", line)
    assert m, line
    return int(m.group(1))


def check_and_plan_agree(path: Path) -> None:
    check = _cli(["check", str(path)])
    plan = _cli(["plan", str(path)])
    event(f"exit {check[0]}")
    assert check[0] in (0, 2), check
    assert plan[0] == check[0], (check, plan)
    assert "Traceback" not in check[2] + plan[2]
    if check[0] == 2:
        assert check[2].startswith("perflab: error:") and plan[2] == check[2]
        assert check[1] == plan[1] == ""
    else:
        rows = [line for line in plan[1].splitlines() if not line.startswith("#")]  # "# design", "# expected ..."
        assert _runs(check[1]) == _runs(plan[1].splitlines()[0]) == len(rows) - 2


@FUZZ
@given(experiment_texts())
def test_check_never_crashes_and_plan_agrees(text: str) -> None:
    with tempfile.TemporaryDirectory(prefix="perflab-fuzz-") as d:
        path = Path(d) / "e.toml"
        path.write_text(text, encoding="utf-8")
        check_and_plan_agree(path)


@settings(FUZZ, max_examples=min(EXAMPLES, 4))
@given(experiment_texts())
def test_check_and_plan_agree_through_the_cli(text: str) -> None:
    import subprocess

    from conftest import cli_command

    with tempfile.TemporaryDirectory(prefix="perflab-fuzz-") as d:
        path = Path(d) / "e.toml"
        path.write_text(text, encoding="utf-8")
        check, plan = (subprocess.run(cli_command(c, path), capture_output=True, text=True, timeout=60)
                       for c in ("check", "plan"))
        assert check.returncode in (0, 2), check.stderr
        assert plan.returncode == check.returncode, (check.stderr, plan.stderr)
        assert "Traceback" not in check.stderr + plan.stderr
        if check.returncode == 2:
            assert plan.stderr == check.stderr


def test_the_toml_writer_round_trips() -> None:
    # The property is only as good as the documents reach perflab as written.
    doc = {"a": [1, "x\u202e\x00\x7f", {"b": 1e300}], "t": {"k y": True, "n": -(2**63)}}
    assert tomllib.loads("\n".join(to_toml(doc))) == json.loads(json.dumps(doc))
