/**
 * The shared vocabulary of tsi: tensors, inference requests and responses, parameters, the clock and the
 * logger. Wire-shaped objects keep the KServe v2 spelling (`model_name`, `datatype`) so the HTTP JSON,
 * the gRPC messages and the in-process API map onto each other field for field.
 */

import type { GenerationRequest } from './llm/params.js';

export const DATATYPES = [
  'BOOL', 'UINT8', 'UINT16', 'UINT32', 'UINT64', 'INT8', 'INT16', 'INT32', 'INT64',
  'FP16', 'FP32', 'FP64', 'BYTES', 'BF16',
] as const;
export type DataType = (typeof DATATYPES)[number];

export type NumericArray =
  | Uint8Array | Int8Array | Uint16Array | Int16Array | Uint32Array | Int32Array
  | BigUint64Array | BigInt64Array | Float32Array | Float64Array;

/**
 * Tensor contents, row-major. BOOL is a Uint8Array of 0/1; FP16 and BF16 are Uint16Arrays of raw bits
 * (JavaScript has no half floats); BYTES is one Uint8Array per element, binary-safe.
 */
export type TensorData = NumericArray | Uint8Array[];

export interface Tensor {
  name: string;
  datatype: DataType;
  shape: number[];
  data: TensorData;
}

export type ParamValue = string | number | boolean | bigint;
export type Parameters = Record<string, ParamValue>;

/**
 * Stores an entry under a key a client or a config file chose. A plain `obj['__proto__'] = v` would
 * swap the object's prototype (or, for a scalar, do nothing) instead of keeping the entry.
 */
export function putEntry<T>(obj: Record<string, T>, key: string, value: T): void {
  if (key === '__proto__') Object.defineProperty(obj, key, { value, enumerable: true, writable: true, configurable: true });
  else obj[key] = value;
}

export interface InferInput extends Tensor {
  parameters?: Parameters;
}

export interface RequestedOutput {
  name: string;
  /** `classification: N` turns the output into top-N "value:index[:label]" strings. */
  parameters?: Parameters;
}

/** An inference request as a transport hands it to the server. */
export interface InferRequest {
  model_name: string;
  /** Empty or absent: the highest-numbered READY version. */
  model_version?: string;
  id?: string;
  /** Reserved keys: sequence_id, sequence_start, sequence_end, priority, timeout; the rest reach the backend. */
  parameters?: Parameters;
  inputs: InferInput[];
  /** Absent: every model output. */
  outputs?: RequestedOutput[];
  /** The request's trace when it is traced (the transport sets it with attachTrace); never on the wire. */
  trace?: TraceStamps;
  /**
   * An `llm` request's generation parameters, parsed by a front end that read them from its own
   * fields (the OpenAI API); the llm scheduler then reads these instead of `parameters`. Never on the wire.
   */
  generation?: GenerationRequest;
  /**
   * An ensemble step's request: its response may leave out requested outputs, which the ensemble
   * passes on as absent tensors (an optional input downstream, or an ensemble output left out), as
   * Triton's ensemble scheduler does. Never on the wire: a client's request must get every output.
   */
  partialOutputs?: boolean;
  /**
   * Set by a gRPC stream: when a model that is not decoupled answers more than once, its first answer
   * goes out and the others are dropped, as Triton's stream writes only the first (HTTP and unary
   * gRPC fail the request with "expected a single response, got N"). Never on the wire.
   */
  firstAnswerOnly?: boolean;
}

/**
 * What core stamps on a traced request as it passes (trace.ts's Trace implements it): a contract of
 * its own here, so requests carry their trace as a typed field without importing the tracer.
 */
export interface TraceStamps {
  /** The version that served the request (-1 until known) and the request's id, for the trace's head. */
  version: number;
  requestId: string;
  mark(name: string, ns?: number): void;
  /** A backend's own activity (Triton's custom activities: NAME_START/NAME_END pairs, or one NAME). */
  activity(name: string, ns?: number): void;
  /** An execution of the request began; the trace is not written while one runs. */
  computeStart(): void;
  computeEnd(): void;
  /** "opentelemetry" mode: the model span's W3C context as JSON (Python's `request.trace().get_context()`). */
  readonly spanContext?: string;
  /** The trace of a request made on this one's behalf (an ensemble step, a BLS call) to `model`. */
  spawn(model: string): TraceStamps;
  /** The request's final response left its model (stamps REQUEST_END; `error` when it failed). */
  requestEnd(error?: string): void;
  /** Level TENSORS: whether tensor activities are recorded, and the recording (Triton's trace file). */
  readonly withTensors?: boolean;
  tensor?(activity: 'TENSOR_QUEUE_INPUT' | 'TENSOR_BACKEND_OUTPUT', t: Tensor): void;
}

export interface OutputTensor extends Tensor {
  parameters?: Parameters;
}

export interface InferResponse {
  model_name: string;
  model_version: string;
  id?: string;
  parameters?: Parameters;
  outputs: OutputTensor[];
}

/**
 * Time source for schedulers and statistics, injected so that tests drive time by hand. `nowNs` is a
 * monotonic nanosecond count (a float64 holds 104 days of nanoseconds exactly enough for scheduling).
 */
export interface Clock {
  nowNs(): number;
  /** Milliseconds since the Unix epoch, for `last_inference`. */
  epochMs(): number;
  /** Calls fn after delayMs; returns a cancel function. */
  setTimer(fn: () => void, delayMs: number): () => void;
}

export const systemClock: Clock = {
  nowNs: () => performance.now() * 1e6,
  epochMs: () => Date.now(),
  setTimer(fn, delayMs) {
    const t = setTimeout(fn, Math.max(0, delayMs));
    return () => clearTimeout(t);
  },
};

export interface Logger {
  error(msg: string): void;
  warn(msg: string): void;
  info(msg: string): void;
  /** Printed only when the verbose level is at least `level` (tritonserver's --log-verbose). */
  verbose(level: number, msg: string): void;
}

export const silentLogger: Logger = { error() {}, warn() {}, info() {}, verbose() {} };
