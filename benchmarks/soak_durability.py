"""perflab's own footprint over a long durability study, with the live page
open (issue 48, item 3: RSS flat within 10% after the first hour, CPU below
1% of a core outside the engine, store growth per hour and linear).

examples/dbt3-durability.toml at a small scale factor (default 0.1), its
throughput runs back to back (repetitions enough for --duration), vmstat at
1 s, run by `perflab run` against a real managed PostgreSQL; `perflab serve`
on the output directory beside it, its page, state, series of the current
run and /metrics polled every --poll seconds as a browser and Prometheus
would. Every minute: perflab run's RSS (its own process: the engine runs
inside it), its CPU share of one core over the minute (utime + stime from
/proc), serve's RSS and CPU share, and the store's size. At the end the run
is stopped with SIGINT (as Ctrl-C: the run in flight is stored as failed,
the server torn down) and the table printed, one row per --every minutes.

    .venv/bin/python benchmarks/soak_durability.py --duration 2h [--scale 0.01] [--every 15] [--keep DIR]

The live page is also open in a real headless Chromium throughout (when
one is installed): its count of updates and any exception it threw are in
every row, and its screenshot is taken every --every minutes into the work
directory. Where Prometheus is installed (Debian's `prometheus`), a real one
scrapes /metrics every 5 s with the README's configuration, as a user's
Grafana would read it, and the end says how many samples it holds.

The 2-hour soak is what the issue asks; `--duration 10m --every 1` is a
smoke check of the script. perflab run's CPU includes the engine's (it
runs in the same process); a TPC-H throughput run's engine only waits on
its streams' queries.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the suite's DevTools client for the page in a real browser
PERFLAB = Path(sys.executable).parent / "perflab"
TICKS = os.sysconf("SC_CLK_TCK")


def seconds(text: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(s|m|h)?", text)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r}: a duration like 600s, 10m or 2h")
    return float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]


def experiment(out_dir: Path, scale: float, duration_s: float) -> Path:
    """The example at `scale`, vmstat at 1 s, more repetitions than the
    duration can hold at scale 1 (a plan of thousands of runs would measure
    serve listing them, not the study's few long ones): the soak stops it."""
    text = (ROOT / "examples" / "dbt3-durability.toml").read_text()
    text = re.sub(r"(?m)^scale_factor = .*$", f"scale_factor = {scale}", text)
    # a run takes more than 30 s at scale 1 (minutes here); at a smaller scale the soak stops at the plan's end
    text = re.sub(r"(?m)^repetitions = .*$", f"repetitions = {max(5, int(duration_s // 30))}", text)
    text = text.replace('vmstat = { interval = "5s" }', 'vmstat = { interval = "1s" }')
    path = out_dir / "soak.toml"
    path.write_text(text)
    return path


def cpu_rss(pid: int) -> tuple[float, int] | None:
    """(utime + stime in s, RSS in bytes) of one process, or None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    rss = int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) * 1024 if "VmRSS" in status else 0  # type: ignore[union-attr]
    return (int(fields[11]) + int(fields[12])) / TICKS, rss


def store_bytes(out: Path) -> int:
    return sum(p.stat().st_size for p in out.glob("perflab.sqlite*") if p.is_file())


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as r:
        return bytes(r.read())


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_prometheus(work: Path, serve_url: str) -> tuple[subprocess.Popen[bytes], str] | None:
    """A real Prometheus (not root: user nobody) scraping serve's /metrics with
    the README's configuration, on loopback; None where none is installed."""
    binary = shutil.which("prometheus")
    if binary is None:
        return None
    target = serve_url.split("//", 1)[1].rstrip("/")
    home = work / "prometheus"
    home.mkdir(exist_ok=True)
    (home / "prometheus.yml").write_text(
        "scrape_configs:\n  - job_name: perflab\n    scrape_interval: 5s\n"
        f"    static_configs:\n      - targets: [\"{target}\"]\n")
    shutil.chown(home, "nobody")
    work.chmod(0o755)
    port = free_port()
    proc = subprocess.Popen(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", binary,
                             f"--config.file={home / 'prometheus.yml'}", f"--storage.tsdb.path={home / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=(home / "log").open("wb"))
    return proc, f"http://127.0.0.1:{port}/"


def prometheus_samples(url: str) -> str:
    """What the Prometheus holds of perflab's figures, as Grafana would ask it."""
    q = urllib.parse.quote('count_over_time(perflab_run_series{source="vmstat",series="us_pct"}[3h])')
    body = json.loads(get(f"{url}api/v1/query?query={q}"))
    names = json.loads(get(f"{url}api/v1/label/__name__/values"))["data"]
    result = body["data"]["result"]
    counts = sum(int(float(r["value"][1])) for r in result)
    runs = sorted({r["metric"].get("run", "?") for r in result}, key=lambda x: (len(x), x))
    return (f"Prometheus holds {len([n for n in names if n.startswith('perflab_')])} perflab metric names; "
            f"vmstat us_pct: {counts} samples over runs {', '.join(runs)}")


def page_state(browser: Any) -> dict[str, Any]:
    """The open page's own count of updates, the run it shows, and exceptions it threw."""
    if browser is None:
        return {}
    try:
        return {"page_updates": int(browser.evaluate("document.documentElement.dataset.updates") or 0),
                "page_run": browser.evaluate("document.documentElement.dataset.run") or "-",
                "page_exceptions": len([e for e in browser.events if e.get("method") == "Runtime.exceptionThrown"])}
    except (OSError, TimeoutError, RuntimeError) as e:
        return {"page_updates": f"browser: {e}"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=seconds, default=seconds("2h"))
    parser.add_argument("--scale", type=float, default=0.1)
    parser.add_argument("--every", type=int, default=15, help="minutes per row of the printed table")
    parser.add_argument("--poll", type=float, default=5.0, help="seconds between the live page's polls")
    parser.add_argument("--keep", type=Path, help="work here and keep the results")
    parser.add_argument("--no-browser", action="store_true", help="no Chromium with the page open")
    parser.add_argument("--no-prometheus", action="store_true", help="no Prometheus scraping /metrics")
    args = parser.parse_args()
    # started in the background (`cmd &`), a process inherits SIGINT ignored, and so would perflab run:
    # the soak's own SIGINT at the end would then not stop it; SIGTERM to the soak stops it as Ctrl-C
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    work = args.keep or Path(tempfile.mkdtemp(prefix="perflab-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    out = work / "out"
    spec = experiment(work, args.scale, args.duration)
    log = (work / "run.log").open("w")
    run = subprocess.Popen([str(PERFLAB), "run", str(spec), "--out", str(out), "--quiet", "--no-report"],
                           stdout=log, stderr=subprocess.STDOUT,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # noqa: PLW1509
    serve: subprocess.Popen[str] | None = None
    rows: list[dict[str, Any]] = []
    polls = failures = 0
    try:
        while not (out / "perflab.sqlite").exists():
            if run.poll() is not None:
                print((work / "run.log").read_text())
                return 1
            time.sleep(1)
        serve = subprocess.Popen([str(PERFLAB), "serve", str(out)], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True)
        assert serve.stdout is not None
        url = serve.stdout.readline().strip()
        prom = start_prometheus(work, url) if not args.no_prometheus else None
        browser = None
        chromium = shutil.which("chromium")
        if chromium is not None and not args.no_browser:
            from chromium import Chromium

            browser = Chromium(chromium, width=1280, height=1600)
            page = browser.load(url)
            print(f"the page is open in {chromium}: {len(page.problems)} problems at load", flush=True)
        t0 = time.monotonic()
        last = {"t": t0, "run": cpu_rss(run.pid), "serve": cpu_rss(serve.pid)}
        next_minute = t0 + 60
        while time.monotonic() - t0 < args.duration and run.poll() is None:
            try:  # as the page does: state, the current run's series, and a scrape
                state = json.loads(get(url + "api/state"))
                current = state.get("current")
                if current is not None:
                    get(url + f"api/series?run={current}&points=600")
                get(url + "metrics")
                polls += 1
            except OSError:
                failures += 1
            time.sleep(args.poll)
            if time.monotonic() >= next_minute:
                now = time.monotonic()
                r, s = cpu_rss(run.pid), cpu_rss(serve.pid)
                if r is None or s is None or last["run"] is None or last["serve"] is None:
                    break
                dt = now - float(last["t"])  # type: ignore[arg-type]
                rows.append({"minute": round((now - t0) / 60), "run_rss": r[1], "run_cpu": (r[0] - last["run"][0]) / dt,
                             "serve_rss": s[1], "serve_cpu": (s[0] - last["serve"][0]) / dt,
                             "store": store_bytes(out), **page_state(browser)})
                if browser is not None and rows[-1]["minute"] % args.every == 0:
                    browser.screenshot(work / f"page-{rows[-1]['minute']:04.0f}.png", full_page=True)
                last = {"t": now, "run": r, "serve": s}
                next_minute += 60
                print(json.dumps(rows[-1]), flush=True)
        if prom is not None:
            try:
                print(prometheus_samples(prom[1]))
            except (OSError, KeyError, ValueError) as e:
                print(f"Prometheus could not be asked: {e}")
    finally:
        if browser is not None:
            browser.screenshot(work / "page-end.png", full_page=True)
            browser.close()
        if prom is not None:
            prom[0].terminate()
            prom[0].wait(timeout=60)
        if run.poll() is None:
            run.send_signal(signal.SIGINT)
            try:
                run.wait(timeout=300)
            except subprocess.TimeoutExpired:
                run.kill()
        if serve is not None:
            serve.terminate()
            serve.wait(timeout=30)
        log.close()
    done = [line for line in (work / "run.log").read_text().splitlines() if line.strip()][-3:]
    print(f"perflab run: {args.duration / 60:.0f} min at scale {args.scale:g}; page polls: {polls} "
          f"({failures} failed); last lines of its log:", *done, sep="\n  ")
    print("| minute | perflab run RSS (MiB) | its CPU (% of a core) | serve RSS (MiB) | serve CPU (%) | store (MiB) "
          "| page updates | page run shown | page exceptions |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        if row["minute"] % args.every == 0 or row is rows[-1]:
            print(f"| {row['minute']:.0f} | {row['run_rss'] / 2**20:.0f} | {100 * row['run_cpu']:.1f} | "
                  f"{row['serve_rss'] / 2**20:.0f} | {100 * row['serve_cpu']:.1f} | {row['store'] / 2**20:.1f} "
                  f"| {row.get('page_updates', '-')} | {row.get('page_run', '-')} | {row.get('page_exceptions', '-')} |")
    if len(rows) >= 2:
        hours = (rows[-1]["minute"] - rows[0]["minute"]) / 60
        if hours > 0:
            print(f"store growth: {(rows[-1]['store'] - rows[0]['store']) / 2**20 / hours:.1f} MiB per hour")
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)
    if rows and rows[-1]["minute"] < args.duration / 60 - 1:
        print(f"the run ended after {rows[-1]['minute']:.0f} of {args.duration / 60:.0f} minutes: see its log")
        return 1
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
