"""The `perflab` command: parse, call the lab, print. Bad input exits 2 with one
clear message; an interrupted experiment exits 130 and can be resumed."""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perflab.errors import EXIT_USAGE, Interrupted, UserError
from perflab.export import FORMATS, TABLES
from perflab.units import plural

if TYPE_CHECKING:
    from perflab import cache
    from perflab.runner import Session

EXIT_FAILED_RUNS = 1
EXIT_INTERRUPTED = 130


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # exit 2 with the usage, as argparse does, but one line of fix
        self.print_usage(sys.stderr)
        print(f"perflab: error: {message}\n  fix: see `{self.prog} --help`", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def _versions() -> str:
    from perflab import __version__, _engine

    return f"perflab {__version__} (engine {_engine.__version__}, {_engine.build_profile})"


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="perflab", description="A performance laboratory for database and network servers.")
    p.add_argument("--version", action="version", version=_versions())
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    r = sub.add_parser("run", help="run an experiment file")
    r.add_argument("experiment", type=Path)
    r.add_argument("--out", type=Path, help="output directory (default: results/NAME-TIMESTAMP)")
    r.add_argument("--quiet", action="store_true", help="plain progress lines, no live display")
    r.add_argument("--no-report", action="store_true", help="do not write report.html at the end")
    r.add_argument("--progress", type=_seconds, metavar="SECONDS",
                   help="print a line per SECONDS of each run (rate, p99, errors), on a terminal or not")

    c = sub.add_parser("check", help="validate an experiment file and print its plan size")
    c.add_argument("experiment", type=Path)

    pl = sub.add_parser("plan", help="print the ordered plan of an experiment file")
    pl.add_argument("experiment", type=Path)
    pl.add_argument("--like", type=Path, metavar="DIR",
                    help="set the expected wall time beside what the finished runs in DIR (an earlier run of "
                         "this or a like experiment) took against the same estimate")

    rs = sub.add_parser("resume", help="continue an interrupted experiment")
    rs.add_argument("dir", type=Path)
    rs.add_argument("--retry-failed", action="store_true",
                    help="run failed runs again, as new attempts (the failed attempts' records are kept)")
    rs.add_argument("--quiet", action="store_true")
    rs.add_argument("--no-report", action="store_true")
    rs.add_argument("--progress", type=_seconds, metavar="SECONDS",
                    help="print a line per SECONDS of each run (rate, p99, errors), on a terminal or not")

    sh = sub.add_parser("show", help="the runs of an experiment with their headline metrics")
    sh.add_argument("dir", type=Path)

    ex = sub.add_parser("export", help="metrics, series or per-query times in long form")
    ex.add_argument("dir", type=Path)
    ex.add_argument("--format", choices=FORMATS, default="csv")
    ex.add_argument("--table", choices=TABLES, default="metrics")
    ex.add_argument("--output", type=Path, help="write to FILE instead of stdout (required for parquet)")

    sub.add_parser("list", help="registered targets, workloads and collectors")

    ky = sub.add_parser("keys", help="the experiment file's keys: type, default, unit, allowed values, description")
    ky.add_argument("section", nargs="?", metavar="SECTION",
                    help="a section or kind: workload.http, target.postgres, search, host, collect, ... (default: all)")
    ky.add_argument("--markdown", action="store_true", help="every section as Markdown (docs/keys.md)")

    sc = sub.add_parser("schema", help="the JSON Schema of experiment files, for editors (`#:schema PATH` in a file)")
    sc.add_argument("--output", type=Path, help="write to FILE instead of stdout")

    rp = sub.add_parser("report", help="write DIR/report.html and DIR/figures/")
    rp.add_argument("dir", type=Path)
    rp.add_argument("--output", type=Path, metavar="OUT_DIR",
                    help="write report.html and figures/ into OUT_DIR instead (a read-only DIR, say)")

    sv = sub.add_parser("serve", help="a read-only web view of a running or finished experiment (live figures, "
                        "/metrics for Prometheus)")
    sv.add_argument("dir", type=Path)
    sv.add_argument("--port", type=int, default=0, help="port to listen on (default 0: a free one, printed)")
    sv.add_argument("--bind", metavar="ADDRESS",
                    help="listen on ADDRESS instead of 127.0.0.1; beyond loopback every URL needs the printed token")

    cl = sub.add_parser("clean", help="remove what an experiment made outside its results (its schemas in other "
                        "databases, a kept cluster, a database file perflab created)")
    cl.add_argument("dir", type=Path)
    cl.add_argument("--yes", action="store_true", help="do not ask first")

    cp = sub.add_parser("compare", help="compare experiments run by run")
    cp.add_argument("dirs", type=Path, nargs="+")
    cp.add_argument("--html", type=Path, help="also write the comparison as an HTML report")

    ca = sub.add_parser("cache", help="what perflab keeps in its cache (file sets), with sizes and ages",
                        description="Without a subcommand: list the cache's entries ($PERFLAB_CACHE, else "
                        "$XDG_CACHE_HOME/perflab, else ~/.cache/perflab) with sizes, ages and users.")
    cas = ca.add_subparsers(dest="cache_command", metavar="prune", parser_class=_Parser)
    pr = cas.add_parser("prune", help="remove cache entries no running experiment uses")
    pr.add_argument("--older-than", metavar="AGE",
                    help="only entries last used longer ago than AGE (7d, 12h, 90m); default: every entry")
    pr.add_argument("--yes", action="store_true", help="do not ask first")
    return p


