/**
 * What every encoder backend of this room shares: reading a Hugging Face folder (the tokenizer, the
 * ONNX encoder that model-folder.ts picks, config.json), loading that encoder on the runtime's
 * `onnxruntime` backend under a config of its own, and running one gathered batch of token rows as a
 * single padded `[rows, longest]` ONNX request, so the dynamic batcher's batches become one run.
 * embedding.ts pools the encoder's `last_hidden_state`; classifier.ts reads a head's `logits`.
 *
 * The encoder's inputs are Optimum's: `input_ids`, `attention_mask` and, where the export has it,
 * `token_type_ids` (BERT has it; XLM-R and most RoBERTa exports do not). Padding is on the right with
 * mask 0, which an encoder's attention ignores, so a padded row scores as it would alone.
 */

import type { Backend, BackendInstance, BackendModel, InstanceSpec, ModelLoadContext } from '../backend.js';
import type { BackendRequest, ExecutionTimes, ModelIoInfo, ResponsePayload } from '../execution.js';
import type { ModelConfig, ModelInput, ModelOutput } from '../config/model-config.js';
import { TsiError } from '../errors.js';
import { modelFile } from '../llm/model-folder.js';
import { Tokenizer } from '../llm/tokenizer.js';
import { decodeString } from '../tensor.js';
import type { Tensor } from '../types.js';

type Json = Record<string, any>;

export async function readJson(ctx: ModelLoadContext, path: string): Promise<Json | undefined> {
  if (!(await ctx.files.exists(path))) return undefined;
  try {
    return JSON.parse(decodeString(await ctx.files.read(path))) as Json;
  } catch (err) {
    throw new TsiError('INVALID_ARG', `model '${ctx.config.name}': '${path}' is not valid JSON: ${(err as Error).message}`);
  }
}

export function param(config: ModelConfig, key: string): string | undefined {
  return config.parameters?.[key]?.string_value?.trim();
}

export function boolParam(config: ModelConfig, key: string): boolean | undefined {
  const v = param(config, key);
  if (v === undefined) return undefined;
  if (v === 'true' || v === '1') return true;
  if (v === 'false' || v === '0') return false;
  throw new TsiError('INVALID_ARG', `model '${config.name}': config parameter '${key}' must be true or false, got '${v}'`);
}

/** The model's length limit: the `max_seq_length` parameter, else the files' (sentence-transformers', config.json's), else 512. */
export function maxLengthOf(config: ModelConfig, hf: Json, st: Json = {}): number {
  const raw = param(config, 'max_seq_length');
  const n = raw !== undefined ? Number(raw) : Number(st.max_seq_length ?? hf.max_position_embeddings ?? 512);
  if (!Number.isInteger(n) || n <= 0) throw new TsiError('INVALID_ARG', `model '${config.name}': max_seq_length must be a positive integer, got '${raw ?? n}'`);
  return n;
}

/** What an encoder backend's load makes: the inner model, and how an instance of it becomes this backend's. */
export interface LoadedEncoder {
  inner: BackendModel;
  instance(inner: BackendInstance): BackendInstance;
}

/**
 * A backend of this room: `name` in config.pbtxt, its inputs and outputs auto-completed when the
 * config leaves them out, `load` reading the folder over `innerBackend` (the runtime's onnxruntime
 * backend, which runs the encoder).
 */
export function encoderBackend(
  name: string, inputs: ModelInput[], outputs: ModelOutput[], innerBackend: () => Promise<Backend>,
  load: (ctx: ModelLoadContext, onnx: Backend) => Promise<LoadedEncoder>,
): Backend {
  return {
    name,
    async autoCompleteConfig(config: ModelConfig): Promise<ModelConfig> {
      return {
        ...config,
        input: config.input && config.input.length > 0 ? config.input : inputs,
        output: config.output && config.output.length > 0 ? config.output : outputs,
      };
    },
    async loadModel(ctx: ModelLoadContext): Promise<BackendModel> {
      const { inner, instance } = await load(ctx, await innerBackend());
      return {
        createInstance: async (spec: InstanceSpec) => instance(await inner.createInstance(spec)),
        unload: () => inner.unload(),
      };
    },
  };
}

/** A loaded encoder: its tokenizer, config.json, and the inner onnxruntime model with the feeds and the output read. */
export interface Encoder {
  tokenizer: Tokenizer;
  hf: Json;
  file: string;
  inner: BackendModel;
  feeds: string[];
  output: string;
  io?: ModelIoInfo;
}

/**
 * Loads the version folder's tokenizer and encoder. `pickOutput` names the output this backend reads
 * from the export's outputs (undefined: the file does not fit, and `expected` says what was wanted).
 */
