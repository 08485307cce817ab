/**
 * `tsi-node pull`: fetches a model folder from the Hugging Face Hub (with `@huggingface/hub`, at
 * `HF_ENDPOINT` with `HF_TOKEN` when set) into a model repository, as the `llm` backend serves it
 * (a causal LM) or the `classifier` backend (a `*ForSequenceClassification` export: a cross-encoder
 * reranker such as ms-marco MiniLM or bge-reranker, or a text classifier) or the `whisper` backend
 * (a Whisper export: onnx/encoder_model<suffix>.onnx and onnx/decoder_model_merged<suffix>.onnx of one
 * precision, with preprocessor_config.json):
 * `<repository>/<name>/1/` holds the folder and `<repository>/<name>/config.pbtxt` names the backend
 * and the variant (a classifier's also turns on the dynamic batcher, which gathers a rerank's pairs).
 *
 * Only what the chosen variant needs comes down: config.json, generation_config.json, the tokenizer
 * files, the chat template and `onnx/<variant>.onnx` with its external data; an onnx-community repo
 * holds every precision (often several GB each), so the rest is left on the Hub. The small files come
 * first and are checked the way the backend checks them at load (a decoder-only architecture, an ONNX
 * export of the variant, a tokenizer the library reads), so a folder tsi cannot serve is refused before
 * any weights are fetched. Everything comes from one commit (the revision's sha, read once), so a push
 * during a pull cannot mix two versions.
 *
 * Resumable: bytes go to `<file>.<etag>.part` as they arrive, and a later run asks for the rest with
 * a Range request; a part of another etag (the file changed on the Hub) is dropped. A finished file of
 * the right size is kept. config.pbtxt is written last, so a half-pulled folder is never served.
 */

import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, open, readFile, readdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { downloadFile, fileDownloadInfo, listFiles, modelInfo, type ListFileEntry } from '@huggingface/hub';
import { Tokenizer, VARIANT_RULES, type VariantRule } from '../../core/index.js';

export interface PullOptions {
  /** `owner/name` on the Hub. */
  repo: string;
  /** `q4`, `fp16`, `fp32`, `model_q4`...; default: the first the repo holds in the order of `device`. */
  variant?: string;
  /**
   * Where the model will be served: `cpu` (default) or `gpu`, which also writes
   * `instance_group [{ kind: KIND_GPU }]`; without `variant`, that device's order picks the file
   * (the backend's VARIANT_RULES: fp32 first on a CPU, fp16 first on a GPU).
   */
  device?: 'cpu' | 'gpu';
  /** The model repository folder. */
  repository: string;
  /** The model's name in the repository; default: the repo's name, lowercased, `[^a-z0-9_-]` → `_`. */
  name?: string;
  revision?: string;
  /** Default: HF_ENDPOINT, else the Hub. */
  hubUrl?: string;
  /** Default: HF_TOKEN. */
  accessToken?: string;
  /** Where progress goes (stderr in the CLI). */
  progress?: (line: string, done: boolean) => void;
}

export interface PullResult {
  dir: string;
  name: string;
  /** The backend that serves it. */
  kind: PulledKind;
  variant: string;
  /** Why that variant: asked for, or the device's rule. */
  reason: string;
  commit: string;
  files: { path: string; bytes: number; fetched: number }[];
}

/** Files a variant does not select but the backend reads when present. */
const SMALL = /^(config\.json|generation_config\.json|tokenizer\.json|tokenizer_config\.json|special_tokens_map\.json|chat_template\.jinja|chat_template\.json|preprocessor_config\.json|processor_config\.json)$/;
/** A vision-language repo's three graphs (core/vision/idefics3.ts); a variant is their common suffix. */
const VISION_GRAPHS = ['vision_encoder', 'embed_tokens', 'decoder_model_merged'];
/** The vision-language families the llm backend serves. */
const VISION_FAMILIES = ['idefics3', 'smolvlm'];
/** Architectures the `llm` backend cannot serve even with a decoder-with-past export. */
const NOT_DECODER = /(ForConditionalGeneration|ForSeq2SeqLM|ForMaskedLM|ForSequenceClassification|ForTokenClassification|ForQuestionAnswering|Model)$/;

const MiB = 1024 * 1024;
export const size = (n: number) => (n >= 1024 * MiB ? `${(n / 1024 / MiB).toFixed(2)} GiB` : n >= MiB ? `${(n / MiB).toFixed(1)} MiB` : `${(n / 1024).toFixed(1)} KiB`);

function refuse(repo: string, why: string): Error {
  return new Error(`${repo} cannot be served by tsi: ${why}`);
}

