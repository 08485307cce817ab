/**
 * The dashboard page: polls the server's own APIs (repository index, statistics, model metadata) and
 * draws what they say. It holds no numbers of its own: the totals table is the statistics API as is,
 * the charts are differences between two of its readings. Every string from the server goes in with
 * textContent, never as markup, since model names and error texts come from whoever loads models.
 * `?interval=<ms>` sets the poll interval (default 1000).
 */

import { PALETTE, drawLineChart } from './charts.js';
import { byKey, point, totals } from './stats-series.js';

const params = new URLSearchParams(location.search);
const INTERVAL_MS = Math.max(100, Number(params.get('interval')) || 1000);
const WINDOW_MS = 120_000;
const HEADERS_KEY = 'tsi-dashboard-headers';
const $ = (id) => document.getElementById(id);

/** Extra request headers the user entered (API key, restricted-API header). */
function extraHeaders() {
  const out = {};
  for (const line of (sessionStorage.getItem(HEADERS_KEY) ?? '').split('\n')) {
    const i = line.indexOf(':');
    if (i > 0) out[line.slice(0, i).trim()] = line.slice(i + 1).trim();
  }
  return out;
}

async function api(path, init = {}) {
  const r = await fetch(path, { ...init, headers: { ...extraHeaders(), ...(init.headers ?? {}) } });
  const text = await r.text();
  let body;
  try {
    body = text ? JSON.parse(text) : {};
  } catch {
    body = { error: text };
  }
  if (!r.ok) throw new Error(`${path}: ${body.error ?? r.statusText} (HTTP ${r.status})`);
  return body;
}

