/**
 * The JavaScript model API (`backend: "javascript"`), platform-neutral so that one `model.js` runs in
 * Node's worker threads today and in the browser runtime later. A model file exports a class shaped
 * like Triton's Python backend: `initialize(args)`, `execute(requests)`, `finalize()`. Tensors reach
 * the model as typed arrays (BYTES as strings, with the raw bytes beside them) and leave it as typed
 * arrays, plain arrays or strings; shapes and datatypes default from the model config.
 *
 * `JsModelHost` is the runtime-independent half of an instance: it loads the class from a module
 * namespace, builds the request objects, runs `execute`, turns what the model returns or sends into
 * core responses, and gives the model BLS (`args.server.infer` / `inferStream`) through a `JsHost`
 * the runtime implements (Node: messages to the main thread's InferenceServer).
 */

// Imports stay minimal (no config pipeline, no HTTP): this module is what a model worker loads.
import { isCompletionOnly, type ModelLoadContext } from './backend.js';
import { TsiError, type ErrorCode } from './errors.js';
import type { ConfigDataType, ModelConfig, ModelOutput } from './config/model-config.js';
import { allocate, decodeString, elementCount, encodeString } from './tensor.js';
import type { DataType, InferRequest, InferResponse, NumericArray, Parameters, Tensor, TensorData } from './types.js';

/** What a tensor may be given as: typed array, plain array, strings (BYTES) or raw byte strings. */
export type TensorValue = NumericArray | number[] | bigint[] | boolean[] | string[] | Uint8Array[];
export interface TensorInit { name?: string; datatype?: DataType; shape?: number[]; data: TensorValue }
export type TensorsInit = Record<string, TensorInit | TensorValue> | (TensorInit & { name: string })[];

export interface ModelResponse {
  outputs?: TensorsInit;
  parameters?: Parameters;
  /** Fails this request with the message (Python's `InferenceResponse(error=...)`). */
  error?: string | Error;
}

/** A tensor as a model sees it. BYTES: `data` is UTF-8 strings, `bytes` the raw elements. */
export class ModelTensor {
  private strings?: string[];
  constructor(readonly name: string, readonly datatype: DataType, readonly shape: number[], private readonly raw: TensorData) {}
  get data(): NumericArray | string[] {
    if (!Array.isArray(this.raw)) return this.raw as NumericArray;
    return (this.strings ??= (this.raw as Uint8Array[]).map(decodeString));
  }
  get bytes(): Uint8Array[] | undefined {
    return Array.isArray(this.raw) ? (this.raw as Uint8Array[]) : undefined;
  }
  /** The core tensor (for passing on to another model unchanged). */
  toTensor(): Tensor {
    return { name: this.name, datatype: this.datatype, shape: this.shape, data: this.raw };
  }
}

export interface ResponseSender {
  /** Sends one response (or an error); `final` closes the request. `send(null, true)` only closes. */
  send(response?: ModelResponse | Error | null, final?: boolean): void;
}

/**
 * A request's trace as a model sees it (Python's `request.trace()`): passed as a BLS request's
 * `trace`, it makes the call traced as that request's child. Opaque; empty when not traced.
 */
export interface ModelTrace {
  readonly slot?: TraceSlot;
}

/** Which request of which execution a trace belongs to, as the runtime numbered them. */
export type TraceSlot = readonly [execution: number, index: number];

/** One request as `execute` receives it. */
export class ModelRequest {
  readonly inputs: Record<string, ModelTensor> = {};
  sender?: ResponseSender;
  /** Set by the host for a traced request. */
  traceSlot?: TraceSlot;
  constructor(
    readonly id: string, inputs: readonly Tensor[], readonly requestedOutputs: string[], readonly parameters: Parameters,
    readonly batchSize: number, readonly sequence: WireRequest['sequence'], private readonly makeSender: () => ResponseSender,
  ) {
    for (const t of inputs) this.inputs[t.name] = new ModelTensor(t.name, t.datatype, t.shape, t.data);
  }
  input(name: string): ModelTensor | undefined {
    return this.inputs[name];
  }
  /** This request's trace, to pass as a BLS request's `trace` (Python's `request.trace()`). */
  trace(): ModelTrace {
    return this.traceSlot ? { slot: this.traceSlot } : {};
  }
  /** For decoupled models (any number of responses); Python's `get_response_sender()`. */
  responseSender(): ResponseSender {
    return (this.sender ??= this.makeSender());
  }
}

