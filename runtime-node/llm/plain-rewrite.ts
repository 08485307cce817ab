/**
 * Serving a plain (Optimum-shaped) decoder at the fused layout's speed: at load, the llm backend's
 * rewrite hook reads the plain graph's weights (graph/plain-decoder.ts), writes the same model in
 * onnxruntime-genai's fused layout (graph/fused-decoder.ts), checks it against the plain graph by
 * running both on one prompt, and serves it in the folder's place. The folder stays as downloaded; the
 * rewritten graph is cached under tsi's cache (`$TSI_CACHE_DIR/graphs`, else `~/.cache/tsi/graphs`),
 * keyed by the source files' path, size and modification time, the context length and this rewriter's
 * version, so the next start reuses it. A graph the reader does not recognise, or whose check fails,
 * is served as exported, and the log says why. Config parameter `rewrite_plain_layout`: `true`, `exact` (no int8
 * activations) or `false` (mode()). Why at load and not a `tsi-node` command: a downloaded folder is served fast without a step
 * people have to know about, and the check against the unrewritten graph runs where it is served.
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, readdirSync, realpathSync, statSync } from 'node:fs';
import { mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import type { ModelFiles, ModelLoadContext } from '../../core/index.js';
import { TsiError } from '../../core/index.js';
import { argmaxRows } from '../../core/llm/auto-decode.js';
import { fusedDecoderModel, type DecoderWeights } from '../../graph/fused-decoder.js';
import { readPlainDecoder } from '../../graph/plain-decoder.js';
import { tsiCacheDir } from '../gpu/cuda-install.js';
import { loadOrt } from '../gpu/ort.js';
import { readOnnxIo } from '../onnx/info.js';

/** Bumped whenever the rewrite's output changes, so older cached graphs are not reused. */
const REWRITER_VERSION = 1;
/** The check's prompt length: enough positions that a wrong rotary or mask shows in the logits. */
const CHECK_TOKENS = 12;

/**
 * The files the decoder at `path` is served from: the folder's with the fused rewrite in the plain
 * graph's place, or undefined (the graph served as it is; the log says why when it was a plain one).
 */
