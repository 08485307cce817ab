/**
 * PyTorch on the same card, beside tsi in the GPU benches (bench/llm-gpu.ts, bench/gpu.ts): where
 * `python3 -c "import torch, transformers"` works and CUDA is visible (the lent GPU machines have both,
 * no Node packages needed), bench/torch_peer.py measures transformers' `generate` on a GPT-2 of the
 * bench decoder's shape, or torchvision's ResNet-18 (bench/conv-model.ts's shape) or ResNet-50, eager in fp32 and fp16. Elsewhere the peer is
 * absent and the benches say why.
 */

import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { DecoderSpec } from '../scripts/llm-model.js';

const SCRIPT = join(dirname(fileURLToPath(import.meta.url)), 'torch_peer.py');

/** Why PyTorch on CUDA cannot be the peer here, or undefined when it can. */
export function torchMissing(): string | undefined {
  const r = spawnSync('python3', ['-c', 'import torch, transformers; assert torch.cuda.is_available(), "CUDA not visible to torch"; print(torch.__version__, torch.cuda.get_device_name(0))'], { encoding: 'utf8', timeout: 120_000 });
  if (r.status === 0) return undefined;
  return (r.stderr || r.error?.message || 'python3 failed').trim().split('\n').pop();
}

/** PyTorch's version and device, for the table's caption. */
export function torchLabel(): string {
  const r = spawnSync('python3', ['-c', 'import torch, transformers; print(f"torch {torch.__version__}, transformers {transformers.__version__} on {torch.cuda.get_device_name(0)}")'], { encoding: 'utf8' });
  return r.stdout.trim();
}

type Row = { what: string; dtype: 'float32' | 'float16'; streams?: number; batch?: number; tokens_per_s?: number; images_per_s?: number };

function run(args: string[]): Row[] {
  const r = spawnSync('python3', [SCRIPT, ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], timeout: 900_000 });
  if (r.status !== 0) throw new Error(`bench/torch_peer.py ${args.join(' ')} failed (status ${r.status})`);
  return r.stdout.trim().split('\n').filter(Boolean).map((l) => JSON.parse(l) as Row);
}

/** transformers `generate` tokens/s per stream count, fp32 and fp16 (a batch of `streams` prompts of `prompt` tokens). */
export function torchLlm(spec: DecoderSpec, streams: number[], tokens: number, prompt = 40): Map<number, { fp32: number; fp16: number }> {
  const rows = run(['llm', `--streams=${streams.join(',')}`, `--tokens=${tokens}`, `--prompt=${prompt}`, `--vocab=${spec.vocab}`, `--context=${spec.context}`,
    `--d=${spec.dModel}`, `--layers=${spec.layers}`, `--heads=${spec.heads}`, `--ffn=${spec.ffn}`]);
  const out = new Map<number, { fp32: number; fp16: number }>();
  for (const r of rows) {
    const e = out.get(r.streams!) ?? { fp32: 0, fp16: 0 };
    e[r.dtype === 'float16' ? 'fp16' : 'fp32'] = r.tokens_per_s!;
    out.set(r.streams!, e);
  }
  return out;
}

/** torchvision ResNet-18 (or -50) eager images/s per batch size at `size` pixels, fp32 and fp16. */
export function torchConv(batches: number[], size: number, arch: 'resnet18' | 'resnet50' = 'resnet18'): Map<number, { fp32: number; fp16: number }> {
  const out = new Map<number, { fp32: number; fp16: number }>();
  for (const r of run(['conv', `--batches=${batches.join(',')}`, `--size=${size}`, `--arch=${arch}`])) {
    const e = out.get(r.batch!) ?? { fp32: 0, fp16: 0 };
    e[r.dtype === 'float16' ? 'fp16' : 'fp32'] = r.images_per_s!;
    out.set(r.batch!, e);
  }
  return out;
}
