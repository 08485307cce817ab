/**
 * The `llm` backend (`backend: "llm"` in config.pbtxt): a decoder-only language model exported to ONNX
 * with its KV cache as inputs and outputs, served with in-flight batching. A model version's folder
 * holds the export as Hugging Face tools write it:
 *
 *   <model>/config.pbtxt          backend: "llm" (inputs, outputs and decoupled are auto-completed)
 *   <model>/1/model.onnx          the decoder (default_model_filename to rename; external data beside it),
 *                                 or onnx/<variant>.onnx as onnx-community folders hold it (model-folder.ts)
 *   <model>/1/tokenizer.json      any model type @huggingface/tokenizers reads (tokenizer.ts)
 *   <model>/1/tokenizer_config.json    optional: chat_template, special tokens, add_bos_token
 *   <model>/1/chat_template.jinja optional: the chat template, when tokenizer_config.json has none
 *   <model>/1/generation_config.json   optional: sampling defaults, eos_token_id, max_new_tokens
 *   <model>/1/config.json         optional: Hugging Face config (context length, heads)
 *
 * It is a backend of its own, not a JavaScript model driving the `onnxruntime` backend, because the
 * unit of work is not a request but a step over a changing set of sequences whose caches must stay
 * where the model runs between steps: the onnxruntime backend's execute() is stateless and moves
 * every tensor in and out. Here the runtime supplies only a decoder session (decoder.ts); the
 * scheduler, engine, sampling and text are core's. Config parameters (per instance):
 * `max_num_seqs` (64), `kv_cache_bytes` (512 MiB), `max_prefill_tokens` (4096), `enable_prefix_caching`
 * (true: prompts' caches kept for later prompts with the same prefix, prefix-cache.ts), `max_context`
 * (default: config.json), `variant` (model_q4, model_fp16...; default: the best present),
 * `rewrite_plain_layout` (true, exact or false: whether the Node runtime serves a plain Llama-shaped
 * graph rewritten into the fused layout; runtime-node/llm/plain-rewrite.ts), and the onnxruntime
 * backend's thread settings.
 */

import type {
  AutoCompleteContext, Backend, BackendInstance, BackendModel, InstancePlacement, InstanceSpec, ModelFiles, ModelIoInfo, ModelLoadContext,
} from '../backend.js';
import { TsiError } from '../errors.js';
import type { ModelConfig, ModelInput, ModelOutput } from '../config/model-config.js';
import type { Scheduler, SchedulerContext } from '../scheduling/scheduler.js';
import type { ModelStats } from '../stats.js';
import { decodeString } from '../tensor.js';
import { ChatTemplate } from './chat.js';
import { contextOf, kvBytesPerToken, layoutOf, type DecoderLayout, type DecoderSession } from './decoder.js';
import { checkMemory, modelFile, type MemoryFacts, type ModelFile, type VariantRule } from './model-folder.js';
import { generationDefaults, type GenerationDefaults } from './params.js';
import { LlmScheduler } from './scheduler.js';
import type { LlmModelInfo } from './model-info.js';
import { LlmStats } from './stats.js';
import { Tokenizer } from './tokenizer.js';
import { readVisionFolder, type PixelRunner, type VisionPaths } from '../vision/idefics3.js';
import type { VisionTypes } from '../vision/vision-kit.js';

/** What a runtime provides: the graph's description, and a decoder session per instance. */
export interface DecoderRuntime {
  describe(files: ModelFiles, path: string): Promise<ModelIoInfo>;
  /** `vision`: a vision-language folder's other graphs; the session feeds the decoder through core/vision's kit. */
  open(args: { ctx: ModelLoadContext; spec: InstanceSpec; path: string; layout: DecoderLayout; instanceCount: number; vision?: VisionSessionFiles }): Promise<DecoderSession>;
  /** Which variant (`model`, `model_fp16`, `model_q4`...) the device `config`'s instances run on prefers; default: the CPU's. */
  variantRule?(config: ModelConfig): VariantRule | Promise<VariantRule>;
  /**
   * The files to serve the decoder at `path` from instead of the folder's, where the runtime rewrites
   * the graph (runtime-node: a plain export into the fused layout, cached on disk); undefined to serve
   * it as it is. `context`: the context length it will be served at.
   */
  rewrite?(ctx: ModelLoadContext, path: string, opts: { context?: number }): Promise<ModelFiles | undefined>;
  /** What the memory check needs to know, where the runtime can tell. */
  memory?(ctx: ModelLoadContext, path: string): Promise<MemoryFacts | undefined>;
  /**
   * Where a vision-language model's image preprocessing runs (core/vision/idefics3.ts's pixel step:
   * seconds of CPU for a photo), closed when the model unloads; without it, in the thread that
   * reads the requests.
   */
  imagePixels?(ctx: ModelLoadContext): { run: PixelRunner; close(): Promise<void> } | undefined;
}

