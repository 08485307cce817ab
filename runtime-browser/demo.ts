/**
 * The demo page's script: lists the models of the tsi-node server that served the page, and for the
 * chosen one sends the same generated inputs to an in-page tsi server (loaded on demand from the
 * server's `/repository/` mount, on the chosen device) and to the Node server's v2 endpoint, then shows
 * timings and whether the answers agree. Query parameters `repository` and `server` point it elsewhere.
 */

import { createServer, type BrowserServer, type DevicePreference } from './index.js';

const q = new URLSearchParams(location.search);
const REPOSITORY = q.get('repository') ?? '/repository/';
const NODE = (q.get('server') ?? location.origin).replace(/\/$/, '');

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;
const log = (s: string) => ($('log').textContent += `${s}\n`);

interface IoMeta { name: string; datatype: string; shape: number[] }
interface Meta { name: string; inputs: IoMeta[]; outputs: IoMeta[] }

const servers = new Map<DevicePreference, Promise<BrowserServer>>();
export function pageServer(device: DevicePreference): Promise<BrowserServer> {
  let s = servers.get(device);
  if (!s) {
    // Explicit mode: a model is fetched and loaded only when it is first run.
    s = createServer({ repository: REPOSITORY, device, modelControlMode: 'explicit', loadModels: [] });
    servers.set(device, s);
  }
  return s;
}

async function nodeJson(path: string, body?: unknown): Promise<any> {
  const r = await fetch(`${NODE}${path}`, body === undefined ? {} : { method: 'POST', body: JSON.stringify(body), headers: { 'Content-Type': 'application/json' } });
  const j = await r.json();
  if (!r.ok) throw new Error(`${path}: ${j.error ?? r.status}`);
  return j;
}

