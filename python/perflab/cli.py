"""The `perflab` command: parse, call the lab, print. Bad input exits 2 with one
clear message; an interrupted experiment exits 130 and can be resumed."""

from __future__ import annotations

import argparse
import re
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from perflab.errors import EXIT_USAGE, Interrupted, UserError
from perflab.export import FORMATS, TABLES

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


def _default_out(name: str) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("results") / f"{name}-{stamp}"


def cmd_run(args: argparse.Namespace) -> int:
    from perflab import plan, spec
    from perflab.host import host_facts
    from perflab.secrets import mask_secrets
    from perflab.store import Store

    exp = spec.load(args.experiment)
    spec.preflight(exp, args.experiment.resolve().parent)
    out = (args.out or _default_out(exp.name)).resolve()
    seed = plan.choose_seed(exp)
    runs = plan.expand(exp, seed)
    store = Store.create(
        out, name=exp.name, spec_text=mask_secrets(exp.text), spec_path=str(args.experiment.resolve()),
        seed=seed, factors=list(exp.factors), host=host_facts(),
    )
    store.add_plan(runs)
    print(f"output: {out}", flush=True)
    return _execute(store, exp, runs, args.experiment.resolve().parent, args)


def cmd_resume(args: argparse.Namespace) -> int:
    from perflab import plan, spec
    from perflab.secrets import MASK, mask_secrets
    from perflab.store import Store

    store = Store.open(args.dir)
    info = store.experiment()
    text = info["spec_text"]
    spec_path = Path(info["spec_path"]) if info["spec_path"] else None
    if MASK in text:
        # The store never holds a password: take it from the original file,
        # if that file is still the experiment that was run.
        original = spec_path.read_text() if spec_path and spec_path.is_file() else None
        if original is None or mask_secrets(original) != text:
            raise UserError(
                "the stored experiment had a password, which perflab does not store, and the original file "
                f"({spec_path}) is gone or changed",
                "restore the original experiment file, or put the password in PGPASSWORD or ~/.pgpass",
            )
        text = original
    exp = spec.load_text(text, spec_path)
    runs = plan.expand(exp, info["seed"])
    stored = {r["id"]: r for r in store.runs()}
    if len(stored) != len(runs) or any(stored[r.number]["factors"] != r.factors for r in runs if r.number in stored):
        raise UserError(f"{args.dir}: the stored plan does not match its experiment", "start a new `perflab run`")
    recovered = store.recover()
    left = sum(1 for r in store.runs() if r["status"] == "planned")
    print(f"output: {store.dir}")
    print(f"resuming: {left} runs to go" + (f" (run {', '.join(map(str, recovered))} was in flight)" if recovered else ""))
    base_dir = spec_path.parent if spec_path and spec_path.parent.is_dir() else Path.cwd()
    return _execute(store, exp, runs, base_dir, args)


def _execute(store: Any, exp: Any, runs: list[Any], base_dir: Path, args: argparse.Namespace) -> int:
    from perflab.progress import make_progress
    from perflab.runner import Runner

    done = sum(1 for r in store.runs() if r["status"] in ("done", "failed"))
    progress = make_progress(len(runs), done, args.quiet)
    try:
        counts = Runner(exp, store, runs, progress, base_dir).run()
    except Interrupted as exc:
        print(f"\nperflab: interrupted ({exc}); every finished run is stored; servers stopped.\n"
              f"  continue with: perflab resume {store.dir}", file=sys.stderr)
        return EXIT_INTERRUPTED
    failed = sum(1 for r in store.runs() if r["status"] == "failed")
    print(f"finished: {counts['done']} done, {counts['failed']} failed in this session; store: {store.path}")
    print(f"output: {store.dir}")
    if not args.no_report:
        _report(store.dir, quiet=True)  # last line: where the report is
    return EXIT_FAILED_RUNS if failed else 0


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
    cols = ["run", *factors, "rep", "status", *(f"{h} [{units.get(h, '')}]" for h in headline), "notes"]
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
    return str(value).lower() if isinstance(value, bool) else str(value)


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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
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