/** The variant name an option means: `q4` → `model_q4`, `fp32` → `model`, a full name as it is. */
export function variantName(asked: string): string {
  const v = asked.trim();
  if (v === 'fp32') return 'model';
  return v.startsWith('model') || v.startsWith('decoder') ? v : `model_${v}`;
}

/** The files `variant` (default: the best present by `rule`) needs from the listing, and the variants the repo holds. */
export function planFiles(
  entries: ListFileEntry[], variant: string | undefined, rule: VariantRule = VARIANT_RULES.cpu,
): { variant: string; reason: string; present: string[]; files: ListFileEntry[] } {
  const files = entries.filter((e) => e.type === 'file');
  const graphs = files.map((e) => /^onnx\/([^/]+)\.onnx$/.exec(e.path)?.[1]).filter((v): v is string => v !== undefined);
  if (graphs.some((g) => g.startsWith('vision_encoder'))) return planVisionFiles(files, graphs, variant, rule);
  const present = graphs.sort();
  const chosen = variant ? variantName(variant) : rule.order.find((v) => present.includes(v)) ?? present[0];
  const reason = variant ? 'asked for' : `the best present for ${rule.device}: ${rule.why}`;
  if (!chosen || !present.includes(chosen)) return { variant: chosen ?? '', reason, present, files: [] };
  // External data: `<variant>.onnx_data`, and `_1`, `_2`... when a big export is split.
  const weights = new RegExp(`^onnx/${chosen.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\.onnx(_data(_\\d+)?)?$`);
  return { variant: chosen, reason, present, files: files.filter((e) => SMALL.test(e.path) || weights.test(e.path)) };
}

/**
 * A vision-language repo's plan: variants named as a text model's (`model` = the fp32 files,
 * `model_q4` = the `_q4` files...) and present when all three graphs have them; the files are the
 * three graphs of the variant with their external data, and the small files.
 */
function planVisionFiles(files: ListFileEntry[], graphs: string[], variant: string | undefined, rule: VariantRule): ReturnType<typeof planFiles> {
  const suffixOf = (v: string) => v.replace(/^model_?/, '');
  const suffixes = new Set(graphs.filter((g) => g.startsWith('vision_encoder')).map((g) => g.slice('vision_encoder'.length).replace(/^_/, '')));
  const present = [...suffixes].filter((s) => VISION_GRAPHS.every((g) => graphs.includes(s ? `${g}_${s}` : g))).map((s) => (s ? `model_${s}` : 'model')).sort();
  const chosen = variant ? variantName(variant) : rule.order.find((v) => present.includes(v)) ?? present[0];
  const reason = variant ? 'asked for' : `the best present for ${rule.device}: ${rule.why}`;
  if (!chosen || !present.includes(chosen)) return { variant: chosen ?? '', reason, present, files: [] };
  const s = suffixOf(chosen);
  const names = VISION_GRAPHS.map((g) => (s ? `${g}_${s}` : g));
  const weights = new RegExp(`^onnx/(${names.join('|')})\\.onnx(_data(_\\d+)?)?$`);
  return { variant: chosen, reason, present, files: files.filter((e) => SMALL.test(e.path) || weights.test(e.path)) };
}

/**
 * A Whisper repo's files (onnx/encoder_model<suffix>.onnx and onnx/decoder_model_merged<suffix>.onnx
 * for one precision), or undefined when the repo is not a Whisper export. Variants are named as the
 * decoder-only ones (`model` is fp32, `model_q4` the `_q4` pair…), so the same orders choose.
 */
export function planWhisperFiles(
  entries: ListFileEntry[], variant: string | undefined, rule: VariantRule = VARIANT_RULES.cpu,
): { variant: string; reason: string; present: string[]; files: ListFileEntry[] } | undefined {
  const files = entries.filter((e) => e.type === 'file');
  const suffixes = (part: string) => new Set(files.map((e) => new RegExp(`^onnx/${part}(_[^/.]+)?\\.onnx$`).exec(e.path)).filter((m) => m).map((m) => m![1] ?? ''));
  const enc = suffixes('encoder_model');
  const dec = suffixes('decoder_model_merged');
  if (enc.size === 0 || dec.size === 0) return undefined;
  const present = [...enc].filter((s) => dec.has(s)).map((s) => `model${s}`).sort();
  const chosen = variant ? variantName(variant) : rule.order.find((v) => present.includes(v)) ?? present[0];
  const reason = variant ? 'asked for' : `the best present for ${rule.device}: ${rule.why}`;
  if (!chosen || !present.includes(chosen)) return { variant: chosen ?? '', reason, present, files: [] };
  const suffix = chosen.slice('model'.length).replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const weights = new RegExp(`^onnx/(encoder_model|decoder_model_merged)${suffix}\\.onnx(_data(_\\d+)?)?$`);
  return { variant: chosen, reason, present, files: files.filter((e) => SMALL.test(e.path) || weights.test(e.path)) };
}

