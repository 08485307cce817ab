/**
 * Triton's generate extension (`POST .../generate` and `.../generate_stream`), written as
 * `(Request) => Promise<Response>` like the rest of the v2 protocol. A flat JSON object goes in: each
 * key naming a model input becomes that tensor (a value or a 1-D array, shaped from the model's
 * metadata the way Triton does it), every other key, and the keys of `parameters`, become request
 * parameters. Each response comes out as one flat JSON object: `model_name`, `model_version`, `id`,
 * response parameters and one key per output (a scalar when it has one element).
 *
 * `generate` wants exactly one response; `generate_stream` sends each as a server-sent event
 * (`data: {...}\n\n`) as soon as the model sends it, which is what decoupled models are for. As in
 * Triton, the status code goes out with the first response, so an error after it arrives as a
 * `{"error": ...}` event under a 200, and errors found before inference are plain JSON errors. An answer
 * carries Triton's ORCA load report when the request asks for one (orca.ts).
 */

import { isCompletionOnly } from '../backend.js';
import { TsiError, asTsiError, invalidArg } from '../errors.js';
import { errorResponse, isObj } from './http-common.js';
import { configTypeToDatatype } from '../config/pipeline.js';
import type { InferenceServer } from '../server.js';
import { fromJsonValues, toJsonValues } from '../tensor.js';
import { parseJson, stringifyJson } from './json-exact.js';
import { putEntry, type InferInput, type InferRequest, type InferResponse, type Parameters, type ParamValue } from '../types.js';
import { SSE_HEADERS, SseStream, cancelOn } from './sse.js';
import { readWebBody } from './http-body.js';
import { traceContextOf, type TraceManager } from '../trace.js';
import { LOAD_METRICS, LOAD_METRICS_FORMAT, loadMetricsHeader } from './orca.js';

const JSON_HEADERS = { 'Content-Type': 'application/json' };

const errorJson = (err: unknown) => JSON.stringify({ error: asTsiError(err).message });

/** Builds the InferRequest a generate body describes; errors are INVALID_ARG with Triton's texts. */
export function generateRequest(server: InferenceServer, model: string, version: string | undefined, body: unknown): InferRequest {
  const mv = server.model(model, version);
  if (!isObj(body)) throw invalidArg('the generate request body must be a JSON object');
  const batching = (mv.config.max_batch_size ?? 0) > 0;
  const meta = new Map((mv.config.input ?? []).map((i) => [i.name!, i]));
  const inputs: InferInput[] = [];
  const parameters: Parameters = {};
  let id: string | undefined;
  const take = (key: string, value: unknown, within?: string) => {
    const cfg = meta.get(key);
    if (!cfg) {
      // As in Triton, `id` names the request (its responses carry it back) unless the model has such an input.
      if (key === 'id' && typeof value === 'string') id = value;
      else if (typeof value === 'string' || typeof value === 'boolean' || typeof value === 'number' || typeof value === 'bigint') putEntry<ParamValue>(parameters, key, value);
      else throw invalidArg(`${within ? `Converting keyword: '${within}': ` : ''}parameter '${key}' has invalid type. The generate request takes a string, number or boolean.`);
      return;
    }
    const datatype = configTypeToDatatype(cfg.data_type!);
    // Triton's JSON reader texts, which its clients look for; other types keep tsi's element-by-element text.
    const elements = Array.isArray(value) ? value : [value];
    if (datatype === 'BYTES' && !elements.every((e) => typeof e === 'string')) throw invalidArg(`unable to parse input '${key}': attempt to access JSON non-string as string`);
    if (datatype === 'BOOL' && !elements.every((e) => typeof e === 'boolean')) throw invalidArg(`unable to parse input '${key}': attempt to access JSON non-boolean as boolean`);
    const shape = fitShape(batching ? [-1, ...(cfg.dims ?? [])] : [...(cfg.dims ?? [])], Array.isArray(value) ? value.length : 1, key);
    inputs.push({ name: key, datatype, shape, data: fromJsonValues(datatype, value, `input '${key}'`) });
  };
  for (const [key, value] of Object.entries(body)) {
    if (key !== 'parameters') take(key, value);
    else {
      if (meta.has(key)) throw invalidArg(`Keyword '${key}' for nested schema also given as input tensor name`);
      if (!isObj(value)) throw invalidArg(`Expected JSON object for keyword: '${key}'`);
      for (const [k, v] of Object.entries(value)) take(k, v, key);
    }
  }
  return { model_name: model, model_version: version, ...(id !== undefined ? { id } : {}), inputs, parameters };
}

