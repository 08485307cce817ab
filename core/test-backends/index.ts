/**
 * Triton's small test backends, built in so that repositories from Triton's documentation, examples and
 * qa suites (which name them as `backend: "identity"`, `backend: "square"` ...) load unchanged, in Node
 * and in the browser alike: they are pure TypeScript, one file each, written from what Triton's C++
 * backends do (their load-time texts are Triton's, which its tests look for).
 *
 * - identity: OUTPUT<i> = INPUT<i>, with delays and custom trace activities (identity.ts).
 * - repeat: decoupled, one response per element of IN after DELAY[i] ms (repeat.ts).
 * - square: decoupled, IN = n gives n responses, with CUSTOM_* delays, failures, empties and response statistics (square.ts).
 * - sequence: a sequence model's accumulator per batch slot (sequence.ts).
 * - dyna_sequence: a sequence model's accumulator per correlation id (dyna-sequence.ts).
 * - iterative_sequence: a countdown that reschedules its request until it reaches 0 (iterative-sequence.ts).
 * - distributed_addsub: a CPU instance that hands subtraction to a passive GPU instance (distributed-addsub.ts).
 */

import type { Backend } from '../backend.js';
import { distributedAddSubBackend } from './distributed-addsub.js';
import { dynaSequenceBackend } from './dyna-sequence.js';
import { identityBackend } from './identity.js';
import { iterativeSequenceBackend } from './iterative-sequence.js';
import { repeatBackend } from './repeat.js';
import { sequenceBackend } from './sequence.js';
import { squareBackend } from './square.js';

const TEST_BACKENDS: [string, () => Backend][] = [
  ['identity', identityBackend], ['repeat', repeatBackend], ['square', squareBackend], ['dyna_sequence', dynaSequenceBackend],
  ['iterative_sequence', iterativeSequenceBackend], ['distributed_addsub', distributedAddSubBackend], ['sequence', sequenceBackend],
];

/** Registers the test backends under Triton's names, unless a runtime registered its own. */
export function registerTestBackends(registry: { has(name: string): boolean; register(name: string, f: () => Backend): void }): void {
  for (const [name, make] of TEST_BACKENDS) if (!registry.has(name)) registry.register(name, make);
}
