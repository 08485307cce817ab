/**
 * What the built-in test backends share: sleeping, Triton's INVALID_ARG and shape texts, reading a
 * config parameter, and a loaded model whose instances keep no state of their own.
 */

import type { BackendInstance, BackendRequest, InstanceSpec } from '../backend.js';
import { TsiError } from '../errors.js';
import type { ModelConfig } from '../config/model-config.js';
import type { Tensor } from '../types.js';

export const sleep = (ms: number) => (ms > 0 ? new Promise<void>((r) => setTimeout(r, ms)) : Promise.resolve());
export const invalid = (msg: string) => new TsiError('INVALID_ARG', msg);
export const shapeText = (s: readonly number[]) => `[${s.join(',')}]`;
export const param = (cfg: ModelConfig, key: string) => cfg.parameters?.[key]?.string_value;
export const ioShape = (io: { dims?: number[]; reshape?: { shape?: number[] } }) => io.reshape?.shape ?? io.dims ?? [];

/** A loaded model whose CPU instances keep no state: each only runs `execute`. */
export function stateless(execute: (requests: BackendRequest[], spec: InstanceSpec) => Promise<void>) {
  return {
    createInstance: async (spec: InstanceSpec): Promise<BackendInstance> => ({
      spec, device: 'cpu', unload: async () => {}, execute: (requests: BackendRequest[]) => execute(requests, spec),
    }),
    unload: async () => {},
  };
}

/**
 * A loaded model whose requests are answered after `execute` returned, as Triton's decoupled test
 * backends answer from threads of their own: `answer` starts one request's answering and hands back
 * what `execute` must still await (a model that is not decoupled answers before execute returns, as
 * tsi's backends must); unloading waits for every answer still running.
 */
export function answeredLater(decoupled: boolean, execute: (requests: BackendRequest[], answer: (p: Promise<void>) => void) => Promise<void>) {
  const inflight = new Set<Promise<void>>();
  return {
    createInstance: async (spec: InstanceSpec): Promise<BackendInstance> => ({
      spec,
      device: 'cpu',
      unload: async () => {
        await Promise.all(inflight);
      },
      execute: async (requests: BackendRequest[]) => {
        const awaited: Promise<void>[] = [];
        await execute(requests, (p) => {
          inflight.add(p);
          void p.finally(() => inflight.delete(p));
          if (!decoupled) awaited.push(p);
        });
        await Promise.all(awaited);
      },
    }),
    unload: async () => {},
  };
}

/** Copies a tensor's data, so the output never aliases a buffer the request owns. */
export function copyData(t: Tensor): Tensor['data'] {
  const d = t.data;
  return Array.isArray(d) ? d.map((e) => e.slice()) : d.slice();
}