export type { LlmModelInfo };

/** What a runtime's session needs to embed a vision-language prompt (core/vision/vision-kit.ts). */
export interface VisionSessionFiles extends VisionPaths {
  imageTokenId: number;
  /** The float types the encoder's pixel_values and the decoder's inputs_embeds take. */
  types: VisionTypes;
}

/** The LLM side of a loaded model version (by its ModelStats), or undefined when it is no `llm` model. */
export function llmModelOf(stats: ModelStats): LlmModelInfo | undefined {
  return stats.llm;
}

const DEFAULT_KV_BYTES = 512 * 1024 * 1024;

/** The inputs and outputs an `llm` model takes (Triton's vLLM backend's names). */
export const LLM_INPUTS: ModelInput[] = [
  { name: 'text_input', data_type: 'TYPE_STRING', dims: [1] },
  { name: 'stream', data_type: 'TYPE_BOOL', dims: [1], optional: true },
  { name: 'sampling_parameters', data_type: 'TYPE_STRING', dims: [1], optional: true },
  { name: 'exclude_input_in_output', data_type: 'TYPE_BOOL', dims: [1], optional: true },
  // Triton's vLLM backend's images: one an element (base64; here also the file or a data: URL).
  { name: 'image', data_type: 'TYPE_STRING', dims: [-1], optional: true },
];
export const LLM_OUTPUTS: ModelOutput[] = [{ name: 'text_output', data_type: 'TYPE_STRING', dims: [-1] }];

export function createLlmBackend(runtime: DecoderRuntime): Backend {
  return {
    name: 'llm',
    async autoCompleteConfig(config: ModelConfig, _ctx: AutoCompleteContext): Promise<ModelConfig> {
      return {
        ...config,
        max_batch_size: config.max_batch_size ?? 0,
        input: config.input && config.input.length > 0 ? config.input : LLM_INPUTS,
        output: config.output && config.output.length > 0 ? config.output : LLM_OUTPUTS,
        model_transaction_policy: { ...config.model_transaction_policy, decoupled: true },
      };
    },
    async loadModel(ctx: ModelLoadContext): Promise<BackendModel> {
      return LlmModel.load(ctx, runtime);
    },
  };
}

async function readJson(files: ModelFiles, path: string, required: boolean): Promise<Record<string, any> | undefined> {
  if (!(await files.exists(path))) {
    if (required) throw new TsiError('INVALID_ARG', `unable to find '${path}'`);
    return undefined;
  }
  try {
    return JSON.parse(decodeString(await files.read(path))) as Record<string, any>;
  } catch (err) {
    throw new TsiError('INVALID_ARG', `'${path}' is not valid JSON: ${(err as Error).message}`);
  }
}

/** A positive integer config parameter (`key`), or `dflt` when it is not given. */
export function intParam(config: ModelConfig, key: string, dflt: number): number {
  const raw = config.parameters?.[key]?.string_value;
  if (raw === undefined) return dflt;
  const v = Number(raw);
  if (!Number.isInteger(v) || v <= 0) throw new TsiError('INVALID_ARG', `config parameter '${key}' must be a positive integer, got '${raw}'`);
  return v;
}

function boolParam(config: ModelConfig, key: string, dflt: boolean): boolean {
  const raw = config.parameters?.[key]?.string_value;
  const v = raw?.trim().toLowerCase();
  if (v === undefined || v === '') return dflt;
  if (v === 'true' || v === '1') return true;
  if (v === 'false' || v === '0') return false;
  throw new TsiError('INVALID_ARG', `model '${config.name ?? ''}': config parameter '${key}' must be true or false, got '${raw}'`);
}

