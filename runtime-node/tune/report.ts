/**
 * What `tsi-node tune` leaves behind: the table of every configuration tried (text), the best
 * config.pbtxt with comments saying what was measured, and a self-contained HTML report (inline SVG and
 * CSS, no scripts: it opens from disk and under the dashboard's strict CSP) with a throughput-vs-p99
 * curve per configuration over its concurrency sweep and the Pareto front of every point measured.
 */

import { formatPbtxt, type ModelConfig } from '../../core/index.js';
import { describeKnobs, fmtScore, paretoFront, type Objective, type SearchResult, type Trial } from './search.js';

export interface TuneSummary {
  model: string;
  objective: Objective;
  result: SearchResult;
  /** When and against what it ran, for the report's header. */
  startedAt: string;
  server: string;
  budgetMinutes: number;
}

const f1 = (x: number) => x.toFixed(1);
const f2 = (x: number) => x.toFixed(2);

export function objectiveText(o: Objective): string {
  const parts = ['maximise throughput'];
  if (o.latencyBudgetMs !== undefined) parts.push(`p99 ≤ ${o.latencyBudgetMs} ms`);
  if (o.minThroughput !== undefined) parts.push(`throughput ≥ ${o.minThroughput} infer/s`);
  return parts.join(', ');
}

/** The verdict in one line: how the best compares with the shipped config. */
export function verdict(r: SearchResult): string {
  if (r.best === r.shipped) return `the shipped config is already the best found (${fmtScore(r.shipped.score)})`;
  const s = r.shipped.score;
  const b = r.best.score;
  const ratio = s > 0 && b > 0 ? ` (${f2(b / s)}× the shipped ${f1(s)} infer/s)` : ` (shipped: ${fmtScore(s)})`;
  return `tuned config #${r.best.id} beats the shipped one: ${fmtScore(b)}${ratio}`;
}

/** One row per configuration, Markdown-compatible so it can go straight into a README. */
export function trialsTable(s: TuneSummary): string {
  const rows = [
    // A confirmed row (the shipped config and the winner) shows the worse of its two measurements.
    '| # | instances | max_batch | dynamic batching | delay µs | preferred | concurrency | infer/s | p99 ms | objective |',
    '|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const t of s.result.trials) {
    const k = t.knobs;
    const mark = [t.shipped ? 'shipped' : '', t === s.result.best ? '**best**' : '', t.confirmation ? 'confirmed' : ''].filter(Boolean).join(', ');
    rows.push(`| ${t.id}${mark ? ` (${mark})` : ''} | ${k.instances} | ${k.maxBatchSize} | ${k.dynamicBatching ? 'on' : 'off'} | ${k.dynamicBatching ? k.maxQueueDelayUs : '-'} | ${k.preferredBatchSizes.join(' ') || '-'} | ${t.best ? t.best.concurrency : '-'} | ${t.best ? f1(t.best.throughput) : '-'} | ${t.best ? f2(t.best.p99Ms) : '-'} | ${t.error ? `failed: ${t.error}` : fmtScore(t.score)} |`);
  }
  return rows.join('\n');
}

/** The best config as config.pbtxt, its header saying what was measured and how. */
export function bestPbtxt(s: TuneSummary, config: ModelConfig): string {
  const { best, shipped } = s.result;
  const at = (t: Trial) => (t.best
    ? `${f1(t.best.throughput)} infer/s at concurrency ${t.best.concurrency}, p99 ${f2(t.best.p99Ms)} ms${t.confirmation ? ' (after the confirmation round)' : ''}`
    : fmtScore(t.score));
  return formatPbtxt(config, [
    `Tuned by tsi-node tune on ${s.startedAt} against ${s.server}.`,
    `Objective: ${objectiveText(s.objective)}.`,
    `Measured: ${at(best)} (${describeKnobs(best.knobs)}).`,
    `Shipped config: ${at(shipped)} (${describeKnobs(shipped.knobs)}).`,
    `${s.result.trials.length} configurations tried in one run; search stopped at a ${s.result.stopped}. Numbers hold for that machine and load.`,
    '',
  ]);
}

const esc = (t: string) => t.replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]!);
const COLORS = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c', '#0891b2', '#ca8a04', '#db2777', '#4b5563', '#65a30d'];

