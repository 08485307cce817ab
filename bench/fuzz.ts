/**
 * The hostile-client fuzz: N generated requests at a running server, over HTTP/1.1 and gRPC, each one
 * wrong in some way a careless or malicious client could make it — parameters of the wrong type or
 * range, reserved names, shapes that overflow or go negative, datatypes that do not exist, JSON nested
 * ten thousand deep, binary framing that lies about its sizes, gzip that is not, request heads that
 * break HTTP/1.1, protobuf bytes that are not the message, streams of all of those — built from the
 * models the server actually has (their metadata), so most requests get deep into validation.
 * Requests come from fast-check arbitraries sampled with a seed (bench/fuzz-cases.ts): a run is
 * reproducible. This file sends them and judges the answers.
 *
 * Every answer is checked: (a) no 5xx over HTTP other than Triton's own 501 for what it does not
 * support, no INTERNAL, UNKNOWN or DATA_LOSS over gRPC, and an answer to every complete request;
 * (b) every HTTP error has a `{"error": "<non-empty>"}` body and every gRPC error a message; (c) every
 * `probeEvery` requests the server must still answer a correct inference over both protocols.
 *
 *   npx tsx bench/fuzz.ts [--requests 10000] [--seed 1] [--probe-every 200] [--exclude repeat_int32] [--trace]
 *   npx tsx bench/fuzz.ts --http http://127.0.0.1:8000 --grpc 127.0.0.1:8001   (a server already running)
 *   npm run bench:fuzz -- --requests 2000
 *
 * Without --http a server is started from the sources over models/ (bench/soak.ts spawnServer). A
 * short run is part of the test suite (test/node/fuzz-server.test.ts).
 */

// --markdown: this run's results replace its section of docs/performance.md (bench/markdown.ts).
import './markdown.js';
import { connect } from 'node:net';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import * as grpc from '@grpc/grpc-js';
import fc from 'fast-check';
import { loadProtos } from '../runtime-node/grpc/server.js';
import { BigNum, draft, grpcRequest, httpRequest, otherArb, otherRequest, planArb, rawArb, rawCase, toJson, type ModelMeta } from './fuzz-cases.js';

type Obj = Record<string, any>;

// ---------------------------------------------------------------------------------------------------
// Sending and judging.
// ---------------------------------------------------------------------------------------------------

interface HttpAnswer {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
}

/** Sends raw bytes on a fresh connection and reads one response (skipping 1xx); undefined if none. */
function sendRaw(port: number, bytes: Buffer, waitMs: number): Promise<{ answer?: HttpAnswer; closedEarly: boolean }> {
  return new Promise((resolve) => {
    const sock = connect(port, '127.0.0.1');
    let buf = Buffer.alloc(0);
    let settled = false;
    const finish = (answer?: HttpAnswer, closedEarly = false) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      sock.destroy();
      resolve({ answer, closedEarly });
    };
    const timer = setTimeout(() => finish(undefined), waitMs);
    sock.on('error', () => finish(undefined, true));
    sock.on('close', () => finish(parseAnswer(buf, true), buf.length === 0));
    sock.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      const a = parseAnswer(buf, false);
      if (a) finish(a);
    });
    sock.on('connect', () => sock.write(bytes));
  });
}

function parseAnswer(buf: Buffer, eof: boolean): HttpAnswer | undefined {
  let start = 0;
  for (;;) {
    const end = buf.indexOf('\r\n\r\n', start);
    if (end < 0) return undefined;
    const lines = buf.subarray(start, end).toString('latin1').split('\r\n');
    const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(lines[0]!)?.[1] ?? NaN);
    if (status >= 100 && status < 200) {
      start = end + 4;
      continue;
    }
    const headers: Record<string, string> = {};
    for (const l of lines.slice(1)) headers[l.slice(0, l.indexOf(':')).trim().toLowerCase()] = l.slice(l.indexOf(':') + 1).trim();
    const cl = headers['content-length'];
    if (cl !== undefined) {
      if (buf.length < end + 4 + Number(cl)) return undefined;
      return { status, headers, body: buf.subarray(end + 4, end + 4 + Number(cl)) };
    }
    if (headers['transfer-encoding']) {
      if (!eof && !buf.includes('0\r\n\r\n', end)) return undefined;
      return { status, headers, body: buf.subarray(end + 4) };
    }
    return { status, headers, body: buf.subarray(end + 4) };
  }
}