/** A BLS response: outputs by name. */
export interface BlsResponse {
  model_name: string;
  model_version: string;
  id?: string;
  parameters?: Parameters;
  outputs: Record<string, ModelTensor>;
}

export interface BlsRequest {
  model_name: string;
  model_version?: string;
  id?: string;
  inputs: TensorsInit;
  /** Output names; absent: all. */
  outputs?: string[];
  parameters?: Parameters;
  /** `request.trace()` of the request this call serves: the call is traced as its child. */
  trace?: ModelTrace;
}

/** What `initialize(args)` gets; Python's args plus the BLS and file access a JS model needs. */
export interface InitializeArgs {
  model_name: string;
  model_version: string;
  model_instance_name: string;
  model_instance_kind: string;
  model_instance_device_id: number;
  model_config: ModelConfig;
  decoupled: boolean;
  server: {
    infer(request: BlsRequest): Promise<BlsResponse>;
    /**
     * Every response of a (decoupled) model, in order; resolves after the last one. A bare end-of-stream
     * flag is not passed on: the promise resolving is the end.
     */
    inferStream(request: BlsRequest, onResponse: (r: BlsResponse, final: boolean) => void): Promise<void>;
  };
  /** A file of the model's folder, e.g. `labels.txt` or `1/vocab.json`. */
  readFile(path: string): Promise<Uint8Array>;
  readText(path: string): Promise<string>;
  log: { info(msg: string): void; warn(msg: string): void; error(msg: string): void };
}

/** What the runtime provides the host: BLS into the server, the model's files, logging. */
export interface JsHost {
  /** `parent`: the traced request the call serves, when the model passed its trace. */
  infer(request: InferRequest, parent?: TraceSlot): Promise<InferResponse>;
  inferStream(request: InferRequest, onResponse: (r: InferResponse | TsiError, final: boolean) => void, parent?: TraceSlot): Promise<void>;
  readFile(path: string): Promise<Uint8Array>;
  log(level: 'info' | 'warn' | 'error', msg: string): void;
}

/** A request as it travels to wherever the model runs (structured-clone safe). */
export interface WireRequest {
  id: string;
  inputs: Tensor[];
  requestedOutputs: string[];
  parameters: Parameters;
  batchSize: number;
  sequence?: { id: bigint | string; start: boolean; end: boolean };
  /** Set when the request is traced: its BLS calls can name it as their parent. */
  trace?: TraceSlot;
}

export type WireResponse = { outputs: Tensor[]; parameters?: Parameters } | { error: { code: ErrorCode; message: string } };

/** Thrown to a model when a BLS call fails; `code` is the server's error code. */
export class InferError extends Error {
  constructor(readonly code: ErrorCode, message: string) {
    super(message);
    this.name = 'InferError';
  }
}

const CODES = new Set<string>(['UNKNOWN', 'INTERNAL', 'NOT_FOUND', 'INVALID_ARG', 'UNAVAILABLE', 'UNSUPPORTED', 'ALREADY_EXISTS', 'CANCELLED']);

/** A model's error as a wire error: its own `code` when it set a valid one on purpose, else INTERNAL. */
export function errorOf(err: unknown): { code: ErrorCode; message: string } {
  if (err instanceof TsiError) return { code: err.code, message: err.message };
  const e = err as { code?: unknown; message?: unknown } | undefined;
  const message = typeof e?.message === 'string' ? e.message : String(err);
  const code = !(err instanceof InferError) && typeof e?.code === 'string' && CODES.has(e.code) ? (e.code as ErrorCode) : 'INTERNAL';
  return { code, message };
}

const configDatatype = (t: ConfigDataType): DataType => (t === 'TYPE_STRING' ? 'BYTES' : (t.slice(5) as DataType));