# ------------------------------------------------------------------ commands


def cmd_check(args: argparse.Namespace) -> int:
    from perflab import spec

    exp = spec.load(args.experiment)
    for warning in spec.preflight(exp, args.experiment.resolve().parent, connect=True):
        print(f"perflab: warning: {warning}", file=sys.stderr)
    if exp.search is not None:
        s = exp.search
        print(f"ok: {exp.name}: a capacity search over {s.over} from {s.from_:g} to {s.to:g} for {s.goal}, "
              f"at most {s.max_probes} runs (each probe planned once the one before it is stored)")
        print(_cost(exp))
        return 0
    combos = len(exp.combinations())
    reps = exp.meta.repetitions
    print(f"ok: {exp.name}: {plural(combos * reps, 'run')} ({plural(combos, 'combination')} x "
          f"{plural(reps, 'repetition')})")
    print(_cost(exp))
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from perflab import plan, spec

    exp = spec.load(args.experiment)
    spec.preflight(exp, args.experiment.resolve().parent, connect=True)  # refuses what check and run refuse
    seed = plan.choose_seed(exp)
    runs = plan.expand(exp, seed)
    factors = list(exp.factors)
    cost = _cost(exp, args.like)  # before any line: --like's refusal is the one message
    print(f"# {exp.name}: {plural(len(runs), 'run')}, order {exp.meta.order}"
          + (f", seed {seed}" if exp.meta.order in ("random", "blocks") else ""))
    print(f"# design: {plan.design(exp)}")
    print(f"# {cost}")
    rows = [[str(r.number), *(_cell(r.factors[f]) for f in factors), str(r.repetition)] for r in runs]
    print(_table(["run", *factors, "block" if exp.meta.order == "blocks" else "rep"], rows))
    if exp.search is not None:
        print(f"then: the capacity search's next probes, each planned from the runs before it "
              f"(at most {exp.search.max_probes} in all)")
    return 0


def _cost(exp: Any, like: Path | None = None) -> str:
    """The plan's expected wall time (`check`, `plan`), and with `like` what
    an earlier experiment's runs took against it; a warning past an hour."""
    from perflab import cost

    estimate = cost.wall_time(exp)
    measured = cost.measured_pace(like, estimate) if like is not None else None
    warning = estimate.warning()
    if warning:
        print(f"perflab: warning: {warning}", file=sys.stderr)
    return estimate.text() + (f"\n# {measured}" if measured else "")


def cmd_run(args: argparse.Namespace) -> int:
    from perflab import runner

    session = runner.start(args.experiment, args.out)
    print(f"output: {session.store.dir}", flush=True)
    if session.replanned:
        print(f"note: {session.store.dir} held a plan where nothing was measured yet; planned again from "
              f"{args.experiment}", flush=True)
    return _execute(session, args)


