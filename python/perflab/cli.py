"""The `perflab` command: parse, call the lab, print. Bad input exits 2 with one
clear message; an interrupted experiment exits 130 and can be resumed."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perflab.errors import EXIT_USAGE, Interrupted, UserError
from perflab.export import FORMATS, TABLES

if TYPE_CHECKING:
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

    c = sub.add_parser("check", help="validate an experiment file and print its plan size")
    c.add_argument("experiment", type=Path)

    pl = sub.add_parser("plan", help="print the ordered plan of an experiment file")
    pl.add_argument("experiment", type=Path)

    rs = sub.add_parser("resume", help="continue an interrupted experiment")
    rs.add_argument("dir", type=Path)
    rs.add_argument("--retry-failed", action="store_true",
                    help="run failed runs again, as new attempts (the failed attempts' records are kept)")
    rs.add_argument("--quiet", action="store_true")
    rs.add_argument("--no-report", action="store_true")

    sh = sub.add_parser("show", help="the runs of an experiment with their headline metrics")
    sh.add_argument("dir", type=Path)

    ex = sub.add_parser("export", help="metrics, series or per-query times in long form")
    ex.add_argument("dir", type=Path)
    ex.add_argument("--format", choices=FORMATS, default="csv")
    ex.add_argument("--table", choices=TABLES, default="metrics")
    ex.add_argument("--output", type=Path, help="write to FILE instead of stdout (required for parquet)")

    sub.add_parser("list", help="registered targets, workloads and collectors")

    rp = sub.add_parser("report", help="write DIR/report.html and DIR/figures/")
    rp.add_argument("dir", type=Path)

    cp = sub.add_parser("compare", help="compare experiments run by run")
    cp.add_argument("dirs", type=Path, nargs="+")
    cp.add_argument("--html", type=Path, help="also write the comparison as an HTML report")
    return p


# ------------------------------------------------------------------ commands


def cmd_check(args: argparse.Namespace) -> int:
    from perflab import spec

    exp = spec.load(args.experiment)
    for warning in spec.preflight(exp, args.experiment.resolve().parent):
        print(f"perflab: warning: {warning}", file=sys.stderr)
    combos = len(exp.combinations())
    reps = exp.meta.repetitions
    print(f"ok: {exp.name}: {combos * reps} runs ({combos} combinations x {reps} repetitions)")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from perflab import plan, spec

    exp = spec.load(args.experiment)
    spec.preflight(exp, args.experiment.resolve().parent)
    seed = plan.choose_seed(exp)
    runs = plan.expand(exp, seed)
    factors = list(exp.factors)
    print(f"# {exp.name}: {len(runs)} runs, order {exp.meta.order}" + (f", seed {seed}" if exp.meta.order == "random" else ""))
    rows = [[str(r.number), *(_cell(r.factors[f]) for f in factors), str(r.repetition)] for r in runs]
    print(_table(["run", *factors, "rep"], rows))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from perflab import runner

    session = runner.start(args.experiment, args.out)
    print(f"output: {session.store.dir}", flush=True)
    return _execute(session, args)


def cmd_resume(args: argparse.Namespace) -> int:
    from perflab import runner

    session = runner.resume(args.dir, retry_failed=args.retry_failed)
    left = session.count("planned")
    print(f"output: {session.store.dir}")
    line = f"resuming: {left} runs to go"
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
    progress = make_progress(len(session.plan), session.count("done", "failed"), args.quiet)
    try:
        outcome = runner.execute(session, progress)
    except Interrupted as exc:
        print(f"\nperflab: interrupted ({exc}); every finished run is stored; servers stopped.\n"
              f"  continue with: perflab resume {store.dir}", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(f"finished: {outcome.done} done, {outcome.failed} failed in this session; store: {store.path}")
    print(f"output: {store.dir}")
    if not args.no_report:
        _report(store.dir, quiet=True)  # last line: where the report is
    return EXIT_FAILED_RUNS if outcome.failed_total else 0


def _report(out_dir: Path, quiet: bool = False) -> Path | None:
    try:
        from perflab.report import write_report
    except ImportError:
        if not quiet:
            raise UserError("this perflab has no report module", "install a perflab with perflab.report") from None
        return None
    try:
        path = write_report(out_dir)
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

    Store.open(args.dir).close()  # a clear message when DIR is not an experiment
    _report(args.dir)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    try:
        from perflab.report.compare import compare
    except ImportError:
        raise UserError("this perflab has no compare module", "install a perflab with perflab.report") from None
    if len(args.dirs) < 2:
        raise UserError("compare needs at least two output directories", "perflab compare DIR_A DIR_B")
    print(compare(args.dirs, args.html))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from perflab.progress import fmt_value
    from perflab.store import Store

    store = Store.open(args.dir)
    info = store.experiment()
    runs = store.runs()
    factors = info["factors"]
    metrics: dict[int, dict[str, Any]] = {}
    for m in store.metrics():
        metrics.setdefault(m["run_id"], {})[m["name"]] = m
    headline: list[str] = []
    for r in runs:
        headline += [h for h in r["headline"] if h not in headline]
    rows = []
    for r in runs:
        ms = metrics.get(r["id"], {})
        rows.append(
            [str(r["id"]), *(_cell(r["factors"].get(f)) for f in factors), str(r["repetition"]), r["status"],
             *(fmt_value(ms[h]["value"]) if h in ms else "-" for h in headline),
             ", ".join(r["flags"]) or ("" if not r["error"] else r["error"].splitlines()[0][:60])]
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
    print(f"# {info['name']}: {len(runs)} runs, {done} done, "
          f"{sum(r['status'] == 'failed' for r in runs)} failed, {sum(r['status'] == 'planned' for r in runs)} to run")
    print(_table(cols, rows))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from perflab import export
    from perflab.store import Store

    export.export(Store.open(args.dir), args.format, sys.stdout, table=args.table, output=args.output)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from perflab.collectors import COLLECTORS
    from perflab.targets import TARGETS
    from perflab.workloads import WORKLOADS

    for title, registry in (("targets", TARGETS), ("workloads", WORKLOADS), ("collectors", COLLECTORS)):
        print(f"{title}:")
        width = max((len(e.name) for e in registry.entries()), default=0)
        for e in registry.entries():
            print(f"  {e.name.ljust(width)}  {e.description}")
    return 0


# ------------------------------------------------------------------ helpers


def _cell(value: Any) -> str:
    from perflab.model import fmt_level

    return fmt_level(value)


def _table(columns: list[str], rows: list[list[str]]) -> str:
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(columns)]

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.rjust(w) if re.fullmatch(r"-?[\d.]+(e[-+]?\d+)?", c) else c.ljust(w) for c, w in zip(cells, widths, strict=True)
        ).rstrip()

    return "\n".join([line(columns), line(["-" * w for w in widths]), *map(line, rows)])


COMMANDS = {
    "run": cmd_run, "check": cmd_check, "plan": cmd_plan, "resume": cmd_resume, "show": cmd_show,
    "export": cmd_export, "list": cmd_list, "report": cmd_report, "compare": cmd_compare,
}


# Commands that start work on this host: each first undoes what a killed
# perflab (and its killed guardian) left changed, and says so.
RECOVERING = {"run", "check", "resume"}


def _recover(args: argparse.Namespace) -> None:
    from perflab.guardian import recover_orphans

    out_dir = Path(args.dir).resolve() if args.command == "resume" else None
    for line in recover_orphans(out_dir):
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