const DATATYPE_OF: [new (...a: never[]) => unknown, DataType][] = [
  [Float32Array, 'FP32'], [Float64Array, 'FP64'], [Int32Array, 'INT32'], [BigInt64Array, 'INT64'], [Int8Array, 'INT8'],
  [Int16Array, 'INT16'], [Uint8Array, 'UINT8'], [Uint16Array, 'UINT16'], [Uint32Array, 'UINT32'], [BigUint64Array, 'UINT64'],
];

function inferDatatype(v: TensorValue): DataType | undefined {
  for (const [ctor, dt] of DATATYPE_OF) if (v instanceof ctor) return dt;
  if (Array.isArray(v) && v.length > 0) {
    const x = v[0];
    if (typeof x === 'string' || x instanceof Uint8Array) return 'BYTES';
    if (typeof x === 'boolean') return 'BOOL';
    if (typeof x === 'bigint') return 'INT64';
  }
  return undefined;
}

/** Converts values to the typed array (or byte strings) of `dt`, reusing `v` when it already is one. */
function toData(v: TensorValue, dt: DataType, what: string): TensorData {
  if (dt === 'BYTES') {
    if (!Array.isArray(v)) throw new TsiError('INVALID_ARG', `${what}: BYTES data must be an array of strings or Uint8Arrays`);
    return (v as unknown[]).map((x) => (typeof x === 'string' ? encodeString(x) : x instanceof Uint8Array ? x : encodeString(String(x))));
  }
  const sample = allocate(dt, 0);
  if (!Array.isArray(v) && v.constructor === sample.constructor) return v;
  const src = v as ArrayLike<number | bigint | boolean>;
  const out = allocate(dt, src.length) as NumericArray;
  const big = dt === 'INT64' || dt === 'UINT64';
  for (let i = 0; i < src.length; i++) {
    const x = src[i]!;
    if (typeof x === 'string') throw new TsiError('INVALID_ARG', `${what}: element ${i} is a string, expected a number for ${dt}`);
    (out as unknown as (number | bigint)[])[i] = big ? BigInt(typeof x === 'boolean' ? Number(x) : Math.trunc(Number(x))) : Number(x);
  }
  return out;
}

/**
 * A core tensor from what a model gave. `cfg` (the config output) supplies the datatype and dims when
 * they are not given; with batching the batch dimension is `batchSize`; one -1 is solved from the
 * element count.
 */
export function toTensor(name: string, init: TensorInit | TensorValue, cfg?: ModelOutput, batchSize?: number): Tensor {
  const t: TensorInit = isInit(init) ? init : { data: init };
  const what = `output '${name}'`;
  const dt = t.datatype ?? (cfg?.data_type ? configDatatype(cfg.data_type) : inferDatatype(t.data));
  if (!dt) throw new TsiError('INVALID_ARG', `${what}: cannot tell its datatype; give 'datatype' or a typed array`);
  const data = toData(t.data, dt, what);
  const count = (data as { length: number }).length;
  let shape = t.shape;
  if (!shape) {
    const dims = cfg?.dims ? [...(batchSize !== undefined ? [batchSize] : []), ...cfg.dims] : [-1];
    const free = dims.filter((d) => d < 0).length;
    const fixed = elementCount(dims.filter((d) => d >= 0));
    if (free > 1 || (free === 1 && (fixed === 0 || count % fixed !== 0))) {
      throw new TsiError('INVALID_ARG', `${what}: give 'shape' (${count} elements do not fit config dims [${dims.join(',')}])`);
    }
    shape = dims.map((d) => (d < 0 ? count / Math.max(1, fixed) : d));
  }
  if (elementCount(shape) !== count) {
    throw new TsiError('INVALID_ARG', `${what}: shape [${shape.join(',')}] needs ${elementCount(shape)} elements, got ${count}`);
  }
  return { name, datatype: dt, shape: [...shape], data };
}

function isInit(v: TensorInit | TensorValue): v is TensorInit {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && !ArrayBuffer.isView(v) && 'data' in v;
}