def cmd_resume(args: argparse.Namespace) -> int:
    from perflab import runner

    session = runner.resume(args.dir, retry_failed=args.retry_failed)
    left = session.count("planned")
    print(f"output: {session.store.dir}")
    line = f"resuming: {left} runs to go"
    if session.replanned:
        line += (f" (nothing was measured yet and the experiment file changed: planned again from "
                 f"{session.exp.path})")
    if session.recovered:
        line += f" (run {', '.join(map(str, session.recovered))} was in flight)"
    if session.retried:
        line += f"; failed run {', '.join(map(str, session.retried))} run again as new attempts"
    print(line)
    failed = session.count("failed")
    if failed:
        print(f"note: {failed} failed runs are kept as they are; run them again with "
              f"`perflab resume {session.store.dir} --retry-failed`")
    return _execute(session, args)


def _execute(session: Session, args: argparse.Namespace) -> int:
    from perflab import runner
    from perflab.progress import make_progress

    store = session.store
    progress = make_progress(len(session.plan), session.count("done", "failed"), args.quiet,
                             every=args.progress,  # run and resume both take --progress
                             probes=session.exp.search.max_probes if session.exp.search is not None else None)
    try:
        outcome = runner.execute(session, progress)
    except Interrupted as exc:
        print(f"\nperflab: interrupted ({exc}); every finished run is stored; servers stopped.\n"
              f"  continue with: perflab resume {store.dir}", file=sys.stderr)
        return EXIT_INTERRUPTED
    _show(store.dir)  # the summary table `show` prints
    print(f"finished: {outcome.done} done, {outcome.failed} failed in this session; store: {store.path}")
    print(f"output: {store.dir}")
    if not args.no_report:
        _report(store.dir, quiet=True)  # last line: where the report is
    return EXIT_FAILED_RUNS if outcome.failed_total else 0