export async function loadEncoder(
  ctx: ModelLoadContext, onnx: Backend, pickOutput: (io?: ModelIoInfo) => string | undefined, expected: string, outputDims: number[],
): Promise<Encoder> {
  const { config, files, version } = ctx;
  const name = config.name ?? '';
  const dir = String(version);
  const file = await modelFile(files, dir, config);
  const tokJson = await readJson(ctx, `${dir}/tokenizer.json`);
  if (!tokJson) throw new TsiError('INVALID_ARG', `unable to find '${dir}/tokenizer.json' for model '${name}'`);
  const tokenizer = new Tokenizer(tokJson, (await readJson(ctx, `${dir}/tokenizer_config.json`)) ?? {});
  const hf = (await readJson(ctx, `${dir}/config.json`)) ?? {};
  const innerConfig: ModelConfig = { ...config, backend: 'onnxruntime', default_model_filename: file.path.slice(dir.length + 1), input: [], output: [] };
  const io = await onnx.describeModel?.(innerConfig, version, files);
  const names = new Set(io?.inputs.map((i) => i.name) ?? ['input_ids', 'attention_mask', 'token_type_ids']);
  for (const need of ['input_ids', 'attention_mask']) {
    if (!names.has(need)) throw new TsiError('INVALID_ARG', `model '${name}': '${file.path}' has no input '${need}' (an encoder takes input_ids and attention_mask)`);
  }
  const feeds = ['input_ids', 'attention_mask', 'token_type_ids'].filter((n) => names.has(n));
  const output = pickOutput(io);
  if (!output) throw new TsiError('INVALID_ARG', `model '${name}': '${file.path}' has no ${expected} output`);
  innerConfig.input = feeds.map((n) => ({ name: n, data_type: 'TYPE_INT64', dims: [-1] }));
  innerConfig.output = [{ name: output, data_type: 'TYPE_FP32', dims: outputDims }];
  const inner = await onnx.loadModel({ ...ctx, config: innerConfig });
  return { tokenizer, hf, file: file.path, inner, feeds, output, io };
}

/** One row of a batch: its token ids and, for pairs, their type ids (0 where absent). */
export interface TokenRow {
  ids: number[];
  typeIds?: number[];
}

/** An instance of an encoder backend over an instance of the inner onnxruntime model. */
export abstract class EncoderInstance implements BackendInstance {
  readonly device: string;

  protected readonly tokenizer: Tokenizer;
  private readonly feeds: string[];
  private readonly output: string;

  constructor(protected readonly model: string, protected readonly inner: BackendInstance, enc: Pick<Encoder, 'tokenizer' | 'feeds' | 'output'>) {
    this.device = inner.device;
    this.tokenizer = enc.tokenizer;
    this.feeds = enc.feeds;
    this.output = enc.output;
  }

  get spec(): InstanceSpec {
    return this.inner.spec;
  }

  get placement() {
    return this.inner.placement;
  }

  /** An output's shape for a request of `rows` rows: `[rows, ...row]` when it came batched (`[n, 1]` texts), else `row`. */
  protected shapeFor(req: BackendRequest, rows: number, row: number[]): number[] {
    return req.inputs.get('text_input')!.shape.length > 1 ? [rows, ...row] : row;
  }

  /** A request's rows, tokenized and checked (a throw refuses that request alone). */
  protected abstract rowsOf(req: BackendRequest): TokenRow[];

  /** A request's response from the batch's output, its rows starting at `first`. */
  protected abstract respond(req: BackendRequest, out: Tensor, first: number, rows: TokenRow[], longest: number): ResponsePayload;

  /**
   * Tokenizes every request's rows, runs them all as one padded request of the inner model, and
   * answers each request from its rows of the output; a request refused by its rows or its response
   * fails alone, the encoder's failure fails them all.
   */
  async execute(requests: BackendRequest[]): Promise<ExecutionTimes | void> {
    const rows: TokenRow[] = [];
    const live: { req: BackendRequest; rows: TokenRow[] }[] = [];
    for (const req of requests) {
      try {
        const mine = this.rowsOf(req);
        rows.push(...mine);
        live.push({ req, rows: mine });
      } catch (err) {
        req.send(err as TsiError, true);
      }
    }
    if (rows.length === 0) return;
    const { result, times, longest } = await this.run(rows, live[0]!.req.id);
    let first = 0;
    for (const { req, rows: mine } of live) {
      try {
        if (result instanceof TsiError) throw result;
        req.send(this.respond(req, result, first, mine, longest), true);
      } catch (err) {
        req.send(err as TsiError, true);
      }
      first += mine.length;
    }
    return times;
  }

  /** Runs `rows` right-padded as one request of the inner model; `id` names it in traces. */
  protected async run(rows: TokenRow[], id: string): Promise<{ result: Tensor | TsiError; times: ExecutionTimes | void; longest: number }> {
    const R = rows.length;
    const L = Math.max(...rows.map((r) => r.ids.length));
    const ids = new BigInt64Array(R * L);
    const mask = new BigInt64Array(R * L);
    const types = new BigInt64Array(R * L);
    rows.forEach((r, i) => r.ids.forEach((tok, t) => {
      ids[i * L + t] = BigInt(tok);
      mask[i * L + t] = 1n;
      if (r.typeIds) types[i * L + t] = BigInt(r.typeIds[t]!);
    }));
    const data: Record<string, BigInt64Array> = { input_ids: ids, attention_mask: mask, token_type_ids: types };
    const inputs = new Map<string, Tensor>(this.feeds.map((n) => [n, { name: n, datatype: 'INT64', shape: [R, L], data: data[n]! }]));
    let result = new TsiError('INTERNAL', `model '${this.model}': the encoder sent no response`) as Tensor | TsiError;
    const times = await this.inner.execute([{
      id, inputs, requestedOutputs: [this.output], parameters: {}, batchSize: R,
      send: (r) => {
        result = r instanceof TsiError ? r : r.outputs.find((t) => t.name === this.output) ?? result;
      },
    }]);
    return { result, times, longest: L };
  }

  async unload(): Promise<void> {
    await this.inner.unload();
  }
}