function instancesOf(config: ModelConfig): number {
  return (config.instance_group ?? []).reduce((n, g) => n + (g.count ?? 1), 0) || 1;
}

class LlmModel implements BackendModel {
  private readonly sessions: DecoderSession[] = [];
  private stats?: LlmStats;
  /** The runtime's image preprocessing, where it gave one. */
  pixels?: { run: PixelRunner; close(): Promise<void> };

  private constructor(
    private readonly ctx: ModelLoadContext, private readonly runtime: DecoderRuntime, private readonly path: string,
    readonly layout: DecoderLayout, readonly info: Omit<LlmModelInfo, 'stats'>, private readonly vision?: VisionSessionFiles,
  ) {}

  static async load(ctx: ModelLoadContext, runtime: DecoderRuntime): Promise<LlmModel> {
    const { config, files, version } = ctx;
    if (config.model_transaction_policy?.decoupled !== true) {
      throw new TsiError('INVALID_ARG', `model '${config.name}': an llm model is decoupled (it streams tokens): set model_transaction_policy { decoupled: true }`);
    }
    if (!(config.input ?? []).some((i) => i.name === 'text_input') || !(config.output ?? []).some((o) => o.name === 'text_output')) {
      throw new TsiError('INVALID_ARG', `model '${config.name}': an llm model takes 'text_input' and returns 'text_output' (TYPE_STRING)`);
    }
    const dir = String(version);
    // A vision-language folder (SmolVLM / Idefics3) serves its decoder_model_merged; core/vision/ does the rest.
    const vlm = await readVisionFolder(files, dir, config);
    const file = vlm ? { path: vlm.paths.decoder, present: [] } satisfies ModelFile : await modelFile(files, dir, config, await runtime.variantRule?.(config));
    const path = file.path;
    if (vlm) ctx.log.info(`model '${config.name}': a vision-language model (${vlm.paths.encoder}, ${vlm.paths.embed}, ${path}; image token ${vlm.processor.imageTokenId})`);
    else if (file.variant) ctx.log.info(`model '${config.name}': serving ${path} (variant '${file.variant}', ${file.reason}; present: ${file.present.join(', ')})`);
    const tokJson = await readJson(files, `${dir}/tokenizer.json`, true);
    const tokCfg = await readJson(files, `${dir}/tokenizer_config.json`, false);
    const tokenizer = new Tokenizer(tokJson!, tokCfg ?? {});
    const jinjaPath = `${dir}/chat_template.jinja`;
    const jinja = (await files.exists(jinjaPath)) ? decodeString(await files.read(jinjaPath)) : undefined;
    const genCfg = await readJson(files, `${dir}/generation_config.json`, false);
    const folderCfg = await readJson(files, `${dir}/config.json`, false);
    // A vision-language config nests its language model's (context, heads) under text_config.
    const hf = vlm && folderCfg?.text_config ? { ...folderCfg, ...folderCfg.text_config } : folderCfg;
    const maxContextParam = config.parameters?.max_context?.string_value;
    const maxContext = maxContextParam !== undefined ? intParam(config, 'max_context', 1) : undefined;
    // A rewritten graph (docs/llm.md, "Two export layouts") is read, measured and served in the folder's place.
    const rewritten = vlm ? undefined : await runtime.rewrite?.(ctx, path, { context: contextOf(hf ?? {}, maxContext) });
    if (rewritten) ctx = { ...ctx, files: rewritten };
    const io = await runtime.describe(ctx.files, path);
    const layout = layoutOf(io, hf ?? {}, { maxContext });
    const defaults = generationDefaults(genCfg, hf, tokenizer.eosId);
    const facts = await runtime.memory?.(ctx, path);
    if (facts) checkMemory(ctx, facts, instancesOf(config), intParam(config, 'kv_cache_bytes', DEFAULT_KV_BYTES), file);
    ctx.log.info(`model '${config.name}': decoder with ${layout.past.length} layers, ${layout.kvHeads} KV heads × ${layout.headDim}, ${layout.kvType} cache, context ${layout.maxContext}, vocabulary ${tokenizer.vocabSize}`);
    if (vlm && !layout.inputsEmbeds) throw new TsiError('INVALID_ARG', `model '${config.name}': ${path} takes input_ids; a vision-language decoder takes inputs_embeds`);
    const vision = vlm && { ...vlm.paths, imageTokenId: vlm.processor.imageTokenId, types: await visionTypes(runtime, files, vlm.paths, io, layout, config.name ?? '') };
    const model = new LlmModel(ctx, runtime, path, layout, { tokenizer, chat: new ChatTemplate(tokCfg, jinja), maxContext: layout.maxContext, defaults, vision: vlm?.processor }, vision);
    if (vlm) {
      model.pixels = runtime.imagePixels?.(ctx);
      if (model.pixels) vlm.processor.runPixels = model.pixels.run;
    }
    return model;
  }

