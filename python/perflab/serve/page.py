"""The one page `perflab serve` serves: HTML, CSS and a script that polls
the JSON endpoints (relative URLs, so a token prefix carries over) and draws
its figures as inline SVG, each bucket's min/max envelope shaded behind its
mean. Nothing is fetched from elsewhere."""

from __future__ import annotations

PAGE = r"""<!doctype html>
<html lang="en" data-updates="0">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>perflab serve</title>
<link rel="icon" href="data:,">
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 0 1.5em 2em; color: #222; }
header { position: sticky; top: 0; background: #fff; border-bottom: 1px solid #ddd; padding: .5em 0; z-index: 2; }
h1 { font-size: 1.3em; margin: .2em 0; } h2 { font-size: 1.1em; margin: 1.2em 0 .4em; }
.muted { color: #777; } .warn { color: #b35900; } .bad { color: #b00020; }
.pill { display: inline-block; padding: 0 .5em; border-radius: .8em; background: #eee; margin-right: .3em; }
.pill.running { background: #d6eaf8; } .pill.done { background: #d5f5e3; } .pill.failed { background: #fadbd8; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border-bottom: 1px solid #eee; padding: 2px 8px; text-align: left; vertical-align: top; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.sel { background: #fff7d6; } tbody tr { cursor: pointer; }
.scroll { max-height: 22em; overflow: auto; border: 1px solid #eee; }
.figs { display: flex; flex-wrap: wrap; gap: 1em; }
figure { margin: 0; } figcaption { font-size: 12px; color: #555; }
.big { display: flex; gap: 2em; margin: .4em 0; } .big div { font-size: 1.6em; } .big span { font-size: .55em; color: #777; display: block; }
svg text { font-size: 10px; fill: #555; }
</style>
</head>
<body>
<header>
<h1 id="title">perflab serve</h1>
<div id="status" class="muted">loading…</div>
</header>
<section id="plan"><h2>Plan</h2><div class="scroll"><table id="runs"><thead></thead><tbody></tbody></table></div></section>
<section id="live"><h2 id="live-title">Run</h2><div class="big" id="now"></div><div class="figs" id="driver-figs"></div>
<div id="within"></div></section>
<section id="os"><h2>OS figures (vmstat, as OSDL drew them)</h2><div class="figs" id="os-figs"></div></section>
<section id="events"><h2>Events and flags</h2><div class="scroll"><table id="event-table">
<thead><tr><th>run</th><th class="num">t (s)</th><th>at</th><th>kind</th><th>message</th></tr></thead><tbody></tbody></table></div></section>
<section id="degradation"><h2>Degradation so far</h2><div id="deg"></div></section>
<script>
"use strict";
const POLL_MS = 2000;
const WINDOW = new URLSearchParams(location.search).get("window");  // seconds per within-run window (default an hour)
const seriesURL = (run, points) => `api/series?run=${run}&points=${points}` + (WINDOW ? `&window=${encodeURIComponent(WINDOW)}` : "");
let state = null, selected = null, followCurrent = true, lastEvent = 0, updates = 0;
const esc = s => String(s ?? "").replace(/[&<>"']/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
function fmt(v, digits = 4) {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  if (typeof v !== "number") return esc(v);
  const a = Math.abs(v);
  if (a !== 0 && (a >= 1e6 || a < 1e-3)) return v.toExponential(2);
  return Number(v.toPrecision(digits)).toLocaleString("en-US", {maximumFractionDigits: 6});
}
const pct = v => (v === null || v === undefined) ? "–" : (v >= 0 ? "+" : "") + v.toFixed(2) + "%";
async function getJSON(url) {
  const r = await fetch(url, {cache: "no-store"});
  if (!r.ok) throw new Error(url + ": " + r.status);
  return r.json();
}

function renderState(s) {
  document.getElementById("title").textContent = "perflab serve: " + s.experiment.name;
  document.title = "perflab: " + s.experiment.name;
  const c = s.counts;
  const total = Object.values(c).reduce((a, b) => a + b, 0);
  document.getElementById("status").innerHTML =
    (s.writing ? '<span class="pill running">a perflab is writing</span>' : '<span class="pill">no perflab writing</span>') +
    Object.entries(c).map(([k, v]) => `<span class="pill ${k}">${v} ${k}</span>`).join("") +
    ` of ${total} runs · updated ${new Date().toLocaleTimeString()}` +
    (s.report ? ' · <a href="report.html">report</a>' : "");
  const head = s.headline.slice(0, 3);
  document.querySelector("#runs thead").innerHTML = "<tr><th>#</th><th>combination</th><th class=num>rep</th><th>status</th>" +
    "<th class=num>seconds</th>" + head.map(m => `<th class=num>${esc(m)} (${esc(s.metrics[m].unit)})</th>`).join("") + "<th>flags</th></tr>";
  document.querySelector("#runs tbody").innerHTML = s.runs.map(r =>
    `<tr data-run="${r.id}" class="${r.id === selected ? "sel" : ""}"><td>#${r.id}</td><td>${esc(r.label || "all runs")}</td>` +
    `<td class=num>${r.repetition}</td><td><span class="pill ${r.status}">${r.status}</span>${r.id === s.current ? " ◀" : ""}</td>` +
    `<td class=num>${fmt(r.seconds)}</td>` + head.map(m => `<td class=num>${fmt(r.metrics[m])}</td>`).join("") +
    `<td class=warn>${esc(r.flags.join(", "))}${r.error ? ' <span class=bad title="' + esc(r.error) + '">error</span>' : ""}` +
    r.earlier_attempts.map(a => `<div class="attempt">attempt ${a.attempt} ${esc(a.status)}` +
      (a.partial ? `: ${esc(a.partial)}` : "") + (a.files ? ` (${esc(a.files)})` : "") + "</div>").join("") + "</td></tr>").join("");
  renderDegradation(s.degradation);
}

function renderDegradation(rows) {
  const el = document.getElementById("deg");
  if (!rows.length) { el.innerHTML = '<p class="muted">No combination has two finished runs yet.</p>'; return; }
  el.innerHTML = rows.map(d => {
    const body = d.runs.map((id, i) => `<tr><td>#${id}</td><td class=num>${d.repetitions[i]}</td>` +
      `<td class=num>${fmt(d.values[i])}</td><td class=num>${pct(d.change_pct[i])}</td></tr>`).join("");
    return `<h3>#${d.combination} ${esc(d.label)}: ${esc(d.metric)}</h3><table class="deg" data-combination="${d.combination}" data-metric="${esc(d.metric)}">` +
      `<thead><tr><th>run</th><th class=num>repetition</th><th class=num>${esc(d.metric)} (${esc(d.unit)})</th><th class=num>change from first</th></tr></thead>` +
      `<tbody>${body}</tbody></table><p class="verdict ${d.slope && d.verdict.indexOf("no significant") < 0 ? "warn" : "muted"}">${esc(d.verdict)}</p>`;
  }).join("");
}

const COLOURS = ["#2980b9", "#c0392b", "#27ae60", "#8e44ad", "#e67e22", "#16a085"];
function chart(title, unit, lines, divisor = 1) {
  const W = 520, H = 170, L = 52, R = 22, T = 8, B = 22;
  let t0 = Infinity, t1 = -Infinity, y0 = Infinity, y1 = -Infinity;
  for (const l of lines) l.t.forEach((t, i) => {
    if (l.max[i] === null) return;
    t0 = Math.min(t0, t); t1 = Math.max(t1, t); y0 = Math.min(y0, l.min[i] / divisor); y1 = Math.max(y1, l.max[i] / divisor);
  });
  if (!Number.isFinite(t0)) return "";
  if (y0 > 0 && y0 < y1 * 0.5) y0 = 0;
  if (y1 === y0) { y1 += Math.abs(y1) * 0.1 || 1; y0 -= Math.abs(y0) * 0.1 || 0; }
  if (t1 === t0) t1 = t0 + 1;
  const hours = t1 - t0 > 7200, tdiv = hours ? 3600 : 1;
  const X = t => L + (t - t0) / (t1 - t0) * (W - L - R), Y = v => T + (1 - (v / divisor - y0) / (y1 - y0)) * (H - T - B);
  let svg = `<svg width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" role="img"><rect x="${L}" y="${T}" width="${W - L - R}" height="${H - T - B}" fill="#fafafa" stroke="#ddd"/>`;
  for (let k = 0; k <= 4; k++) {
    const v = y0 + (y1 - y0) * k / 4, y = T + (1 - k / 4) * (H - T - B);
    svg += `<text x="${L - 4}" y="${y + 3}" text-anchor="end">${fmt(v, 3)}</text>`;
    const t = t0 + (t1 - t0) * k / 4;
    svg += `<text x="${X(t)}" y="${H - 8}" text-anchor="middle">${fmt(Math.round(t / tdiv * 100) / 100, 3)}</text>`;
  }
  lines.forEach((l, j) => {
    const colour = l.colour || COLOURS[j % COLOURS.length];
    let seg = [];
    const flush = () => {
      if (!seg.length) return;
      const up = seg.map(i => `${X(l.t[i]).toFixed(1)},${Y(l.max[i]).toFixed(1)}`), down = seg.slice().reverse().map(i => `${X(l.t[i]).toFixed(1)},${Y(l.min[i]).toFixed(1)}`);
      svg += `<polygon class="envelope" points="${up.concat(down).join(" ")}" fill="${colour}" fill-opacity="0.22" stroke="${colour}" stroke-opacity="0.35" stroke-width="0.6"/>`;
      svg += `<polyline class="mean" points="${seg.map(i => `${X(l.t[i]).toFixed(1)},${Y(l.mean[i]).toFixed(1)}`).join(" ")}" fill="none" stroke="${colour}" stroke-width="1.3"/>`;
      seg = [];
    };
    l.t.forEach((t, i) => { if (l.max[i] === null) flush(); else seg.push(i); });
    flush();
  });
  svg += "</svg>";
  const legend = lines.map((l, j) => `<span style="color:${l.colour || COLOURS[j % COLOURS.length]}">■</span> ${esc(l.label)}`).join(" ");
  return `<figure>${svg}<figcaption><b>${esc(title)}</b> (${esc(unit)}) against ${hours ? "hours" : "seconds"} since the run's start · ${legend} · shaded: each bucket's min–max</figcaption></figure>`;
}

function pick(series, test) { return Object.values(series).find(s => !s.collector && test(s.name)); }
function renderSeries(data) {
  const s = data.series;
  const run = state.runs.find(r => r.id === data.run);
  document.getElementById("live-title").textContent = `Run #${data.run}` + (run && run.label ? ` (${run.label})` : "") + `: ${data.status}`;
  const rate = pick(s, n => /^(tps|qps|tpmC|goodput_mbps|pps|rate)$/.test(n)) || pick(s, n => !/latency|failed|error|lag/.test(n));
  const p99 = pick(s, n => /p99/.test(n)), errors = pick(s, n => /failed|error/.test(n));
  const shown = [["rate", rate], ["p99", p99], ["errors", errors]].filter(([, x]) => x);
  const q = data.queries;
  const queries = !q ? "" : `<div data-figure="queries"><span>queries completed (${q.failed} failed)</span>${fmt(q.done)}</div>` +
    q.streams.map(x => `<div data-figure="stream"><span>stream ${x.stream}: queries done (${fmt(x.seconds)} s in them)</span>${fmt(x.done)}</div>`).join("") +
    `<p class="muted" id="latest-queries">latest: ` + q.latest.map(x =>
      `${esc(x.query)} on stream ${x.stream} in ${fmt(x.seconds)} s${x.status === "ok" ? "" : " (" + esc(x.status) + ")"}`).join("; ") + "</p>";
  document.getElementById("now").innerHTML = (shown.map(([what, x]) =>
    `<div data-figure="${what}"><span>${what}: ${esc(x.source)}.${esc(x.name)}, latest</span>${fmt(x.last ? x.last[1] : null)}</div>`).join("") + queries) ||
    '<p class="muted">No per-second figures for this run yet.</p>';
  document.getElementById("driver-figs").innerHTML = shown.map(([what, x]) =>
    chart(`${what}: ${x.source}.${x.name}`, x.name.endsWith("_ms") ? "ms" : "per second", [{...x, label: x.name}])).join("");
  const w = rate && rate.windows;
  document.getElementById("within").innerHTML = !w ? "" :
    `<h3>${esc(rate.name)} within the run, per ${fmt(w.window_s / 60, 4)}-minute window</h3>` +
    `<p class="verdict ${w.slope && w.verdict.startsWith("degrades") ? "warn" : "muted"}">${esc(w.verdict)}</p>` +
    (w.means.length ? `<div class="scroll"><table><thead><tr><th class=num>window from (h)</th><th class=num>mean</th>` +
      `<th class=num>change from first</th></tr></thead><tbody>` + w.means.map((m, i) =>
      `<tr><td class=num>${fmt(Math.round(w.starts[i] / 36) / 100, 4)}</td><td class=num>${fmt(m)}</td><td class=num>${pct(w.change_pct[i])}</td></tr>`).join("") +
      "</tbody></table></div>" : "");
  const os = n => s["vmstat." + n];
  const group = (title, unit, names, divisor) => {
    const lines = names.map(([n, label, colour]) => os(n) && {...os(n), label, colour}).filter(Boolean);
    return lines.length ? chart(title, unit, lines, divisor) : "";
  };
  document.getElementById("os-figs").innerHTML = (
    group("memory", "GiB", [["free_kib", "free", "#5dade2"], ["buff_kib", "buff", "#e67e22"], ["cache_kib", "cache", "#27ae60"]], 1048576) +
    group("block I/O", "MiB/s", [["bi_kib_per_s", "bi (read)", "#2980b9"], ["bo_kib_per_s", "bo (written)", "#c0392b"]], 1024) +
    group("CPU", "% of all CPUs", [["us_pct", "us", "#2e8b57"], ["sy_pct", "sy", "#c0392b"], ["id_pct", "id", "#7f8c8d"], ["wa_pct", "wa", "#f39c12"]], 1)
  ) || '<p class="muted">No vmstat series for this run ([collect] vmstat).</p>';
  document.documentElement.dataset.run = String(data.run);
  document.documentElement.dataset.samples = String(Object.values(s).reduce((a, x) => a + x.samples, 0));
}

function renderEvents(data) {
  if (!data.events.length) return;
  lastEvent = data.last;
  const rows = data.events.map(e => `<tr data-event="${e.id}"><td>${e.run_id === null ? "" : "#" + e.run_id}</td><td class=num>${fmt(e.t)}</td>` +
    `<td>${esc(e.at)}</td><td>${esc(e.kind)}</td><td>${esc(e.message)}</td></tr>`).join("");
  const body = document.querySelector("#event-table tbody");
  body.insertAdjacentHTML("afterbegin", rows.split("</tr>").filter(Boolean).reverse().map(r => r + "</tr>").join(""));
}

async function refresh() {
  try {
    state = await getJSON("api/state");
    if (followCurrent || selected === null) selected = state.current;
    renderState(state);
    renderEvents(await getJSON("api/events?after=" + lastEvent));
    if (selected !== null) {
      const points = Math.max(50, Math.min(2000, Math.floor(window.innerWidth / 2)));
      renderSeries(await getJSON(seriesURL(selected, points)));
    }
    document.documentElement.dataset.updates = String(++updates);
  } catch (e) {
    document.getElementById("status").innerHTML = `<span class="bad">${esc(e.message)}</span> (retrying)`;
  }
  setTimeout(refresh, POLL_MS);
}
document.querySelector("#runs tbody").addEventListener("click", ev => {
  const tr = ev.target.closest("tr[data-run]");
  if (!tr) return;
  selected = Number(tr.dataset.run);
  followCurrent = selected === (state && state.current);
  renderState(state);
  getJSON(seriesURL(selected, 600)).then(renderSeries).catch(() => {});
});
refresh();
</script>
</body>
</html>
"""