export async function rewritePlainDecoder(ctx: ModelLoadContext, path: string, opts: { context?: number }): Promise<ModelFiles | undefined> {
  const name = `model '${ctx.config.name}'`;
  const local = ctx.files.localPath?.(path);
  if (!local) return undefined;
  const bytes = await readFile(local);
  const ops = readOnnxIo(bytes).ops ?? [];
  // Only a plain graph with its attention in plain operators is a candidate; a fused one is served as it is.
  if (ops.includes('com.microsoft:GroupQueryAttention') || !ops.includes('Softmax')) return undefined;
  const notRewritten = (why: string) => {
    ctx.log.info(`${name}: serving the plain graph ${path} as exported, not rewritten into the fused layout: ${why}`);
    return undefined;
  };
  const how = mode(ctx);
  if (how === 'off') return notRewritten('config parameter rewrite_plain_layout is false');
  if ((ctx.config.instance_group ?? []).some((g) => g.kind === 'KIND_GPU')) return notRewritten('KIND_GPU instances run the plain graph (the fused layout is rewritten for the CPU)');
  if (!opts.context) return notRewritten('the context length is unknown (config.json max_position_embeddings or config parameter max_context)');
  const sources = sourceFiles(local);
  const key = createHash('sha256').update(JSON.stringify({
    v: REWRITER_VERSION, context: opts.context, how, files: sources.map((f) => ({ f: realpathSync(f), size: statSync(f).size, mtime: statSync(f).mtimeMs })),
  })).digest('hex').slice(0, 24);
  const dir = join(tsiCacheDir(), 'graphs', key);
  const cached = join(dir, 'model.onnx');
  if (existsSync(cached)) {
    let made = '';
    try {
      const record = JSON.parse(readFileSync(join(dir, 'source.json'), 'utf8')) as { summary: string; made: string };
      made = ` (${record.summary}; rewritten and checked ${record.made})`;
    } catch { /* the graph is there; only the record of how it was made is not */ }
    ctx.log.info(`${name}: serving ${path} rewritten into the fused layout (GroupQueryAttention), reused from the cache at ${dir}${made}`);
    return overlay(ctx.files, path, cached);
  }
  const t0 = performance.now();
  const data = new Map<string, Uint8Array>();
  let read: ReturnType<typeof readPlainDecoder>;
  try {
    read = readPlainDecoder(bytes, {
      context: opts.context,
      external: (location) => {
        if (!data.has(location)) data.set(location, readFileSyncWithin(dirname(local), location));
        return data.get(location)!;
      },
    });
  } catch (e) {
    return notRewritten(`its graph could not be read (${(e as Error).message})`);
  }
  if (!read.ok) return notRewritten(`its graph is not recognised (${read.reason})`);
  const fused = fusedDecoderModel(read.weights, { name: `fused ${basename(local)}`, docString: `${local} rewritten into the fused layout by tsi`, external: 'model.onnx_data', int8Activations: how === 'fast' });
  // Two loads of the same files in one process each write their own, and the first to finish wins.
  const tmp = `${dir}.tmp-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
  let stage = `the cache at ${dir} could not be written`;
  try {
    await forgetStale(dirname(dir));
    await mkdir(tmp, { recursive: true });
    await writeFile(join(tmp, 'model.onnx'), fused.model);
    if (fused.data) await writeFile(join(tmp, 'model.onnx_data'), fused.data);
    stage = 'the check could not run both graphs';
    const check = await compareGraphs(local, join(tmp, 'model.onnx'), read.weights, how === 'fast');
    stage = `the cache at ${dir} could not be written`;
    if (!check.ok) return notRewritten(`the rewritten graph's logits part from the plain graph's (${check.detail})`);
    await writeFile(join(tmp, 'source.json'), JSON.stringify({ source: sources.map((f) => realpathSync(f)), summary: read.summary, check: check.detail, made: new Date().toISOString() }, null, 2));
    // Another load of the same files may have finished first: its graph is the same, and may be in use.
    await rename(tmp, dir).catch((e: Error) => { if (!existsSync(cached)) throw e; });
    ctx.log.info(`${name}: serving ${path} rewritten into the fused layout (GroupQueryAttention, SkipSimplifiedLayerNormalization, one projection for q/k/v and one for gate/up${read.summary.includes('int4') ? (how === 'fast' ? ', int8 activations' : ', the export\'s accuracy level') : ''}; ${read.summary}) in ${((performance.now() - t0) / 1000).toFixed(1)} s, checked against the plain graph on a ${CHECK_TOKENS}-token prompt (${check.detail}); cached at ${dir}`);
    return overlay(ctx.files, path, cached);
  } catch (e) {
    return notRewritten(`${stage} (${(e as Error).message})`);
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
}

/** Drops cached rewrites whose source files are gone (a deleted or replaced folder leaves nothing behind). */
async function forgetStale(root: string): Promise<void> {
  if (!existsSync(root)) return;
  for (const entry of readdirSync(root)) {
    const record = join(root, entry, 'source.json');
    try {
      const { source } = JSON.parse(readFileSync(record, 'utf8')) as { source: string[] };
      if (source.every((f) => existsSync(f))) continue;
    } catch {
      // No record: a rewrite in flight (`.tmp-<pid>-<n>`) unless its process is gone.
      const pid = Number(/\.tmp-(\d+)-\w+$/.exec(entry)?.[1]);
      if (pid && alive(pid)) continue;
    }
    await rm(join(root, entry), { recursive: true, force: true });
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * Config parameter `rewrite_plain_layout`: `true` (the default: fused, int4 projections with int8
 * activations as onnxruntime-genai's exports and llama.cpp's Q4_0 compute), `exact` (fused, each int4
 * projection at the export's own accuracy level: the plain graph's arithmetic) or `false`.
 */
function mode(ctx: ModelLoadContext): 'fast' | 'exact' | 'off' {
  const v = ctx.config.parameters?.rewrite_plain_layout?.string_value?.trim().toLowerCase();
  if (v === undefined || v === '' || v === 'true' || v === '1') return 'fast';
  if (v === 'exact') return 'exact';
  if (v === 'false' || v === '0') return 'off';
  throw new TsiError('INVALID_ARG', `model '${ctx.config.name ?? ''}': config parameter rewrite_plain_layout must be true, exact or false, not '${v}'`);
}

/** The model file and its external data chunks beside it (model.onnx_data, model.onnx_data_1...). */
function sourceFiles(local: string): string[] {
  const dir = dirname(local), base = basename(local);
  return [local, ...readdirSync(dir).filter((f) => f.startsWith(`${base}_data`)).sort().map((f) => join(dir, f))];
}

/** An external data file named by the model, which must stay within the model's folder. */
function readFileSyncWithin(dir: string, location: string): Uint8Array {
  const file = resolve(dir, location);
  if (dirname(file) !== resolve(dir)) throw new TsiError('INVALID_ARG', `external data '${location}' lies outside the model's folder`);
  return readFileSync(file);
}