def _report(out_dir: Path, quiet: bool = False, output: Path | None = None) -> Path | None:
    try:
        from perflab.report import write_report
    except ImportError as exc:
        if not quiet:
            raise _import_failure(exc, "the report") from None
        print(f"perflab: warning: report not written: {_import_failure(exc, 'the report')}", file=sys.stderr)
        return None
    try:
        path = write_report(out_dir, output)
    except UserError:
        raise
    except Exception as exc:
        if not quiet:
            raise
        print(f"perflab: warning: report not written: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None
    print(f"report: {path}")
    return path


def cmd_report(args: argparse.Namespace) -> int:
    from perflab.store import Store

    Store.open(args.dir, write=False).close()  # a clear message when DIR is not an experiment, or damaged
    _report(args.dir, output=args.output)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from perflab.serve import serve

    if not 0 <= args.port <= 65535:
        raise UserError(f"--port {args.port} is no port", "give --port from 0 (any free port) to 65535")
    serve(args.dir, args.port, args.bind)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    try:
        from perflab.report.compare import compare
    except ImportError as exc:
        raise _import_failure(exc, "compare") from None
    if len(args.dirs) < 2:
        raise UserError("compare needs at least two output directories", "perflab compare DIR_A DIR_B")
    print(compare(args.dirs, args.html))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    _show(args.dir)
    return 0


def _show(directory: Path) -> None:
    """The runs with their headline metrics, as a table (`show`, and the end of `run`)."""
    from perflab.progress import fmt_value
    from perflab.store import Store, writer_alive

    store = Store.open(directory, write=False)
    info = store.experiment()
    runs = store.runs()
    # A run marked running whose perflab is gone (no holder of the store's
    # lock) was interrupted: `resume` runs it again, so it counts as to run.
    orphaned = [r["id"] for r in runs if r["status"] == "running"] if not writer_alive(store.dir) else []
    # So was a planned run whose last attempt was stopped (Ctrl-C, a refused start, a killed perflab).
    stopped = {a["run_id"]: a["status"] for a in store.attempts()}
    for r in runs:
        if r["id"] in orphaned or (r["status"] == "planned" and stopped.get(r["id"]) in ("interrupted", "killed")):
            r["status"] = "interrupted"
    marks = store.run_marks()
    factors = info["factors"]
    metrics: dict[int, dict[str, Any]] = {}
    for m in store.metrics():
        metrics.setdefault(m["run_id"], {})[m["name"]] = m
    headline: list[str] = []
    for r in runs:
        headline += [h for h in r["headline"] if h not in headline]
    from perflab import search

    searched = search.settings_of(info["spec_text"])
    if searched is not None:  # a search's goal is what its answer is about: its metrics are columns too
        headline += [name for name, _, _ in searched.conditions() if name not in headline]
        # probes by rate, the lowest first (the run column keeps the order they ran in)
        runs.sort(key=lambda r: (search.rate_of(r["factors"], searched), r["id"]))
    rows = []
    for r in runs:
        ms = metrics.get(r["id"], {})
        rows.append(
            [str(r["id"]), *(_cell(r["factors"].get(f)) for f in factors), str(r["repetition"]), r["status"],
             *(fmt_value(ms[h]["value"]) if h in ms else "-" for h in headline),
             ", ".join([*marks.get(r["id"], []), *r["flags"], *_limit_notes(ms)])
             or ("" if not r["error"] else r["error"].splitlines()[0][:60])]
        )
    units = {}
    for ms in metrics.values():
        for h in headline:
            if h in ms:
                units[h] = ms[h]["unit"]
    cols = ["run", *factors, "rep", "status", *(f"{h} [{units[h]}]" if units.get(h) else h for h in headline),
            "notes"]
    # a metric no run has (a load measured in none of these runs, say) is no column
    first_metric = 2 + len(factors) + 1
    keep = [i for i, _ in enumerate(cols)
            if not (first_metric <= i and all(row[i] in ("-", "") for row in rows))]
    cols = [cols[i] for i in keep]
    rows = [[row[i] for i in keep] for row in rows]
    done = sum(r["status"] == "done" for r in runs)
    print(f"# {info['name']}: {plural(len(runs), 'run')}, {done} done, "
          f"{sum(r['status'] == 'failed' for r in runs)} failed, "
          f"{sum(r['status'] in ('planned', 'interrupted') for r in runs)} to run")
    for event in store.events(None):
        if event["run_id"] is None and event["kind"] == "precision":  # the blocks added after a pilot, and why
            print(f"# {event['message']}")
    print(_table(cols, rows))
    from perflab import search

    found = search.answer(store)
    if found is not None:
        print(found.text())
    if store.read_only:
        print(f"note: {store.path} is read-only ({store.read_only}): shown as stored, nothing changed")
    if orphaned:
        print(f"interrupted: run {', '.join(map(str, orphaned))} was running when its perflab stopped (no perflab "
              f"holds {store.dir} now); continue with `perflab resume {store.dir}`")


def cmd_export(args: argparse.Namespace) -> int:
    from perflab import export
    from perflab.store import Store
    from perflab.store_check import EXPORT_READS

    # checked before a row is written: a damaged store's intact tables are exported, no other
    store = Store.open(args.dir, write=False, reads=EXPORT_READS.get(args.table, ()))
    export.export(store, args.format, sys.stdout, table=args.table, output=args.output)
    return 0


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{max(0, seconds):.0f}s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m ago"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.0f}h ago"
    return f"{seconds / 86400:.0f}d ago"


def _cache_state(entry: cache.Entry) -> str:
    if entry.in_use:
        return f"in use (pid {', '.join(map(str, entry.holders))})"
    if not entry.whole:
        return "partial (left by a stopped run)"
    return ""


def cmd_cache(args: argparse.Namespace) -> int:
    import time

    from perflab import cache
    from perflab.units import format_size

    root = cache.cache_root()
    found = cache.entries(root)
    now = time.time()
    if args.cache_command != "prune":
        where = f"{root} (PERFLAB_CACHE)" if cache.ENV in os.environ else f"{root} (set PERFLAB_CACHE to move it)"
        if not found:
            print(f"cache: {where}: empty")
            return 0
        print(f"cache: {where}")
        rows = [[e.kind, e.name, format_size(e.size_bytes), _ago(now - e.made) if e.made else "-",
                 _ago(now - e.last_used), _cache_state(e)] for e in found]
        print(_table(["kind", "entry", "size", "made", "last used", "state"], rows))
        print(f"total: {len(found)} entries, {format_size(sum(e.size_bytes for e in found))}")
        return 0
    if args.older_than is not None:
        from perflab import _engine

        try:
            age = float(_engine.parse_duration_s(args.older_than))
        except ValueError:
            raise UserError(f"--older-than: got {args.older_than!r}, which is not an age",
                            'give a duration with a unit of s, m, h or d ("7d", "12h")') from None
        found = [e for e in found if now - e.last_used > age]
    busy = [e for e in found if e.in_use]
    found = [e for e in found if not e.in_use]
    for e in busy:
        print(f"kept {e.kind}/{e.name}: in use by pid {', '.join(map(str, e.holders))}")
    if not found:
        print(f"cache: {root}: nothing to remove")
        return 0
    total = format_size(sum(e.size_bytes for e in found))
    if not args.yes:
        if not sys.stdin.isatty():
            raise UserError(f"cache prune would remove {len(found)} entries ({total}) from {root}, and asks first",
                            "run `perflab cache prune --yes` (see `perflab cache` for the list)")
        for e in found:
            print(f"  {e.kind}/{e.name}  {format_size(e.size_bytes)}  last used {_ago(now - e.last_used)}")
        try:
            answer = input(f"remove these {len(found)} entries ({total})? [y/N] ")
        except EOFError:
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing removed")
            return 0
    freed = 0
    removed = 0
    for e in found:
        if cache.remove(e):
            print(f"removed {e.kind}/{e.name} ({format_size(e.size_bytes)})")
            freed += e.size_bytes
            removed += 1
        else:
            print(f"kept {e.kind}/{e.name}: a run started using it")
    print(f"pruned: {removed} entries, {format_size(freed)} freed under {root}")
    return 0


def cmd_clean(args: argparse.Namespace) -> int:
    from perflab import clean

    cleanup = clean.prepare(args.dir)
    try:
        print(f"experiment: {cleanup.store.dir}")
        for text in cleanup.unreachable:
            print(f"left as it is (its target is no longer in the experiment file): {text}")
        if not cleanup.items:
            print("nothing to remove: the experiment left nothing outside its results")
            return 0
        print("perflab made, and would remove:")
        for item in cleanup.items:
            print(f"  {item.text}")
        if not args.yes:
            if not sys.stdin.isatty():
                raise UserError("perflab clean asks before it removes anything, and there is no terminal to ask on; "
                                "nothing was removed", f"run `perflab clean {args.dir} --yes`")
            if input("remove them? [y/N] ").strip().lower() not in ("y", "yes"):
                print("nothing removed")
                return 0
        removed, kept = clean.remove(cleanup)
        for line in removed:
            print(line)
        for line in kept:
            print(f"perflab: warning: {line}", file=sys.stderr)
        print(f"cleaned: {len(removed)} removed, {len(kept)} left; the results in {cleanup.store.dir} stay")
        return EXIT_FAILED_RUNS if kept else 0
    finally:
        cleanup.store.close()


def cmd_keys(args: argparse.Namespace) -> int:
    from perflab import keys

    if args.markdown and args.section:
        raise UserError("keys: --markdown writes every section", "give either SECTION or --markdown")
    print(keys.markdown() if args.markdown else keys.text(args.section))
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from perflab import keys

    text = keys.schema_text()
    if args.output is None:
        sys.stdout.write(text)
        return 0
    try:
        args.output.write_text(text)
    except OSError as exc:
        raise UserError(f"schema: cannot write {args.output}: {exc.strerror}", "give a writable --output path") from None
    print(f"schema: {args.output} (put `#:schema {args.output}` as an experiment file's first line)")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from perflab.collectors import COLLECTORS
    from perflab.extras import LIBRARIES, install_hint, missing
    from perflab.targets import TARGETS
    from perflab.workloads import WORKLOADS

    for title, registry in (("targets", TARGETS), ("workloads", WORKLOADS), ("collectors", COLLECTORS)):
        print(f"{title}:")
        width = max((len(e.name) for e in registry.entries()), default=0)
        for e in registry.entries():
            absent = [LIBRARIES.get(m, (m, None))[0] for m in e.needs if missing(m)]
            print(f"  {e.name.ljust(width)}  {e.description}"
                  + (f" [cannot run here: needs {', '.join(absent)}, see libraries]" if absent else ""))
    print("libraries (optional ones by their extra):")
    width = max(len(dist) for dist, _ in LIBRARIES.values())
    for module, (dist, _) in LIBRARIES.items():
        print(f"  {dist.ljust(width)}  " + ("installed" if not missing(module) else f"missing: {install_hint(module)}"))
    return 0


# ------------------------------------------------------------------ helpers


def _import_failure(exc: ImportError, what: str) -> UserError:
    """A library `what` imports that does not import (matplotlib for the
    report, say), named with how to install it (perflab.extras)."""
    from perflab.extras import LIBRARIES, install_hint

    module = (exc.name or "").split(".")[0]
    if module in LIBRARIES:
        return UserError(f"{what} needs the Python library {LIBRARIES[module][0]}, which does not import here ({exc})",
                         install_hint(module))
    return UserError(f"{what} cannot be loaded: {exc}", "reinstall perflab: pip install --force-reinstall perflab")


def _cell(value: object) -> str:
    from perflab.model import fmt_level

    return fmt_level(value)


def _limit_notes(ms: dict[str, Any]) -> list[str]:
    """A run's late and skipped transactions (latency_limit), and its failed
    requests by class (error_share.*: "5xx 10.0%"), where any."""
    return [f"{name} {ms[name]['value']:.0f}" for name in ("late", "skipped") if ms.get(name, {}).get("value")] + [
        f"{name.removeprefix('error_share.')} {m['value']:.1%}" for name, m in ms.items()
        if name.startswith("error_share.") and m["value"]]


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (0 < value <= 3600):
        raise argparse.ArgumentTypeError(f"got {text!r}; allowed: a number of seconds, 0 < SECONDS <= 3600")
    return value


def _table(columns: list[str], rows: list[list[str]]) -> str:
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(columns)]

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.rjust(w) if re.fullmatch(r"-?[\d.]+(e[-+]?\d+)?", c) else c.ljust(w) for c, w in zip(cells, widths, strict=True)
        ).rstrip()

    return "\n".join([line(columns), line(["-" * w for w in widths]), *map(line, rows)])