/**
 * The first top-level key of a JSON object's text that repeats an earlier one: JSON.parse keeps the
 * last silently, and a client's duplicated input must be refused, not half-dropped.
 */
export function firstRepeatedKey(text: string): string | undefined {
  const seen = new Set<string>();
  let depth = 0;
  let expectKey = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      let j = i + 1;
      for (;;) {
        j = text.indexOf('"', j);
        if (j < 0) return undefined;
        let k = j - 1;
        while (text.charCodeAt(k) === 0x5c) k--;
        if ((j - 1 - k) % 2 === 0) break;
        j++;
      }
      if (depth === 1 && expectKey) {
        const key = JSON.parse(text.slice(i, j + 1)) as string;
        if (seen.has(key)) return key;
        seen.add(key);
        expectKey = false;
      }
      i = j;
    } else if (c === 0x7b || c === 0x5b) {
      depth++;
      if (depth === 1) expectKey = c === 0x7b;
    } else if (c === 0x7d || c === 0x5d) depth--;
    else if (c === 0x2c && depth === 1) expectKey = true;
  }
  return undefined;
}

/**
 * Triton's shape filling for generate inputs: fixed dims divide the element count from the innermost
 * out, the innermost variable dim takes what remains, other variable dims are 1.
 */
function fitShape(dims: number[], count: number, name: string): number[] {
  const shape = [...dims];
  let left = count;
  const fail = () => invalidArg(`The schema can not convert input '${name}' to tensor with proper shape`);
  for (let i = shape.length - 1; i >= 0; i--) {
    if (shape[i] === -1) continue;
    if (shape[i] === 0 || left % shape[i]! !== 0) throw fail();
    left /= shape[i]!;
  }
  for (let i = shape.length - 1; i >= 0; i--) {
    if (shape[i] !== -1) continue;
    shape[i] = left;
    left = 1;
  }
  if (left !== 1) throw fail();
  return shape;
}

