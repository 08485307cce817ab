/**
 * Triton's iterative_sequence test backend (server's src/test/iterative_sequence; L0_iterative_sequence):
 * a decoupled model with INPUT and OUTPUT of INT32 [1], run under `sequence_batching { iterative_sequence:
 * true }`. The first run of a sequence takes INPUT as a countdown n; each run counts it down by one and
 * sends the value left as OUTPUT, so a request gets n responses, n-1 ... 0. While the value is above 0
 * the request is released for another run (TRITONSERVER_REQUEST_RELEASE_RESCHEDULE: `reschedule`) after
 * 500 ms, which the sequence batcher queues again in the sequence's slot; at 0 the response is final.
 * The countdown is per instance and correlation id (the batcher assigns an id to a request without one).
 * Under a scheduler that cannot take a request back, the request ends with Triton's refusal.
 */

import type { Backend, BackendInstance, InstanceSpec } from '../backend.js';
import { invalid, sleep } from './common.js';

/** How long a run waits before releasing its request, as Triton's backend sleeps. */
const RELEASE_DELAY_MS = 500;

export function iterativeSequenceBackend(): Backend {
  return {
    name: 'iterative_sequence',
    async loadModel(ctx) {
      const batching = (ctx.config.max_batch_size ?? 0) > 0;
      return {
        createInstance: async (spec: InstanceSpec): Promise<BackendInstance> => {
          if (spec.kind !== 'KIND_CPU') throw invalid("'iterative_sequence' backend only supports CPU instances");
          // What is left of each sequence's countdown, by correlation id.
          const remainders = new Map<string, number>();
          return {
            spec,
            device: 'cpu',
            unload: async () => {},
            execute: async (requests) => {
              for (const r of requests) {
                const id = r.sequence?.id ?? 0n;
                const key = `${typeof id}:${id}`;
                const init = (r.inputs.get('INPUT')!.data as Int32Array)[0]!;
                const value = (remainders.get(key) ?? init) - 1;
                if (value <= 0) remainders.delete(key);
                else remainders.set(key, value);
                const output = { name: 'OUTPUT', datatype: 'INT32' as const, shape: batching ? [1, 1] : [1], data: Int32Array.of(value) };
                await sleep(RELEASE_DELAY_MS);
                if (value > 0) r.reschedule?.();
                r.send({ outputs: [output] }, value <= 0);
              }
            },
          };
        },
        unload: async () => {},
      };
    },
  };
}
