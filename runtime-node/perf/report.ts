/**
 * The three ways `tsi-node perf` reports a session: a readable summary table, a CSV with perf_analyzer's
 * columns (so model-analyzer-style tooling and spreadsheets read it unchanged: µs integers, rows sorted
 * by throughput), and a self-contained HTML page with an SVG throughput-against-latency plot — no
 * scripts, no network, so it opens anywhere and can be attached to an issue.
 */

import type { PerfPoint, PerfReport } from './measure.js';

const r = (x: number) => String(Math.round(x));

function table(headers: string[], rows: string[][]): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((row) => (row[i] ?? '').length)));
  const line = '+' + widths.map((w) => '-'.repeat(w + 2)).join('+') + '+';
  const fmt = (row: string[]) => '| ' + row.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join(' | ') + ' |';
  return [line, fmt(headers), line, ...rows.map(fmt), line].join('\n');
}

const loadName = (rep: PerfReport) => (rep.points[0]?.mode === 'request_rate' || rep.options.requestRate ? 'Request Rate' : 'Concurrency');

/** The end-of-session table: one row per load point, latencies in µs. */
export function summaryTable(rep: PerfReport): string {
  const pcts = Object.keys(rep.points[0]?.percentiles ?? {}).map(Number);
  const headers = [loadName(rep), 'Infer/sec', 'Avg lat', ...pcts.map((p) => `p${p}`), 'Client send', 'Net+server', 'Queue', 'Comp in', 'Comp infer', 'Comp out', 'Client recv', 'Client CPU', 'Stable'];
  const rows = rep.points.map((p) => [
    String(p.load), p.throughput.toFixed(1), r(p.avgUs), ...pcts.map((k) => r(p.percentiles[k]!)),
    r(p.sendUs), r(p.networkUs),
    ...(p.server ? [p.server.queueUs, p.server.computeInputUs, p.server.computeInferUs, p.server.computeOutputUs].map(r) : ['-', '-', '-', '-']),
    r(p.recvUs), `${Math.round(p.clientCpuPct)}%`, p.stable ? 'yes' : 'no',
  ]);
  const title = `${rep.model.name} over ${rep.options.protocol.toUpperCase()} at ${rep.options.url}, batch ${rep.options.batchSize} (latencies in usec)`;
  return `${title}\n${table(headers, rows)}${rep.serverStatsNote ? `\n(${rep.serverStatsNote})` : ''}`;
}

/** perf_analyzer's closing lines: "Concurrency: 1, throughput: X infer/sec, latency Y usec". */
export function closingLines(rep: PerfReport): string {
  const what = rep.options.percentile ? `p${rep.options.percentile} Batch Latency` : 'Client Average Batch Latency';
  return [`Inferences/Second vs. ${what}`, ...rep.points.map((p) => `${loadName(rep)}: ${p.load}, throughput: ${p.throughput.toFixed(2)} infer/sec, latency ${r(p.stabilizingUs)} usec`)].join('\n');
}

/**
 * CSV with perf_analyzer's `-f` columns plus its --verbose-csv tail (Avg latency, request/response,
 * response wait). Like perf_analyzer, rows are sorted by increasing throughput and times are integer µs.
 */
export function toCsv(rep: PerfReport): string {
  const pcts = Object.keys(rep.points[0]?.percentiles ?? {}).map(Number).sort((a, b) => a - b);
  const header = [
    loadName(rep), 'Inferences/Second', 'Client Send', 'Network+Server Send/Recv', 'Server Queue', 'Server Compute Input',
    'Server Compute Infer', 'Server Compute Output', 'Client Recv', ...pcts.map((p) => `p${p} latency`), 'Avg latency', 'request/response', 'response wait',
  ];
  const int = (x: number) => String(Math.floor(x));
  const rows = [...rep.points].sort((a, b) => a.throughput - b.throughput).map((p) => [
    String(p.load), String(Number(p.throughput.toFixed(2))), int(p.sendUs), int(p.networkUs),
    int(p.server?.queueUs ?? 0), int(p.server?.computeInputUs ?? 0), int(p.server?.computeInferUs ?? 0), int(p.server?.computeOutputUs ?? 0),
    int(p.recvUs), ...pcts.map((k) => int(p.percentiles[k]!)), int(p.avgUs), int(p.sendUs + p.recvUs), int(p.waitUs),
  ]);
  return [header, ...rows].map((row) => row.join(',')).join('\n') + '\n';
}

const esc = (s: string) => s.replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]!);

/** A "nice" axis step (1, 2 or 5 × 10^k) giving about `n` ticks up to `max`. */
function niceStep(max: number, n = 5): number {
  if (max <= 0) return 1;
  const raw = max / n;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const f = raw / mag;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
}

interface Series {
  label: string;
  color: string;
  latencyMs: (p: PerfPoint) => number;
}