/** The folder's files with `path` read from `file` instead. */
function overlay(files: ModelFiles, path: string, file: string): ModelFiles {
  return {
    read: (p) => (p === path ? readFile(file) : files.read(p)),
    exists: (p) => (p === path ? Promise.resolve(true) : files.exists(p)),
    list: (d) => files.list(d),
    localPath: (p) => (p === path ? file : files.localPath?.(p)),
  };
}

/**
 * Runs the plain and the fused graph on one prompt (batch 1, empty cache) and compares the logits at
 * every position: the largest difference relative to the largest logit, and whether the argmax agrees.
 * The same arithmetic must agree to 1e-4 of the largest logit (float sums in another order) with the
 * same top token everywhere; int8 activations to 15 % with the same top token at half the positions or
 * more (tiny random models' logits move by ~5 % under them; a wrong rotary moved them by ~110 %, 2 of 12).
 */
async function compareGraphs(plainFile: string, fusedFile: string, w: DecoderWeights, int8Activations: boolean): Promise<{ ok: boolean; detail: string }> {
  const vocab = w.embed.length / w.finalNorm.length;
  const int8 = int8Activations && [w.lmHead, ...w.layers.flatMap((l) => [l.q, l.o, l.gate, l.down])].some((p) => p.kind === 'int4');
  const ort = loadOrt();
  const opts = { intraOpNumThreads: 1, interOpNumThreads: 1 };
  const [plain, fused] = await Promise.all([ort.InferenceSession.create(plainFile, opts), ort.InferenceSession.create(fusedFile, opts)]);
  try {
    const S = CHECK_TOKENS;
    const ids = BigInt64Array.from({ length: S }, (_, i) => BigInt((i * 7919 + 3) % vocab));
    const feeds = (s: typeof plain, withPositions: boolean) => {
      const f: Record<string, InstanceType<typeof ort.Tensor>> = {
        input_ids: new ort.Tensor('int64', ids, [1, S]),
        attention_mask: new ort.Tensor('int64', new BigInt64Array(S).fill(1n), [1, S]),
      };
      if (withPositions) f.position_ids = new ort.Tensor('int64', BigInt64Array.from({ length: S }, (_, i) => BigInt(i)), [1, S]);
      // Every position's logits from both (0: all, as transformers reads num_logits_to_keep).
      if (s.inputNames.includes('num_logits_to_keep')) f.num_logits_to_keep = new ort.Tensor('int64', BigInt64Array.of(0n), []);
      for (const n of s.inputNames) if (n.startsWith('past_key_values.')) f[n] = new ort.Tensor('float32', new Float32Array(0), [1, w.kvHeads, 0, w.headDim]);
      return f;
    };
    const a = (await plain.run(feeds(plain, true), ['logits'])).logits!.data as Float32Array;
    const b = (await fused.run(feeds(fused, false), ['logits'])).logits!.data as Float32Array;
    let maxAbs = 0, maxDiff = 0, agree = 0;
    for (let i = 0; i < a.length; i++) {
      maxAbs = Math.max(maxAbs, Math.abs(a[i]!));
      maxDiff = Math.max(maxDiff, Math.abs(a[i]! - b[i]!));
    }
    const [topA, topB] = [argmaxRows(a, vocab), argmaxRows(b, vocab)];
    for (let s = 0; s < S; s++) if (topA[s] === topB[s]) agree++;
    const rel = maxDiff / (maxAbs || 1);
    const ok = int8 ? rel < 0.15 && agree >= S / 2 : rel < 1e-4 && agree === S;
    return { ok, detail: `largest logit difference ${rel.toExponential(1)} of the largest logit, the same top token at ${agree} of ${S} positions` };
  } finally {
    await Promise.all([plain.release(), fused.release()]);
  }
}