COMMANDS = {
    "run": cmd_run, "check": cmd_check, "plan": cmd_plan, "resume": cmd_resume, "show": cmd_show,
    "export": cmd_export, "list": cmd_list, "report": cmd_report, "compare": cmd_compare, "cache": cmd_cache,
    "clean": cmd_clean, "serve": cmd_serve, "keys": cmd_keys, "schema": cmd_schema,
}


# Commands that start work on this host: each first undoes what a killed
# perflab (and its killed guardian) left changed, and says so.
RECOVERING = {"run", "check", "resume", "clean"}


def _recover(args: argparse.Namespace) -> None:
    """Undo what killed perflabs left journaled in the state directory (the
    guardian's journals: a copy in an output directory is only reported).
    `resume` and `clean` first check their output directory (this user's,
    with a store of this user's that perflab reads: else exit 2, nothing
    undone); `clean` undoes nothing without --yes."""
    from perflab.guardian import recover_orphans

    out_dir: Path | None = None
    experiment: tuple[str, str] | None = None
    if args.command in ("resume", "clean"):
        from perflab.clean import own_output_dir

        # only the journals of this experiment (its store's path and id) are acted on
        out_dir, experiment = own_output_dir(args.dir, args.command)
        if args.command == "clean" and not args.yes:
            return
    for line in recover_orphans(out_dir, experiment):
        print(f"perflab: {line}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command in RECOVERING:
            _recover(args)
        return COMMANDS[args.command](args)
    except UserError as exc:
        print(f"perflab: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (Interrupted, KeyboardInterrupt):
        print("perflab: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