/** All tensors of a TensorsInit (object keyed by name, or a list of named tensors). */
export function toTensors(init: TensorsInit | undefined, cfgOf: (name: string) => ModelOutput | undefined, batchSize?: number): Tensor[] {
  if (!init) return [];
  if (Array.isArray(init)) return init.map((t) => toTensor(t.name, t, cfgOf(t.name), batchSize));
  return Object.entries(init).map(([n, v]) => toTensor(n, v instanceof ModelTensor ? v.toTensor() as TensorInit : v, cfgOf(n), batchSize));
}

function blsResponse(r: InferResponse): BlsResponse {
  const outputs: Record<string, ModelTensor> = {};
  for (const t of r.outputs) outputs[t.name] = new ModelTensor(t.name, t.datatype, t.shape, t.data);
  const out: BlsResponse = { model_name: r.model_name, model_version: r.model_version, outputs };
  if (r.id) out.id = r.id;
  if (r.parameters) out.parameters = r.parameters;
  return out;
}

function blsRequest(r: BlsRequest): InferRequest {
  if (!r || typeof r.model_name !== 'string') throw new TsiError('INVALID_ARG', `a BLS request needs a 'model_name'`);
  const inputs = toTensors(r.inputs, () => undefined);
  return {
    model_name: r.model_name, model_version: r.model_version, id: r.id, inputs, parameters: r.parameters ?? {},
    outputs: r.outputs?.map((name) => ({ name })),
  };
}

interface ModelInstance {
  initialize?(args: InitializeArgs): unknown;
  execute(requests: ModelRequest[]): unknown;
  finalize?(): unknown;
}

/** The model object a module exports: a default-exported class (or object), or a named `TritonPythonModel`/`Model`. */
export function instantiateModel(ns: Record<string, unknown>, file: string): ModelInstance {
  const cand = ns.default ?? ns.TritonPythonModel ?? ns.TritonModel ?? ns.Model;
  const inner = (cand as { default?: unknown } | undefined)?.default;
  const c = typeof cand === 'object' && cand !== null && typeof inner === 'function' ? inner : cand;
  const obj = typeof c === 'function' ? new (c as new () => unknown)() : c;
  if (!obj || typeof (obj as ModelInstance).execute !== 'function') {
    throw new TsiError('INVALID_ARG', `${file} must export a class with an execute(requests) method (as its default export, or named TritonPythonModel or Model)`);
  }
  return obj as ModelInstance;
}

/** Sends core responses of one execution back to wherever the requests live. */
export type ResponseSink = (index: number, response: WireResponse, final: boolean) => void;

export interface InitInfo {
  name: string;
  version: number;
  instanceName: string;
  instanceKind: string;
  deviceId: number;
  config: ModelConfig;
}

/** One model instance's lifecycle around a loaded module, independent of the thread it runs on. */
export class JsModelHost {
  private model!: ModelInstance;
  private readonly outputs: Map<string, ModelOutput>;
  readonly decoupled: boolean;
  private readonly batching: boolean;

  constructor(private readonly info: InitInfo, private readonly host: JsHost) {
    this.outputs = new Map((info.config.output ?? []).map((o) => [o.name!, o]));
    this.decoupled = info.config.model_transaction_policy?.decoupled === true;
    this.batching = (info.config.max_batch_size ?? 0) > 0;
  }

  async initialize(ns: Record<string, unknown>, file: string): Promise<void> {
    this.model = instantiateModel(ns, file);
    const host = this.host;
    const args: InitializeArgs = {
      model_name: this.info.name, model_version: String(this.info.version), model_instance_name: this.info.instanceName,
      model_instance_kind: this.info.instanceKind, model_instance_device_id: this.info.deviceId,
      model_config: this.info.config, decoupled: this.decoupled,
      server: {
        infer: async (r) => blsResponse(await host.infer(blsRequest(r), r?.trace?.slot).catch(rethrow)),
        inferStream: async (r, on) => {
          let failure: TsiError | undefined;
          await host.inferStream(blsRequest(r), (resp, final) => {
            if (resp instanceof TsiError) failure ??= resp;
            else if (!(final && isCompletionOnly(resp))) on(blsResponse(resp), final);
          }, r?.trace?.slot).catch(rethrow);
          if (failure) rethrow(failure);
        },
      },
      readFile: (p) => host.readFile(p),
      readText: async (p) => decodeString(await host.readFile(p)),
      log: { info: (m) => host.log('info', m), warn: (m) => host.log('warn', m), error: (m) => host.log('error', m) },
    };
    await this.model.initialize?.(args);
  }