/** Triton's 503 texts (UNAVAILABLE): a model not ready, model control off, a full or timed-out queue. */
const TRITON_503 = /is not at ready state|not allowed if polling is enabled|Exceeds maximum queue size|Request timeout expired|Server not ready/;
/** A model that fails on input it accepted is Triton's 500 (the backend's INTERNAL), not a protocol error. */
const MODEL_FAILURE = /failed to run model|^\[request id: [^\]]*\] model '/;

/** What is wrong with an HTTP answer, or undefined. 501 (UNSUPPORTED) is Triton's answer where it has one. */
function judgeHttp(a: HttpAnswer | undefined, method: string): string | undefined {
  if (!a) return 'no answer';
  if (!Number.isInteger(a.status)) return 'an unparsable status line';
  const text = a.body.toString();
  if (a.status === 503 && TRITON_503.test(text)) return undefined;
  if (a.status === 500 && MODEL_FAILURE.test(errorOf(text))) return MODEL_FAILED;
  if (a.status >= 500 && a.status !== 501) return `status ${a.status}: ${text.slice(0, 300)}`;
  if (a.status >= 400 && method !== 'HEAD') {
    let j: unknown;
    try {
      j = JSON.parse(a.body.toString());
    } catch {
      return `status ${a.status} with a body that is not JSON: ${JSON.stringify(a.body.toString().slice(0, 200))}`;
    }
    const e = (j as Obj)?.error;
    if (typeof e !== 'string' || e.trim() === '') return `status ${a.status} without an error message: ${a.body.toString().slice(0, 200)}`;
  }
  return undefined;
}

const MODEL_FAILED = 'model failure';
const errorOf = (text: string): string => {
  try {
    return String(JSON.parse(text).error ?? '');
  } catch {
    return '';
  }
};

const BAD_GRPC = new Set([grpc.status.INTERNAL, grpc.status.UNKNOWN, grpc.status.DATA_LOSS]);

function judgeGrpc(err: grpc.ServiceError | null | undefined): string | undefined {
  if (!err) return undefined;
  if (err.code === grpc.status.DEADLINE_EXCEEDED) return 'no answer before the deadline';
  if (err.code === grpc.status.INTERNAL && MODEL_FAILURE.test(err.details)) return MODEL_FAILED;
  if (err.code === grpc.status.UNAVAILABLE && TRITON_503.test(err.details)) return undefined;
  if (BAD_GRPC.has(err.code)) return `${grpc.status[err.code]}: ${err.details}`;
  if (err.code === grpc.status.UNAVAILABLE && /Connection dropped|No connection established|connect/i.test(err.details)) return `the server went away: ${err.details}`;
  if (!err.details || err.details.trim() === '') return `${grpc.status[err.code]} without a message`;
  return undefined;
}

export interface FuzzOptions {
  requests: number;
  seed: number;
  probeEvery: number;
  /**
   * Models left out. By default repeat_int32, whose inputs are sleep durations: a hostile DELAY or
   * WAIT keeps its instance busy for as long as it says (as Triton's repeat backend would), which
   * stalls every later request to it without anything being wrong with the server.
   */
  exclude?: string[];
  /** Print each request as it goes, and those that took over a second. */
  trace?: boolean;
  log?: (line: string) => void;
}

export const DEFAULT_EXCLUDE = ['repeat_int32'];

export interface BadAnswer {
  what: string;
  problem: string;
}