/** Deterministic inputs for any model: small ints, [-1,1) floats, decimal strings. */
function makeInput(io: IoMeta, batch: number, seed: number): { shape: number[]; values: (number | string | boolean)[] } {
  const shape = io.shape.map((d, i) => (d >= 0 ? d : i === 0 ? batch : 4));
  const n = shape.reduce((a, b) => a * b, 1);
  let s = seed >>> 0;
  const rnd = () => ((s = (Math.imul(s ^ (s >>> 15), 1 | s) + 0x6d2b79f5) >>> 0) / 2 ** 32);
  const values = Array.from({ length: n }, () => {
    const r = rnd();
    if (io.datatype === 'BYTES') return String(Math.floor(r * 100));
    if (io.datatype === 'BOOL') return r < 0.5;
    if (io.datatype.startsWith('FP')) return Math.fround(r * 2 - 1);
    return Math.floor(r * 100) - (io.datatype.startsWith('UINT') ? 0 : 50);
  });
  return { shape, values };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? NaN;
const preview = (v: ArrayLike<unknown>) => Array.from(v).slice(0, 6).map((x) => (typeof x === 'number' ? +x.toFixed(4) : String(x))).join(', ');

async function run(): Promise<void> {
  const model = $<HTMLSelectElement>('model').value;
  const device = $<HTMLSelectElement>('device').value as DevicePreference;
  const batch = Math.max(1, Number($<HTMLInputElement>('batch').value) || 1);
  const runs = Math.max(1, Number($<HTMLInputElement>('runs').value) || 1);
  const verdict = $('verdict');
  verdict.textContent = 'running…';
  verdict.removeAttribute('data-same');
  const meta = (await nodeJson(`/v2/models/${model}`)) as Meta;
  const cfg = await nodeJson(`/v2/models/${model}/config`);
  const b = cfg.max_batch_size > 0 ? Math.min(batch, cfg.max_batch_size) : batch;
  const inputs = meta.inputs.map((io, k) => ({ io, ...makeInput(io, b, 1234 + k) }));

  const server = await pageServer(device);
  const t0 = performance.now();
  if (!server.ready(model)) await server.load(model);
  const loadMs = performance.now() - t0;
  const call = () => server.inferTensors({
    model, inputs: Object.fromEntries(inputs.map((x) => [x.io.name, { data: x.values as never, shape: x.shape }])),
  });
  const body = { inputs: inputs.map((x) => ({ name: x.io.name, datatype: x.io.datatype, shape: x.shape, data: x.values })) };

  const timed = async <T>(f: () => Promise<T>) => {
    const s = performance.now();
    const r = await f();
    return { r, ms: performance.now() - s };
  };
  const pageFirst = await timed(call);
  const nodeFirst = await timed(() => nodeJson(`/v2/models/${model}/infer`, body));
  const pageMs: number[] = [];
  const nodeMs: number[] = [];
  for (let i = 0; i < runs; i++) pageMs.push((await timed(call)).ms);
  for (let i = 0; i < runs; i++) nodeMs.push((await timed(() => nodeJson(`/v2/models/${model}/infer`, body))).ms);

  let maxDiff = 0;
  let same = true;
  for (const o of nodeFirst.r.outputs as { name: string; data: unknown[] }[]) {
    const mine = pageFirst.r[o.name];
    if (!mine || mine.data.length !== o.data.length) {
      same = false;
      continue;
    }
    o.data.forEach((v, i) => {
      const w = (mine.data as ArrayLike<unknown>)[i];
      if (typeof v === 'number') maxDiff = Math.max(maxDiff, Math.abs(v - Number(w)));
      else if (String(v) !== String(w)) same = false;
    });
  }
  same &&= maxDiff <= 1e-4;
  const inst = server.instances(model);
  const where = inst.length > 0
    ? inst.map((i) => i.device + (i.fallbackReason ? ` (${i.fallbackReason})` : '')).join(', ')
    : cfg.platform === 'ensemble' ? 'ensemble: each step on its own model\'s instances' : '—';
  const first = (meta.outputs[0]?.name)!;
  const rows: [string, string, number, number, string][] = [
    ['this page', `${where}; loaded in ${loadMs.toFixed(0)} ms`, pageFirst.ms, median(pageMs), preview(pageFirst.r[first]?.data ?? [])],
    ['tsi-node', `${NODE} (onnxruntime-node, JSON over HTTP)`, nodeFirst.ms, median(nodeMs),
      preview((nodeFirst.r.outputs as { name: string; data: unknown[] }[]).find((o) => o.name === first)?.data ?? [])],
  ];
  const tbody = $('results').querySelector('tbody')!;
  tbody.replaceChildren(...rows.map((r) => {
    const tr = document.createElement('tr');
    r.forEach((c, i) => {
      const td = document.createElement('td');
      td.textContent = typeof c === 'number' ? c.toFixed(2) : c;
      if (typeof c === 'number') td.className = 'num';
      tr.append(td);
    });
    return tr;
  }));
  $('results').hidden = false;
  verdict.dataset.same = String(same);
  verdict.textContent = same
    ? `Same answers (max |difference| ${maxDiff.toExponential(1)}), batch ${b}, ${runs} runs each.`
    : `Answers differ (max |difference| ${maxDiff.toExponential(1)}).`;
}

async function main(): Promise<void> {
  const index = (await nodeJson('/v2/repository/index', {})) as { name: string; state: string }[];
  const select = $<HTMLSelectElement>('model');
  for (const e of index.filter((m) => m.state === 'READY')) {
    const cfg = await nodeJson(`/v2/models/${e.name}/config`);
    // Sequence models need correlated requests and decoupled ones a stream; the demo sends plain ones.
    if (cfg.sequence_batching || cfg.model_transaction_policy?.decoupled || select.querySelector(`option[value="${e.name}"]`)) continue;
    select.append(new Option(e.name, e.name, e.name === 'image_classifier', e.name === 'image_classifier'));
  }
  const s = await pageServer('wasm');
  const env = s.environment;
  $('env').textContent = [
    `crossOriginIsolated: ${env.crossOriginIsolated} → wasm threads: ${env.numThreads}`,
    `WebGPU: ${env.webgpu.available ? `${env.webgpu.vendor} ${env.webgpu.architecture}${env.webgpu.fallback ? ' (software fallback adapter)' : ''}` : env.webgpu.reason}`,
    `repository: ${new URL(REPOSITORY, location.href).href}`,
    `server: ${NODE}`,
  ].join('\n');
  const button = $<HTMLButtonElement>('run');
  button.disabled = false;
  button.onclick = () => {
    button.disabled = true;
    run().catch((err) => {
      $('verdict').textContent = `Error: ${(err as Error).message}`;
      log(String((err as Error).stack ?? err));
    }).finally(() => (button.disabled = false));
  };
}

main().catch((err) => ($('env').textContent = `failed to start: ${(err as Error).message}`));