/** The backends a pulled folder is served by. */
export type PulledKind = 'llm' | 'classifier' | 'whisper';

/** Checks the small files as the backend will at load; throws saying why the folder cannot be served. */
async function checkServable(repo: string, dir: string, vision: boolean): Promise<PulledKind> {
  if (!existsSync(join(dir, 'config.json'))) throw refuse(repo, 'it has no config.json');
  const config = JSON.parse(await readFile(join(dir, 'config.json'), 'utf8')) as { architectures?: string[]; model_type?: string; is_encoder_decoder?: boolean };
  const arch = config.architectures?.[0];
  if (config.model_type === 'whisper') return checkTokenizer(repo, dir, 'whisper');
  // An encoder with a sequence-classification head (BertForSequenceClassification, XLMRobertaFor...).
  const kind: PulledKind = !config.is_encoder_decoder && arch?.endsWith('ForSequenceClassification') ? 'classifier' : 'llm';
  if (vision && !VISION_FAMILIES.includes(config.model_type ?? '')) {
    throw refuse(repo, `a vision-language model of model_type ${config.model_type ?? '(none)'}; the llm backend serves ${VISION_FAMILIES.join(' and ')} (SmolVLM / Idefics3) folders`);
  }
  if (kind === 'llm' && !vision && (config.is_encoder_decoder || (arch && NOT_DECODER.test(arch) && !arch.endsWith('ForCausalLM')))) {
    throw refuse(repo, `architecture ${arch ?? config.model_type ?? '(none)'} is neither a decoder-only causal LM (the llm backend serves *ForCausalLM exports with past key values) nor a *ForSequenceClassification encoder (the classifier backend)`);
  }
  return checkTokenizer(repo, dir, kind);
}

async function checkTokenizer(repo: string, dir: string, kind: PulledKind): Promise<PulledKind> {
  if (!existsSync(join(dir, 'tokenizer.json'))) throw refuse(repo, `it has no tokenizer.json (the ${kind} backend reads the Hugging Face tokenizers format)`);
  const tokConfig = existsSync(join(dir, 'tokenizer_config.json')) ? await readFile(join(dir, 'tokenizer_config.json'), 'utf8') : undefined;
  try {
    Tokenizer.fromJson(await readFile(join(dir, 'tokenizer.json'), 'utf8'), tokConfig);
  } catch (err) {
    throw refuse(repo, (err as Error).message);
  }
  return kind;
}

/** The config.pbtxt a pulled folder is served by. */
function configText(kind: PulledKind, variant: string, gpu: boolean): string {
  const head = kind === 'classifier' ? 'backend: "classifier"\nmax_batch_size: 64\ndynamic_batching {}\n'
    : kind === 'whisper' ? 'backend: "whisper"\nmax_batch_size: 16\ndynamic_batching {}\n' : 'backend: "llm"\n';
  return `${head}parameters { key: "variant" value { string_value: "${variant}" } }\n${gpu ? 'instance_group [{ kind: KIND_GPU }]\n' : ''}`;
}

/** Downloads one file into `target`, continuing a part left by an earlier run. Returns the bytes fetched now. */
async function fetchFile(
  o: { repo: string; revision: string; hubUrl: string; accessToken?: string }, entry: ListFileEntry, target: string,
  report: (got: number, resumedFrom: number) => void,
): Promise<number> {
  if (existsSync(target) && (await stat(target)).size === entry.size) {
    report(entry.size, entry.size);
    return 0;
  }
  const info = await fileDownloadInfo({ repo: o.repo, path: entry.path, revision: o.revision, hubUrl: o.hubUrl, accessToken: o.accessToken });
  if (!info) throw new Error(`${o.repo}: ${entry.path} is listed but not found`);
  const tag = createHash('sha256').update(info.etag).digest('hex').slice(0, 16);
  const part = `${target}.${tag}.part`;
  await mkdir(dirname(target), { recursive: true });
  for (const e of await readdir(dirname(target))) {
    const p = join(dirname(target), e);
    if (e.startsWith(`${target.slice(dirname(target).length + 1)}.`) && e.endsWith('.part') && p !== part) await rm(p);
  }
  let have = existsSync(part) ? (await stat(part)).size : 0;
  if (have > info.size) { await rm(part); have = 0; }
  const blob = await downloadFile({ repo: o.repo, path: entry.path, revision: o.revision, hubUrl: o.hubUrl, accessToken: o.accessToken, downloadInfo: info, xet: false });
  if (!blob) throw new Error(`${o.repo}: ${entry.path} is listed but not found`);
  let got = have;
  report(got, have);
  if (have < info.size) {
    const file = await open(part, 'a');
    try {
      const reader = blob.slice(have).stream().getReader();
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        await file.write(value);
        got += value.byteLength;
        report(got, have);
      }
    } finally {
      await file.close();
    }
  }
  if (got !== info.size) throw new Error(`${o.repo}: ${entry.path} stopped at ${got} of ${info.size} bytes (run the pull again to continue)`);
  await rename(part, target);
  return got - have;
}