export interface FuzzReport {
  sent: Record<string, number>;
  /** HTTP statuses and gRPC codes seen, by protocol. */
  answers: Record<string, number>;
  bad: BadAnswer[];
  /** Models that failed on input the server had accepted (Triton's 500 / INTERNAL, counted apart). */
  modelFailures: BadAnswer[];
  probes: number;
  /** The longest a single request (or stream) took to be answered, and which. */
  slowestMs: number;
  slowest: string;
  seconds: number;
}

/** Sends `requests` hostile requests at the server behind `http` (a URL) and `grpcAddress`; checks every answer. */
export async function runFuzz(http: string, grpcAddress: string, opts: FuzzOptions): Promise<FuzzReport> {
  const log = opts.log ?? (() => {});
  const port = Number(new URL(http).port);
  const t0 = Date.now();
  const defs = loadProtos().inference;
  const Client = grpc.makeGenericClientConstructor(defs as unknown as grpc.ServiceDefinition, 'GRPCInferenceService');
  const client = new Client(grpcAddress, grpc.credentials.createInsecure(), { 'grpc.max_receive_message_length': -1 }) as unknown as Obj & grpc.Client;

  // The models as the server describes them.
  const index = (await (await fetch(`${http}/v2/repository/index`, { method: 'POST', body: '{"ready":true}' })).json()) as Obj[];
  const models: ModelMeta[] = [];
  for (const e of index) {
    const md = (await (await fetch(`${http}/v2/models/${encodeURIComponent(e.name)}`)).json()) as Obj;
    if (md.inputs && !(opts.exclude ?? DEFAULT_EXCLUDE).includes(md.name)) models.push({ name: md.name, inputs: md.inputs, outputs: md.outputs });
  }
  log(`fuzz: ${models.length} models (${models.map((m) => m.name).join(', ')}), ${opts.requests} requests, seed ${opts.seed}`);

  const kinds = fc.sample(fc.nat(99), { numRuns: opts.requests, seed: opts.seed });
  const plans = fc.sample(planArb, { numRuns: opts.requests, seed: opts.seed + 1 });
  const raws = fc.sample(rawArb, { numRuns: opts.requests, seed: opts.seed + 2 });
  const others = fc.sample(otherArb, { numRuns: opts.requests, seed: opts.seed + 3 });
  const byteCases = fc.sample(fc.record({ method: fc.constantFrom('ModelInfer', 'ModelInfer', 'ModelMetadata', 'ModelReady', 'ModelConfig', 'ModelStatistics', 'RepositoryIndex', 'ModelStreamInfer'), bytes: fc.uint8Array({ maxLength: 200 }), cut: fc.nat(), flip: fc.nat() }), { numRuns: opts.requests, seed: opts.seed + 4 });

  const sent: Record<string, number> = {};
  const answers: Record<string, number> = {};
  const bad: BadAnswer[] = [];
  const modelFailures: BadAnswer[] = [];
  let probes = 0;
  const count = (r: Record<string, number>, k: string) => (r[k] = (r[k] ?? 0) + 1);
  const flag = (what: string, problem: string | undefined) => {
    if (problem === MODEL_FAILED) modelFailures.push({ what, problem });
    else if (problem) {
      bad.push({ what, problem });
      if (bad.length <= 20) log(`  BAD ${what}: ${problem}`);
    }
  };

  const unary = (method: string, msg: Obj | Buffer, rawBytes: boolean): Promise<grpc.ServiceError | null> => {
    const def = defs[method]!;
    return new Promise((resolve) => {
      const serialize = rawBytes ? (b: Buffer) => b : (def.requestSerialize as (m: Obj) => Buffer);
      client.makeUnaryRequest(def.path, serialize as (m: unknown) => Buffer, def.responseDeserialize as (b: Buffer) => Obj, msg, { deadline: Date.now() + 10_000 }, (err) => resolve(err));
    });
  };
  const stream = (messages: Buffer[]): Promise<{ err: grpc.ServiceError | null; errors: string[] }> => {
    const def = defs.ModelStreamInfer!;
    return new Promise((resolve) => {
      const s = client.makeBidiStreamRequest(def.path, (b: Buffer) => b, def.responseDeserialize as (b: Buffer) => Obj, { deadline: Date.now() + 20_000 });
      const errors: string[] = [];
      s.on('data', (m: Obj) => {
        if (m.error_message !== '') errors.push(m.error_message);
      });
      s.on('error', (err: grpc.ServiceError) => resolve({ err, errors }));
      s.on('end', () => resolve({ err: null, errors }));
      for (const m of messages) s.write(m);
      s.end();
    });
  };
  const encodeOr = (method: string, msg: Obj): Buffer => {
    try {
      return defs[method]!.requestSerialize(msg) as Buffer;
    } catch {
      return Buffer.from(toJson(msg).slice(0, 200));
    }
  };

  /** simple, right over both protocols. */
  const probe = async (i: number) => {
    probes++;
    const a = Array.from({ length: 16 }, (_, k) => ((i * 31 + k * 7) % 1000) - 500);
    const b = Array.from({ length: 16 }, (_, k) => ((i * 17 + k * 3) % 1000) - 500);
    const want0 = a.map((x, k) => x + b[k]!);
    const r = await fetch(`${http}/v2/models/simple/infer`, {
      method: 'POST', body: JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: a }, { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: b }] }),
    }).then(async (res) => ({ status: res.status, body: await res.json() as Obj })).catch((e: Error) => ({ status: 0, body: { error: e.message } as Obj }));
    const got = r.body.outputs?.find((o: Obj) => o.name === 'OUTPUT0')?.data;
    flag(`probe ${probes} over HTTP`, r.status === 200 && JSON.stringify(got) === JSON.stringify(want0) ? undefined : `HTTP ${r.status}: ${JSON.stringify(r.body).slice(0, 200)}`);
    const g = await new Promise<Obj | Error>((resolve) => {
      client.ModelInfer({
        model_name: 'simple', inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: ['1', '16'] }, { name: 'INPUT1', datatype: 'INT32', shape: ['1', '16'] }],
        raw_input_contents: [Buffer.from(Int32Array.from(a).buffer), Buffer.from(Int32Array.from(b).buffer)],
      }, (e: Error | null, res: Obj) => resolve(e ?? res));
    });
    const gGot = g instanceof Error ? undefined : Array.from(new Int32Array(new Uint8Array(g.raw_output_contents[0]).buffer));
    flag(`probe ${probes} over gRPC`, gGot && JSON.stringify(gGot) === JSON.stringify(want0) ? undefined : `gRPC: ${g instanceof Error ? g.message : 'wrong answer'}`);
  };

  /**
   * Answers Triton gives exactly, where a hostile request once got another (found by this fuzz):
   * each is sent once and its status compared, not only judged as an error.
   */
  const tritonAnswers = async () => {
    const simpleInputs = [{ name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: Array(16).fill(1) }, { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: Array(16).fill(2) }];
    const cls = await sendRaw(port, Buffer.from(((body: string) => `POST /v2/models/simple/infer HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`)(
      toJson({ inputs: simpleInputs, outputs: [{ name: 'OUTPUT0', parameters: { classification: new BigNum('18446744073709551616') } }] }))), 20_000);
    flag('classification 2^64 over HTTP', cls.answer?.status === 400 ? undefined : `HTTP ${cls.answer?.status ?? 'none'}, Triton answers 400`);
    const version = await unary('ModelInfer', {
      model_name: 'simple', model_version: '-1', inputs: simpleInputs.map((t) => ({ name: t.name, datatype: t.datatype, shape: ['1', '16'] })),
      raw_input_contents: [Buffer.alloc(64), Buffer.alloc(64)],
    }, false);
    flag('gRPC ModelInfer model_version "-1"', version?.code === grpc.status.INVALID_ARGUMENT ? undefined : `${version ? grpc.status[version.code] : 'OK'}, Triton answers INVALID_ARGUMENT`);
    const ready = await new Promise<Obj | Error>((resolve) => client.ModelReady({ name: 'no_such_model', version: '' }, (e: Error | null, r: Obj) => resolve(e ?? r)));
    flag('gRPC ModelReady of an unknown model', !(ready instanceof Error) && ready.ready === false ? undefined : `${ready instanceof Error ? ready.message : JSON.stringify(ready)}, Triton answers OK with ready=false`);
  };
  await tritonAnswers();

  let slowest = { ms: 0, what: '' };
  for (let i = 0; i < opts.requests; i++) {
    if (i % opts.probeEvery === 0) await probe(i);
    const k = kinds[i]!;
    const started = Date.now();
    if (opts.trace) log(`  #${i} kind ${k} ${k < 40 || (k >= 60 && k < 88) ? draft(models, plans[i]!).model : ''} ${JSON.stringify(plans[i]!.mutations.map((m) => m.kind))} ${plans[i]!.twists}`);
    if (k < 40) {
      // Structured infer over HTTP.
      const d = draft(models, plans[i]!);
      const r = httpRequest(d);
      const head = `POST ${r.path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: ${r.body.byteLength}\r\n${Object.entries(r.headers).map(([h, v]) => `${h}: ${v}\r\n`).join('')}Connection: close\r\n\r\n`;
      const { answer } = await sendRaw(port, Buffer.concat([Buffer.from(head, 'latin1'), r.body]), 20_000);
      count(sent, 'http infer');
      count(answers, `http ${answer?.status ?? 'none'}`);
      flag(`http infer #${i} (${d.model}: ${plans[i]!.mutations.map((m) => m.kind).join(', ') || 'valid'}; ${d.twists.join(', ')})`, judgeHttp(answer, 'POST'));
    } else if (k < 50) {
      const o = otherRequest(others[i]!, models);
      const head = `${o.method} ${o.path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: ${o.body?.byteLength ?? 0}\r\nConnection: close\r\n\r\n`;
      const { answer } = await sendRaw(port, Buffer.concat([Buffer.from(head, 'latin1'), o.body ?? Buffer.alloc(0)]), 20_000);
      count(sent, 'http other');
      count(answers, `http ${answer?.status ?? 'none'}`);
      flag(`http ${o.method} ${o.path} #${i}`, judgeHttp(answer, o.method));
    } else if (k < 60) {
      const c = rawCase(raws[i]!);
      const { answer, closedEarly } = await sendRaw(port, c.bytes, c.complete ? 5000 : 300);
      count(sent, 'http/1.1 raw');
      count(answers, `http ${answer?.status ?? 'none'}`);
      if (c.complete || answer) flag(`http/1.1 raw #${i} (${c.what})`, answer ? judgeHttp(answer, 'GET') : closedEarly ? 'closed without an answer' : 'no answer');
    } else if (k < 88) {
      const d = draft(models, plans[i]!);
      const msg = grpcRequest(d);
      const err = await unary('ModelInfer', encodeOr('ModelInfer', msg), true);
      count(sent, 'grpc infer');
      count(answers, `grpc ${err ? grpc.status[err.code] : 'OK'}`);
      flag(`grpc infer #${i} (${d.model}: ${plans[i]!.mutations.map((m) => m.kind).join(', ') || 'valid'}; ${d.twists.join(', ')})`, judgeGrpc(err));
    } else if (k < 95) {
      const bc = byteCases[i]!;
      // Random bytes, or a real message cut short or with a byte flipped.
      let bytes: Buffer = Buffer.from(bc.bytes);
      if (bc.flip % 3 !== 0) {
        const real = encodeOr('ModelInfer', grpcRequest(draft(models, plans[i]!)));
        bytes = bc.flip % 3 === 1 ? real.subarray(0, bc.cut % Math.max(1, real.length)) : Buffer.from(real);
        if (bc.flip % 3 === 2 && bytes.length > 0) bytes[bc.cut % bytes.length] ^= 1 << (bc.flip % 8);
      }
      let err: grpc.ServiceError | null;
      if (bc.method === 'ModelStreamInfer') err = (await stream([bytes])).err;
      else err = await unary(bc.method, bytes, true);
      count(sent, 'grpc bytes');
      count(answers, `grpc ${err ? grpc.status[err.code] : 'OK'}`);
      flag(`grpc bytes to ${bc.method} #${i}`, judgeGrpc(err));
    } else {
      const n = 1 + (i % 5);
      const msgs = Array.from({ length: n }, (_, j) => encodeOr('ModelStreamInfer', grpcRequest(draft(models, plans[(i + j * 7919) % plans.length]!))));
      const { err, errors } = await stream(msgs);
      count(sent, 'grpc stream');
      count(answers, `grpc stream ${err ? grpc.status[err.code] : 'OK'}`);
      flag(`grpc stream of ${n} #${i}`, judgeGrpc(err) ?? (errors.some((e) => e.trim() === '') ? 'an empty error_message' : undefined));
    }
    const took = Date.now() - started;
    if (took > slowest.ms) slowest = { ms: took, what: `#${i} (kind ${k})` };
    if (opts.trace && took > 1000) log(`  SLOW #${i}: ${took} ms`);
    if ((i + 1) % 1000 === 0) log(`  ${i + 1} requests, ${bad.length} bad, ${Math.round((Date.now() - t0) / 1000)} s`);
  }
  await probe(opts.requests);
  client.close();
  return { sent, answers, bad, modelFailures, probes, slowestMs: slowest.ms, slowest: slowest.what, seconds: Math.round((Date.now() - t0) / 100) / 10 };
}