  async createInstance(spec: InstanceSpec): Promise<BackendInstance> {
    const instanceCount = instancesOf(this.ctx.config);
    const session = await this.runtime.open({ ctx: this.ctx, spec, path: this.path, layout: this.layout, instanceCount, vision: this.vision });
    this.sessions.push(session);
    return new LlmInstance(spec, session);
  }

  createScheduler(sctx: SchedulerContext): Scheduler {
    const { config } = this.ctx;
    const perToken = kvBytesPerToken(this.layout);
    const kvBytes = intParam(config, 'kv_cache_bytes', DEFAULT_KV_BYTES);
    const limits = {
      maxNumSeqs: intParam(config, 'max_num_seqs', 64),
      kvTokens: Math.floor(kvBytes / perToken),
      maxPrefillTokens: intParam(config, 'max_prefill_tokens', 4096),
      prefixCaching: boolParam(config, 'enable_prefix_caching', true),
    };
    const stats = new LlmStats(this.ctx.metrics, { model: sctx.modelName, version: String(sctx.version) }, () => sctx.clock.epochMs());
    this.stats = stats;
    sctx.stats.llm = { ...this.info, stats };
    sctx.stats.sections.set('llm_stats', () => stats.toJson());
    return new LlmScheduler(sctx, {
      sessions: this.sessions, limits, tokenizer: this.info.tokenizer, defaults: this.info.defaults,
      maxContext: this.layout.maxContext, kvBytesPerToken: perToken, llm: stats, vision: this.info.vision,
    });
  }

  async unload(): Promise<void> {
    this.stats?.release();
    await this.pixels?.close();
  }
}

class LlmInstance implements BackendInstance {
  readonly device: string;
  readonly placement?: InstancePlacement;

  constructor(readonly spec: InstanceSpec, private readonly session: DecoderSession) {
    this.device = session.device;
    this.placement = session.placement;
  }

  async execute(): Promise<void> {
    // The scheduler drives the session step by step; a batch of whole requests has no meaning here.
    throw new TsiError('UNSUPPORTED', 'an llm model instance runs decoder steps, not request batches (model_warmup is not supported)');
  }

  async unload(): Promise<void> {
    await this.session.close();
  }
}

/**
 * The float types of a vision-language folder's edges: the encoder's pixel_values, the embed and
 * encoder outputs, the decoder's inputs_embeds. float32 and float16 are served (core/vision converts
 * between them); anything else is refused by name at load.
 */
async function visionTypes(runtime: DecoderRuntime, files: ModelFiles, paths: VisionPaths, decoder: ModelIoInfo, layout: DecoderLayout, name: string): Promise<VisionTypes> {
  const [encoder, embed] = [await runtime.describe(files, paths.encoder), await runtime.describe(files, paths.embed)];
  const float = (path: string, what: string, type: string | undefined): 'float32' | 'float16' => {
    if (type === 'float32' || type === 'float16') return type;
    throw new TsiError('INVALID_ARG', `model '${name}': ${path} ${what} is ${type ?? 'missing'}; tsi serves float32 and float16 vision-language graphs`);
  };
  const pixels = encoder.inputs.find((i) => i.name === 'pixel_values');
  float(paths.encoder, "output 'image_features'", (encoder.outputs.find((o) => o.name === 'image_features') ?? encoder.outputs[0])?.datatype);
  float(paths.embed, `output '${embed.outputs[0]?.name ?? 'inputs_embeds'}'`, embed.outputs[0]?.datatype);
  return {
    pixels: float(paths.encoder, "input 'pixel_values'", pixels?.datatype),
    inputsEmbeds: float(paths.decoder, `input '${layout.inputsEmbeds}'`, decoder.inputs.find((i) => i.name === layout.inputsEmbeds)?.datatype),
  };
}
