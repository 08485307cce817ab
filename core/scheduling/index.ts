/**
 * How requests reach a model instance, Triton's schedulers: scheduler.ts is the contract and the
 * direct path, batcher.ts the dynamic batcher (preferred sizes, queue delay, priorities), queue.ts its
 * priority queues with timeouts, sequence.ts the sequence batcher (direct and oldest, implicit state),
 * rate-limiter.ts the resource-based rate limiter, schedulers.ts picks one for a model's config.
 */

export * from './scheduler.js';
export * from './schedulers.js';