async function main(): Promise<void> {
  const { values: a } = parseArgs({
    options: {
      requests: { type: 'string', default: '10000' },
      seed: { type: 'string', default: '1' },
      'probe-every': { type: 'string', default: '200' },
      http: { type: 'string' },
      grpc: { type: 'string' },
      exclude: { type: 'string', default: DEFAULT_EXCLUDE.join(',') },
      trace: { type: 'boolean', default: false },
    },
  });
  const { spawnServer } = await import('./soak.js');
  const server = a.http ? undefined : await spawnServer();
  const http = a.http ?? server!.http;
  const grpcAddress = a.grpc ?? server?.grpc ?? '127.0.0.1:8001';
  const rssStart = server ? await server.rss() : 0;
  let report: FuzzReport;
  try {
    report = await runFuzz(http, grpcAddress, {
      requests: Number(a.requests), seed: Number(a.seed), probeEvery: Number(a['probe-every']), log: (l) => console.log(l),
      exclude: a.exclude ? a.exclude.split(',') : [], trace: a.trace,
    });
  } finally {
    if (server) {
      const rss = await server.rss();
      console.log(`server RSS: ${Math.round(rssStart / 1048576)} MiB at start, ${Math.round(rss / 1048576)} MiB at the end`);
      await server.stop();
    }
  }
  console.log(`sent: ${JSON.stringify(report.sent)}`);
  console.log(`answers: ${JSON.stringify(report.answers)}`);
  console.log(`probes: ${report.probes} (every ${a['probe-every']} requests, HTTP and gRPC each); slowest answer ${report.slowestMs} ms (${report.slowest})`);
  console.log(`model failures on accepted input (Triton's 500/INTERNAL, not counted as bad): ${report.modelFailures.length}`);
  for (const b of report.modelFailures.slice(0, 5)) console.log(`  ${b.what}`);
  console.log(`${Object.values(report.sent).reduce((x, y) => x + y, 0)} requests in ${report.seconds} s: ${report.bad.length} bad answers`);
  for (const b of report.bad.slice(0, 50)) console.log(`  ${b.what}: ${b.problem}`);
  process.exitCode = report.bad.length > 0 ? 1 : 0;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await main();