/** undici says only 'fetch failed' and keeps the reason (ECONNREFUSED, ENOTFOUND...) in `cause`. */
function why(err: unknown): string {
  const e = err as Error & { cause?: { code?: string; message?: string } };
  return e.cause ? `${e.message} (${e.cause.code ?? e.cause.message})` : e.message;
}

export async function pullModel(o: PullOptions): Promise<PullResult> {
  const hubUrl = (o.hubUrl ?? process.env.HF_ENDPOINT ?? 'https://huggingface.co').replace(/\/+$/, '');
  const accessToken = o.accessToken ?? (process.env.HF_TOKEN || undefined);
  const progress = o.progress ?? (() => {});
  const name = o.name ?? o.repo.split('/').pop()!.toLowerCase().replace(/[^a-z0-9_-]/g, '_');
  const info = await modelInfo({ name: o.repo, hubUrl, accessToken, revision: o.revision, additionalFields: ['sha'] }).catch((err: unknown) => {
    throw new Error(`${o.repo} at ${hubUrl}: ${why(err)}`);
  });
  const commit = (info as { sha?: string }).sha ?? o.revision ?? 'main';
  const entries: ListFileEntry[] = [];
  for await (const e of listFiles({ repo: o.repo, recursive: true, revision: commit, hubUrl, accessToken })) entries.push(e);
  const gpu = o.device === 'gpu';
  const rule = gpu ? VARIANT_RULES.gpu : VARIANT_RULES.cpu;
  const plan = planWhisperFiles(entries, o.variant, rule) ?? planFiles(entries, o.variant, rule);
  if (plan.present.length === 0) throw refuse(o.repo, 'it has no ONNX export under onnx/ (tsi serves the onnx-community layout: onnx/model*.onnx)');
  if (plan.files.length === 0) throw refuse(o.repo, `variant '${plan.variant}' is not in onnx/ (present: ${plan.present.join(', ')})`);

  const entry = resolve(o.repository, name);
  const dir = join(entry, '1');
  const hub = { repo: o.repo, revision: commit, hubUrl, accessToken };
  const small = plan.files.filter((f) => !f.path.startsWith('onnx/'));
  const weights = plan.files.filter((f) => f.path.startsWith('onnx/'));
  const total = plan.files.reduce((s, f) => s + f.size, 0);
  progress(`${o.repo}@${commit.slice(0, 12)} → ${dir}: variant ${plan.variant} (${plan.reason}; present: ${plan.present.join(', ')}), ${plan.files.length} files, ${size(total)}`, true);
  const files: PullResult['files'] = [];
  for (const f of small) files.push({ path: f.path, bytes: f.size, fetched: await fetchFile(hub, f, join(dir, f.path), () => {}) });
  const kind = await checkServable(o.repo, dir, weights.some((f) => f.path.startsWith('onnx/vision_encoder')));
  let before = small.reduce((s, f) => s + f.size, 0);
  const started = Date.now();
  let fetchedNow = 0;
  for (const f of weights) {
    let last = 0;
    const fetched = await fetchFile(hub, f, join(dir, f.path), (got, from) => {
      const now = Date.now();
      if (now - last < 200 && got < f.size) return;
      last = now;
      if (from >= f.size) return progress(`${f.path}  ${size(f.size)}  already here`, true);
      // Bytes fetched by this run only: a resumed part is not download speed.
      const rate = (fetchedNow + got - from) / Math.max((now - started) / 1000, 1e-3);
      progress(`${f.path}  ${size(got)} / ${size(f.size)}  total ${size(before + got)} / ${size(total)} (${Math.floor(((before + got) / Math.max(total, 1)) * 100)}%)  ${size(rate)}/s`, got >= f.size);
    }).catch((err: unknown) => {
      throw new Error(`${f.path}: ${why(err)}; run the pull again to continue where it stopped`);
    });
    fetchedNow += fetched;
    before += f.size;
    files.push({ path: f.path, bytes: f.size, fetched });
  }
  await writeFile(join(entry, 'config.pbtxt'), configText(kind, plan.variant, gpu));
  progress(`wrote ${join(entry, 'config.pbtxt')}; serve it with: tsi-node serve --model-repository ${resolve(o.repository)}`, true);
  return { dir, name, kind, variant: plan.variant, reason: plan.reason, commit, files };
}