function el(tag, props = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    // Styles through the CSSOM: the page's CSP allows no inline style attributes.
    if (k === 'dataset' || k === 'style') Object.assign(e[k], v);
    else if (k === 'on') for (const [ev, f] of Object.entries(v)) e.addEventListener(ev, f);
    else e[k] = v;
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

function status(text, error = false) {
  $('status').textContent = text;
  $('status').className = error ? 'error' : '';
}

let config = { model_control_mode: 'none', tune_reports: [] };
/** Per `model:version`: points `[timeMs, {rps, queueMs, ...}]` and the last statistics reading. */
const history = new Map();
let last;
let lastIndex;
const colors = new Map();
const colorOf = (key) => {
  if (!colors.has(key)) colors.set(key, PALETTE[colors.size % PALETTE.length]);
  return colors.get(key);
};

async function refreshModels() {
  const index = await api('/v2/repository/index', { method: 'POST', body: '{}', headers: { 'Content-Type': 'application/json' } });
  // Rows are rebuilt only when something changed, so a button is never swapped under the pointer.
  const seen = JSON.stringify(index);
  if (seen === lastIndex) return;
  lastIndex = seen;
  const explicit = config.model_control_mode === 'explicit';
  const rows = index.map((m) => {
    const actions = el('td');
    if (explicit) {
      const ready = m.state === 'READY';
      actions.append(el('button', {
        type: 'button', textContent: ready ? 'Unload' : 'Load', dataset: { action: ready ? 'unload' : 'load', model: m.name },
        on: { click: () => control(m.name, ready ? 'unload' : 'load') },
      }));
    }
    return el('tr', { dataset: { model: m.name } },
      el('td', {}, m.name), el('td', {}, m.version ?? ''), el('td', { className: `state-${m.state ?? 'UNKNOWN'}` }, m.state ?? 'not loaded'),
      el('td', {}, m.reason ?? ''), actions);
  });
  $('models').tBodies[0].replaceChildren(...rows);
  const select = $('try-model');
  const ready = [...new Set(index.filter((m) => m.state === 'READY').map((m) => m.name))];
  const chosen = select.value;
  if ([...select.options].map((o) => o.value).join() !== ready.join()) {
    select.replaceChildren(...ready.map((n) => el('option', { value: n, textContent: n })));
    if (ready.includes(chosen)) select.value = chosen;
    await buildTryForm();
  }
}

async function control(model, action) {
  status(`${action}ing ${model}…`);
  try {
    await api(`/v2/repository/models/${encodeURIComponent(model)}/${action}`, { method: 'POST', body: '{}', headers: { 'Content-Type': 'application/json' } });
    status(`${model}: ${action}ed`);
  } catch (err) {
    status(err.message, true);
  }
  await refreshModels().catch((err) => status(err.message, true));
}

const fixed = (v, d) => (Number.isInteger(v) ? String(v) : v.toFixed(d));

async function poll() {
  const t = performance.now();
  const cur = byKey(await api('/v2/models/stats'));
  for (const [key, s] of cur) {
    const h = history.get(key) ?? { points: [] };
    const p = point(last?.stats.get(key), s, last ? t - last.t : 0);
    h.points.push([t, p]);
    while (h.points.length > 0 && h.points[0][0] < t - WINDOW_MS) h.points.shift();
    history.set(key, h);
  }
  last = { t, stats: cur };
  const rows = [...cur].map(([key, s]) => {
    const tot = totals(s);
    const cell = (name, v, d = 1) => el('td', { className: `num ${name}` }, fixed(v, d));
    return el('tr', { dataset: { model: s.name, version: s.version } },
      el('td', {}, el('i', { className: 'swatch', style: { background: colorOf(key) } }), s.name), el('td', {}, s.version),
      cell('requests', tot.requests), cell('failures', tot.failures), cell('inferences', tot.inferences), cell('executions', tot.executions),
      cell('avg-batch', tot.avgBatch, 2), cell('avg-queue-us', tot.avgQueueUs), cell('avg-compute-us', tot.avgComputeUs));
  });
  $('totals').tBodies[0].replaceChildren(...rows);
  $('legend').replaceChildren(...[...cur.keys()].map((k) => el('span', {}, el('i', { style: { background: colorOf(k) } }), k)));
  draw(t);
}

function draw(nowMs) {
  const charts = { rps: 'chart-rps', queueMs: 'chart-queue', computeMs: 'chart-compute', batch: 'chart-batch', failps: 'chart-fail' };
  for (const [field, id] of Object.entries(charts)) {
    const series = [...history].filter(([key]) => last?.stats.has(key))
      .map(([key, h]) => ({ name: key, color: colorOf(key), points: h.points.map(([t, p]) => [t, p[field]]) }));
    drawLineChart($(id), series, { nowMs, windowMs: WINDOW_MS });
  }
}

/** Zeros (or empty strings) shaped like the input; -1 dims become 1. */
function sample(datatype, shape) {
  const n = shape.reduce((a, d) => a * (d < 0 ? 1 : d), 1);
  const v = datatype === 'BYTES' ? '' : datatype === 'BOOL' ? false : 0;
  return Array.from({ length: n }, () => v);
}

async function buildTryForm() {
  const model = $('try-model').value;
  const box = $('try-inputs');
  if (!model) {
    box.replaceChildren();
    return;
  }
  const meta = await api(`/v2/models/${encodeURIComponent(model)}`);
  box.replaceChildren(...meta.inputs.map((inp) => {
    const shape = inp.shape.map((d) => (d < 0 ? 1 : d));
    return el('label', { dataset: { input: inp.name, datatype: inp.datatype } },
      `${inp.name} (${inp.datatype}) shape `,
      el('input', { className: 'shape', value: JSON.stringify(shape), size: 16 }),
      el('textarea', { className: 'data', rows: 3, value: JSON.stringify(sample(inp.datatype, shape)) }));
  }));
}

async function tryInfer(ev) {
  ev.preventDefault();
  const model = $('try-model').value;
  try {
    const inputs = [...$('try-inputs').querySelectorAll('label')].map((l) => ({
      name: l.dataset.input, datatype: l.dataset.datatype,
      shape: JSON.parse(l.querySelector('.shape').value), data: JSON.parse(l.querySelector('.data').value),
    }));
    const body = await api(`/v2/models/${encodeURIComponent(model)}/infer`, {
      method: 'POST', body: JSON.stringify({ inputs }), headers: { 'Content-Type': 'application/json' },
    });
    $('try-result').textContent = JSON.stringify(body, null, 1);
  } catch (err) {
    $('try-result').textContent = err.message;
  }
}

async function main() {
  $('headers').value = sessionStorage.getItem(HEADERS_KEY) ?? '';
  $('save-headers').addEventListener('click', () => {
    sessionStorage.setItem(HEADERS_KEY, $('headers').value);
    void tick();
  });
  $('try-model').addEventListener('change', () => buildTryForm().catch((err) => status(err.message, true)));
  $('try').addEventListener('submit', tryInfer);
  $('interval').textContent = `(every ${INTERVAL_MS} ms, last ${WINDOW_MS / 1000} s)`;
  try {
    config = await api('/dashboard/config.json');
    const server = await api('/v2');
    $('server-name').textContent = server.name;
    $('server-version').textContent = `version ${server.version}`;
  } catch (err) {
    status(err.message, true);
  }
  $('mode').textContent = `model control: ${config.model_control_mode}`;
  if (config.tune_reports.length > 0) {
    $('tune-section').hidden = false;
    $('tune-reports').replaceChildren(...config.tune_reports.map((r) => el('li', {}, el('a', { href: `tune/${encodeURIComponent(r)}`, textContent: r }))));
  }
  await tick();
  setInterval(tick, INTERVAL_MS);
}

let ticking = false;
/** One refresh; a slow server never gets a second poll on top of one still running. */
async function tick() {
  if (ticking) return;
  ticking = true;
  // Each part on its own: a restricted repository API must not stop the charts, nor the reverse.
  const errors = [];
  for (const part of [refreshModels, poll]) {
    try {
      await part();
    } catch (err) {
      errors.push(err.message);
    }
  }
  if (errors.length) status(errors.join('; '), true);
  else status(`updated ${new Date().toLocaleTimeString()}`);
  document.body.dataset.polls = String(Number(document.body.dataset.polls ?? 0) + 1);
  ticking = false;
}

void main();
