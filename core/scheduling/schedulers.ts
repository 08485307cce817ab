/**
 * Picks a model version's scheduler from its config, as Triton's SetConfiguredScheduler does:
 * sequence_batching ⇒ the sequence batcher; dynamic_batching ⇒ the dynamic batcher with its queue
 * policies; neither ⇒ the default scheduler (the dynamic batcher with batching and queue policies off,
 * Triton's own construction).
 */

import { DynamicBatchScheduler } from './batcher.js';
import type { Scheduler, SchedulerContext } from './scheduler.js';
import { SequenceBatcher } from './sequence.js';

export function createScheduler(ctx: SchedulerContext): Scheduler {
  if (ctx.config.sequence_batching) return new SequenceBatcher(ctx);
  if (ctx.config.dynamic_batching) return new DynamicBatchScheduler(ctx, { batching: true });
  return new DynamicBatchScheduler(ctx, { batching: false });
}