  /**
   * Runs `execute` over one batch. Responses go to `sink` (decoupled models: as they are sent, maybe
   * after this resolves). Resolves with the time spent in `execute`, in ns.
   */
  async execute(requests: readonly WireRequest[], sink: ResponseSink): Promise<number> {
    const finals = new Array<boolean>(requests.length).fill(false);
    const deliver = (i: number, r: ModelResponse | Error | null | undefined, final: boolean) => {
      if (finals[i]) return;
      if (final) finals[i] = true;
      sink(i, this.wire(r, requests[i]!), final);
    };
    const objs = requests.map((w, i) => new ModelRequest(
      w.id, w.inputs, w.requestedOutputs, w.parameters, w.batchSize, w.sequence,
      () => ({ send: (r, final = false) => deliver(i, r, final) }),
    ));
    for (let i = 0; i < requests.length; i++) if (requests[i]!.trace) objs[i]!.traceSlot = requests[i]!.trace;
    const t0 = performance.now();
    let result: unknown;
    try {
      result = await this.model.execute(objs);
    } catch (err) {
      for (let i = 0; i < requests.length; i++) deliver(i, err instanceof Error ? err : new Error(String(err)), true);
      return (performance.now() - t0) * 1e6;
    }
    const ns = (performance.now() - t0) * 1e6;
    if (this.decoupled) return ns;
    const list = Array.isArray(result) ? result : result !== undefined && requests.length === 1 ? [result] : [];
    if (list.length > 0 && list.length !== requests.length) {
      const e = new Error(`model '${this.info.name}' returned ${list.length} responses for ${requests.length} requests`);
      for (let i = 0; i < requests.length; i++) deliver(i, e, true);
      return ns;
    }
    for (let i = 0; i < requests.length; i++) {
      if (finals[i]) continue;
      const r = list[i] as ModelResponse | Error | undefined;
      deliver(i, r ?? new Error(`model '${this.info.name}' returned no response for request ${i} of the batch`), true);
    }
    return ns;
  }

  private wire(r: ModelResponse | Error | null | undefined, req: WireRequest): WireResponse {
    if (r === null || r === undefined) return { outputs: [] };
    if (r instanceof Error) return { error: errorOf(r) };
    if (r.error !== undefined) return { error: errorOf(typeof r.error === 'string' ? new Error(r.error) : r.error) };
    try {
      const outputs = toTensors(r.outputs, (n) => this.outputs.get(n), this.batching ? req.batchSize : undefined);
      return r.parameters ? { outputs, parameters: r.parameters } : { outputs };
    } catch (err) {
      return { error: errorOf(err) };
    }
  }

  async finalize(): Promise<void> {
    await this.model?.finalize?.();
  }
}

function rethrow(err: unknown): never {
  const e = err instanceof TsiError ? err : new TsiError('INTERNAL', String((err as Error)?.message ?? err));
  throw new InferError(e.code, e.message);
}

/** The version folder's model file: default_model_filename, else model.mjs or model.js. */
export async function findModelFile(ctx: ModelLoadContext): Promise<string> {
  const names = ctx.config.default_model_filename ? [ctx.config.default_model_filename] : ['model.mjs', 'model.js'];
  for (const n of names) if (await ctx.files.exists(`${ctx.version}/${n}`)) return `${ctx.version}/${n}`;
  throw new TsiError('INVALID_ARG', `unable to find '${ctx.version}/${names.join("' or '" + ctx.version + '/')}' for model '${ctx.config.name}'`);
}
