/**
 * Whether a model's executions ran at the same time, by the server's own clocks rather than a
 * client's: with traces on for the model, the traced COMPUTE_START..COMPUTE_END of its requests must
 * span less time than the model's runs took where they ran (`compute_infer`, which the ONNX,
 * JavaScript and Python backends time in their worker or process). One after the other they cannot:
 * the span then holds each run whole. A loaded machine stretches both sides alike.
 */

import { readFileSync } from 'node:fs';
import { expect } from 'vitest';
import { getJson, postJson } from './server.js';

type TraceRecord = { id: number; timestamps?: { name: string; ns: number }[] };

/**
 * Turns traces on for `model` for `count` requests, runs `send` (which sends exactly those), and
 * expects their computations to have overlapped. The server must have been started with
 * `trace: { file: traceFile }` and have written no trace file before.
 */
export async function expectComputeOverlap(url: string, traceFile: string, model: string, count: number, send: () => Promise<unknown>): Promise<void> {
  const setting = await postJson(`${url}/v2/models/${model}/trace/setting`, {
    trace_level: ['TIMESTAMPS'], trace_rate: '1', trace_count: String(count), log_frequency: String(count),
  });
  expect(setting.status, JSON.stringify(setting.body)).toBe(200);
  const inferNs = async () => Number((await getJson(`${url}/v2/models/${model}/stats`)).body.model_stats[0].inference_stats.compute_infer.ns);
  const before = await inferNs();
  await send();
  const ranNs = (await inferNs()) - before;
  // The file appears once all `count` traces are in; it may still be being written when first seen.
  const read = (): TraceRecord[] | undefined => {
    try {
      return JSON.parse(readFileSync(`${traceFile}.0`, 'utf8')) as TraceRecord[];
    } catch {
      return undefined;
    }
  };
  await expect.poll(read, { timeout: 10_000 }).toBeDefined();
  const spans = read()!.filter((r) => r.timestamps).map((r) => {
    const at = (name: string) => r.timestamps!.find((x) => x.name === name)!.ns;
    return [at('COMPUTE_START'), at('COMPUTE_END')] as const;
  });
  expect(spans).toHaveLength(count);
  const all = Math.max(...spans.map((x) => x[1])) - Math.min(...spans.map((x) => x[0]));
  expect(all, `${model}: all computations within ${(all / 1e6).toFixed(0)} ms; their model runs took ${(ranNs / 1e6).toFixed(0)} ms`).toBeLessThan(ranNs);
}