/** The self-contained HTML report. */
export function reportHtml(s: TuneSummary): string {
  const { trials, best, shipped } = s.result;
  const all = trials.flatMap((t) => t.points.map((p) => ({ t, p })));
  const W = 760;
  const H = 420;
  const pad = { l: 64, r: 16, t: 16, b: 44 };
  const maxX = Math.max(1e-3, ...all.map((a) => a.p.p99Ms), s.objective.latencyBudgetMs ?? 0) * 1.05;
  const maxY = Math.max(1e-3, ...all.map((a) => a.p.throughput)) * 1.08;
  const x = (v: number) => pad.l + ((W - pad.l - pad.r) * v) / maxX;
  const y = (v: number) => H - pad.b - ((H - pad.t - pad.b) * v) / maxY;
  const svg: string[] = [`<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img" aria-label="throughput versus p99 latency">`];
  for (let i = 0; i <= 5; i++) {
    const gy = y((maxY * i) / 5);
    const gx = x((maxX * i) / 5);
    svg.push(`<line x1="${pad.l}" x2="${W - pad.r}" y1="${gy}" y2="${gy}" class="grid"/><text x="${pad.l - 6}" y="${gy + 4}" text-anchor="end">${f1((maxY * i) / 5)}</text>`);
    svg.push(`<line x1="${gx}" x2="${gx}" y1="${pad.t}" y2="${H - pad.b}" class="grid"/><text x="${gx}" y="${H - pad.b + 16}" text-anchor="middle">${f2((maxX * i) / 5)}</text>`);
  }
  svg.push(`<text x="${(W + pad.l) / 2}" y="${H - 6}" text-anchor="middle">p99 latency (ms)</text>`);
  svg.push(`<text x="14" y="${(H - pad.b) / 2}" transform="rotate(-90 14 ${(H - pad.b) / 2})" text-anchor="middle">throughput (infer/s)</text>`);
  if (s.objective.latencyBudgetMs !== undefined) {
    const bx = x(s.objective.latencyBudgetMs);
    svg.push(`<line x1="${bx}" x2="${bx}" y1="${pad.t}" y2="${H - pad.b}" class="budget"/><text x="${bx + 4}" y="${pad.t + 12}">latency budget</text>`);
  }
  trials.forEach((t, i) => {
    if (t.points.length === 0) return;
    const c = COLORS[i % COLORS.length]!;
    const width = t === best ? 3.5 : t.shipped ? 2.5 : 1.5;
    svg.push(`<polyline fill="none" stroke="${c}" stroke-width="${width}" points="${t.points.map((p) => `${f1(x(p.p99Ms))},${f1(y(p.throughput))}`).join(' ')}"><title>#${t.id} ${esc(describeKnobs(t.knobs))}</title></polyline>`);
    for (const p of t.points) svg.push(`<circle cx="${f1(x(p.p99Ms))}" cy="${f1(y(p.throughput))}" r="3" fill="${c}"><title>#${t.id} concurrency ${p.concurrency}: ${f1(p.throughput)} infer/s, p99 ${f2(p.p99Ms)} ms</title></circle>`);
  });
  const front = paretoFront(all.map((a) => a.p)).map((i) => all[i]!);
  svg.push(`<polyline class="pareto" fill="none" points="${front.map((a) => `${f1(x(a.p.p99Ms))},${f1(y(a.p.throughput))}`).join(' ')}"/>`);
  svg.push('</svg>');
  const legend = trials.map((t, i) => `<li><i style="background:${COLORS[i % COLORS.length]}"></i>#${t.id}${t.shipped ? ' (shipped)' : ''}${t === best ? ' <b>(best)</b>' : ''} ${esc(describeKnobs(t.knobs))}</li>`).join('');
  const frontRows = front.map((a) => `<tr><td>#${a.t.id}</td><td>${esc(describeKnobs(a.t.knobs))}</td><td>${a.p.concurrency}</td><td>${f1(a.p.throughput)}</td><td>${f2(a.p.p99Ms)}</td></tr>`).join('');
  const table = trials.map((t) => `<tr${t === best ? ' class="best"' : ''}><td>#${t.id}${t.shipped ? ' shipped' : ''}</td><td>${esc(describeKnobs(t.knobs))}</td><td>${t.points.map((p) => `${p.concurrency}: ${f1(p.throughput)}/s, ${f2(p.p99Ms)} ms`).join('<br>')}</td><td>${esc(t.error ? `failed: ${t.error}` : fmtScore(t.score))}</td></tr>`).join('');
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>tsi-node tune: ${esc(s.model)}</title>
<style>
body { font: 14px/1.45 system-ui, sans-serif; margin: 1.5em; color: #1b1f24; max-width: 1100px; }
svg text { font-size: 11px; fill: #444; } .grid { stroke: #e5e7eb; } .budget { stroke: #b42318; stroke-dasharray: 4 3; }
.pareto { stroke: #111; stroke-width: 1.5; stroke-dasharray: 6 4; }
table { border-collapse: collapse; margin: .6em 0; } th, td { border-bottom: 1px solid #e5e7eb; padding: .25em .6em; text-align: left; vertical-align: top; }
tr.best { background: #ecfdf3; } ul.legend { list-style: none; padding: 0; columns: 2; } ul.legend i { display: inline-block; width: .9em; height: .9em; margin-right: .4em; vertical-align: -.1em; }
</style></head><body>
<h1>tsi-node tune: ${esc(s.model)}</h1>
<p>${esc(s.startedAt)} · ${esc(s.server)} · objective: ${esc(objectiveText(s.objective))} · budget ${s.budgetMinutes} min · ${trials.length} configurations · stopped at a ${esc(s.result.stopped)}</p>
<p><b>${esc(verdict(s.result))}</b>. Shipped: ${esc(describeKnobs(shipped.knobs))}. Best: ${esc(describeKnobs(best.knobs))}.</p>
<h2>Throughput against p99 latency</h2>
<p>One curve per configuration over its concurrency sweep (concurrency doubles along each curve); the dashed black line is the Pareto front of every point measured.</p>
${svg.join('\n')}
<ul class="legend">${legend}</ul>
<h2>Pareto front</h2>
<table><tr><th>config</th><th>knobs</th><th>concurrency</th><th>infer/s</th><th>p99 ms</th></tr>${frontRows}</table>
<h2>Every configuration</h2>
<table><tr><th>config</th><th>knobs</th><th>sweep (concurrency: throughput, p99)</th><th>objective</th></tr>${table}</table>
</body></html>
`;
}