/** Self-contained HTML: an SVG of throughput (y) against latency (x), one marker per load point. */
export function toPlotHtml(rep: PerfReport): string {
  const tail = rep.options.percentile && ![50, 90, 95, 99].includes(rep.options.percentile) ? rep.options.percentile : 99;
  const series: Series[] = [
    { label: 'average latency', color: '#1f77b4', latencyMs: (p) => p.avgUs / 1000 },
    { label: `p${tail} latency`, color: '#d62728', latencyMs: (p) => p.percentiles[tail]! / 1000 },
  ];
  const pts = [...rep.points].sort((a, b) => a.load - b.load);
  const W = 760, H = 460, L = 70, R = 20, T = 60, B = 60;
  const maxX = Math.max(1e-3, ...pts.flatMap((p) => series.map((s) => s.latencyMs(p)))) * 1.08;
  const maxY = Math.max(1, ...pts.map((p) => p.throughput)) * 1.1;
  const sx = niceStep(maxX), sy = niceStep(maxY);
  const X = (v: number) => L + (v / maxX) * (W - L - R);
  const Y = (v: number) => H - B - (v / maxY) * (H - T - B);
  const f = (v: number) => v.toFixed(1);
  const grid: string[] = [];
  for (let v = 0; v <= maxX + 1e-12; v += sx) {
    grid.push(`<line x1="${f(X(v))}" y1="${T}" x2="${f(X(v))}" y2="${H - B}" class="grid"/><text x="${f(X(v))}" y="${H - B + 18}" text-anchor="middle">${+v.toPrecision(6)}</text>`);
  }
  for (let v = 0; v <= maxY + 1e-12; v += sy) {
    grid.push(`<line x1="${L}" y1="${f(Y(v))}" x2="${W - R}" y2="${f(Y(v))}" class="grid"/><text x="${L - 8}" y="${f(Y(v) + 4)}" text-anchor="end">${+v.toPrecision(6)}</text>`);
  }
  const marks = series.map((s) => {
    const xy = pts.map((p) => [X(s.latencyMs(p)), Y(p.throughput)] as const);
    const line = `<polyline fill="none" stroke="${s.color}" stroke-width="1.5" points="${xy.map(([x, y]) => `${f(x)},${f(y)}`).join(' ')}"/>`;
    const dots = pts.map((p, i) => `<circle class="point" cx="${f(xy[i]![0])}" cy="${f(xy[i]![1])}" r="4" fill="${s.color}" data-load="${p.load}" data-throughput="${p.throughput.toFixed(2)}" data-latency-ms="${s.latencyMs(p).toFixed(3)}"><title>${esc(`${loadName(rep)} ${p.load}: ${p.throughput.toFixed(1)} infer/s at ${s.latencyMs(p).toFixed(3)} ms (${s.label})`)}</title></circle><text x="${f(xy[i]![0] + 6)}" y="${f(xy[i]![1] - 6)}" class="lbl">${p.load}</text>`);
    return line + dots.join('');
  }).join('\n');
  // Above the plot area, where it can never cover a point.
  const legend = series.map((s, i) => `<rect x="${L + i * 170}" y="${T - 24}" width="12" height="12" fill="${s.color}"/><text x="${L + 18 + i * 170}" y="${T - 14}">${esc(s.label)}</text>`).join('');
  const title = `${rep.model.name} — ${rep.options.protocol.toUpperCase()} ${rep.options.url}, batch ${rep.options.batchSize}`;
  const svg = `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">
<style>.grid{stroke:#ddd;stroke-width:1}.lbl{font-size:10px;fill:#444}</style>
<text x="${W / 2}" y="22" text-anchor="middle" font-size="14">${esc(title)}</text>
${grid.join('\n')}
<line x1="${L}" y1="${H - B}" x2="${W - R}" y2="${H - B}" stroke="#000"/><line x1="${L}" y1="${T}" x2="${L}" y2="${H - B}" stroke="#000"/>
<text x="${(L + W - R) / 2}" y="${H - 18}" text-anchor="middle">latency (ms)</text>
<text transform="translate(18 ${(T + H - B) / 2}) rotate(-90)" text-anchor="middle">throughput (infer/sec)</text>
${marks}
${legend}
</svg>`;
  const head = [loadName(rep), 'infer/sec', 'avg µs', ...Object.keys(pts[0]?.percentiles ?? {}).map((k) => `p${k} µs`)];
  const rows = pts.map((p) => `<tr><td>${p.load}</td><td>${p.throughput.toFixed(2)}</td><td>${r(p.avgUs)}</td>${Object.values(p.percentiles).map((v) => `<td>${r(v)}</td>`).join('')}</tr>`);
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${esc(`tsi-node perf: ${rep.model.name}`)}</title>
<style>body{font-family:sans-serif;margin:24px}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}</style></head>
<body>
<h1>${esc(`tsi-node perf: ${rep.model.name}`)}</h1>
<p>${esc(`${rep.options.protocol.toUpperCase()} ${rep.options.url}; batch ${rep.options.batchSize}; window ${rep.options.measurementIntervalMs} ms; stability ±${rep.options.stabilityPct}%; generated ${new Date().toISOString()}`)}</p>
${svg}
<table><tr>${head.map((h) => `<th>${esc(h)}</th>`).join('')}</tr>
${rows.join('\n')}
</table>
</body></html>
`;
}