/** One response as the flat generate JSON object (keys sorted, as Triton's std::map orders them). */
export function generateResponseJson(r: InferResponse): Record<string, unknown> {
  const out: Record<string, unknown> = { model_name: r.model_name, model_version: r.model_version };
  if (r.id) out.id = r.id;
  for (const [k, v] of Object.entries(r.parameters ?? {})) out[k] = v;
  for (const t of r.outputs) {
    const values = toJsonValues(t.datatype, t.data);
    out[t.name] = values.length === 1 ? values[0] : values;
  }
  return Object.fromEntries(Object.entries(out).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

/** Keys that JavaScript objects put first, in numeric order, whatever the insertion order. */
const INDEX_KEY = /^(?:0|[1-9]\d*)$/;

/**
 * JSON.stringify(generateResponseJson(r)) written directly (it runs once per streamed token): the
 * same keys, order and values, without building and re-sorting objects.
 */
function generateResponseText(r: InferResponse): string {
  const fields = new Map<string, unknown>([['model_name', r.model_name], ['model_version', r.model_version]]);
  if (r.id) fields.set('id', r.id);
  for (const [k, v] of Object.entries(r.parameters ?? {})) fields.set(k, v);
  for (const t of r.outputs) {
    const values = toJsonValues(t.datatype, t.data);
    fields.set(t.name, values.length === 1 ? values[0] : values);
  }
  const keys = [...fields.keys()];
  if (keys.some((k) => INDEX_KEY.test(k))) return stringifyJson(generateResponseJson(r));
  let text = '';
  for (const k of keys.sort()) {
    // JSON.stringify leaves out what it cannot write (undefined), key and all.
    const v = stringifyJson(fields.get(k));
    if (v !== undefined) text += `${text ? ',' : '{'}${JSON.stringify(k)}:${v}`;
  }
  return text ? `${text}}` : '{}';
}

/** Renders one response (or error) as JSON text, turning an encoding failure into an error object. */
function render(r: InferResponse | TsiError): { text: string; ok: boolean } {
  if (r instanceof TsiError) return { text: errorJson(r), ok: false };
  try {
    return { text: generateResponseText(r), ok: true };
  } catch (err) {
    return { text: errorJson(err), ok: false };
  }
}

/**
 * A stream's event text from a template while its responses keep one shape (no parameters, one output
 * of one element: an LLM's tokens): the keys around the value are written once, each token writes its
 * value. Any other response is rendered whole, by render().
 */
function eventWriter(): (r: InferResponse | TsiError) => { text: string; ok: boolean } {
  let key: { name: string; version: string; id: string | undefined; output: string } | undefined;
  let head = '';
  let tail = '';
  return (r) => {
    if (r instanceof TsiError || r.outputs.length !== 1 || (r.parameters && Object.keys(r.parameters).length > 0)) return render(r);
    const t = r.outputs[0]!;
    if (key?.name !== r.model_name || key.version !== r.model_version || key.id !== (r.id || undefined) || key.output !== t.name) {
      key = undefined;
      const fields: [string, unknown][] = [['model_name', r.model_name], ['model_version', r.model_version], [t.name, undefined]];
      if (r.id) fields.push(['id', r.id]);
      if (fields.some(([k]) => INDEX_KEY.test(k)) || new Set(fields.map(([k]) => k)).size !== fields.length) return render(r);
      fields.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
      const at = fields.findIndex(([k]) => k === t.name);
      const part = (f: [string, unknown][]) => f.map(([k, v]) => `${JSON.stringify(k)}:${stringifyJson(v)}`).join(',');
      if (fields.some(([k, v]) => k !== t.name && stringifyJson(v) === undefined)) return render(r);
      head = `{${part(fields.slice(0, at))}${at > 0 ? ',' : ''}${JSON.stringify(t.name)}:`;
      tail = `${at < fields.length - 1 ? ',' : ''}${part(fields.slice(at + 1))}}`;
      key = { name: r.model_name, version: r.model_version, id: r.id || undefined, output: t.name };
    }
    try {
      const values = toJsonValues(t.datatype, t.data);
      const v = values.length === 1 ? stringifyJson(values[0]) : undefined;
      if (v !== undefined) return { text: head + v + tail, ok: true };
    } catch {
      // render() says what failed.
    }
    return render(r);
  };
}

async function readRequest(server: InferenceServer, req: Request, model: string, version: string | undefined, maxInput: number): Promise<InferRequest> {
  server.model(model, version); // unknown model or version: its own status, before reading the body
  const raw = await readWebBody(req, maxInput, { identityOnly: `Unsupported content-encoding, only 'identity' is supported.`, jsonOnly: true });
  let body: unknown;
  const text = new TextDecoder().decode(raw);
  try {
    // A value past 2^53 (a 64-bit input, a parameter) is read exactly.
    body = parseJson(text);
  } catch (err) {
    throw invalidArg(`failed to parse the request JSON buffer: ${(err as Error).message}`);
  }
  const repeated = firstRepeatedKey(text);
  if (repeated !== undefined) {
    const isInput = (server.model(model, version).config.input ?? []).some((i) => i.name === repeated);
    throw invalidArg(`${isInput ? 'input' : 'parameter'} '${repeated}' already exists in request`);
  }
  return generateRequest(server, model, version, body);
}

/** `POST /v2/models/{m}[/versions/{v}]/generate` and `/generate_stream`. */
export async function generate(
  server: InferenceServer, req: Request, model: string, version: string | undefined, streaming: boolean, maxInput: number,
  traces?: TraceManager,
): Promise<Response> {
  // Sampled like infer (or continued from the client's traceparent); the body is read first, as there.
  const trace = traces?.sample(model, { name: 'HTTP_RECV_START', ns: server.clock.nowNs() }, traceContextOf((h) => req.headers.get(h) ?? undefined));
  let request: InferRequest;
  try {
    request = await readRequest(server, req, model, version, maxInput);
  } catch (err) {
    const e = asTsiError(err);
    if (trace) {
      trace.error = e.message;
      trace.finish();
    }
    return errorResponse(e, e.code === 'INVALID_ARG' ? 400 : undefined);
  }
  let done: Done = () => {};
  if (trace) {
    trace.mark('HTTP_RECV_END');
    request.trace = trace;
    done = (error) => {
      done = () => {};
      if (error !== undefined) trace.error ??= error;
      trace.mark('HTTP_SEND_END');
      trace.finish();
    };
  }
  const res = await (streaming ? stream(server, request, req.signal, (e) => done(e)) : single(server, request, req.signal, (e) => done(e)));
  // As Triton: read when the answer starts, on the answers of requests that ran (not on refusals before).
  const load = loadMetricsHeader(server, req.headers.get(LOAD_METRICS_FORMAT));
  if (load !== undefined) res.headers.set(LOAD_METRICS, load);
  return res;
}

/** The answer is complete (or failed): a traced request's trace ends, once. */
type Done = (error?: string) => void;

async function single(server: InferenceServer, request: InferRequest, signal: AbortSignal, done: Done): Promise<Response> {
  const rendered: { text: string; ok: boolean }[] = [];
  try {
    await server.inferStream(request, (r, final) => {
      if (final && !(r instanceof TsiError) && isCompletionOnly(r)) return;
      rendered.push(render(r));
    }, cancelOn(signal));
  } catch (err) {
    done(asTsiError(err).message);
    return errorResponse(err, 400);
  }
  done(rendered.find((r) => !r.ok)?.text);
  // The status follows the first response (none: a bare completion flag, which Triton answers as 200).
  const status = rendered.length === 0 || rendered[0]!.ok ? 200 : 400;
  if (rendered.length !== 1) {
    const e = new TsiError('INTERNAL', 'generate expects model to produce exactly 1 response, use generate stream for model that generates various number of responses');
    return new Response(errorJson(e), { status, headers: JSON_HEADERS });
  }
  return new Response(rendered[0]!.text, { status, headers: JSON_HEADERS });
}

function stream(server: InferenceServer, request: InferRequest, signal: AbortSignal, done: Done): Promise<Response> {
  const sse = new SseStream('generate_stream');
  const event = eventWriter();
  return new Promise<Response>((resolve) => {
    let started = false;
    const begin = (ok: boolean) => {
      if (started) return;
      started = true;
      resolve(new Response(sse.body, { status: ok ? 200 : 400, headers: SSE_HEADERS }));
    };
    server.inferStream(request, (r, final) => {
      const flagOnly = final && !(r instanceof TsiError) && isCompletionOnly(r);
      if (!flagOnly) {
        const { text, ok } = event(r);
        begin(ok);
        sse.send(`data: ${text}\n\n`);
      }
      if (final) {
        begin(true);
        sse.close();
        done(r instanceof TsiError ? r.message : undefined);
      }
    }, sse.inferOptions(signal)).catch((err) => {
      done(asTsiError(err).message);
      // Refused before anything ran (validation, unknown model): a plain JSON error.
      if (!started) {
        started = true;
        resolve(errorResponse(err, 400));
      }
    });
  });
}
