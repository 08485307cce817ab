/**
 * The shared-memory extension's bookkeeping, platform-neutral: the registry of client-registered system
 * shared-memory regions (name → key, offset, byte size), reading inputs out of them and writing outputs
 * into them for any transport, and Triton's answers for CUDA regions on a server without CUDA. How a
 * region is actually opened is a runtime's business (`SystemShmProvider`: POSIX shm files in Node; none
 * in the browser), so core never touches a file. Registration is off unless the operator allows it
 * (tritonserver's --allow-client-shm, default false), because a registered region lets a network client
 * make the server read and write host memory objects.
 *
 * Concurrency: a request holds the regions it names from before its inputs are read until its last
 * output is written; a region unregistered meanwhile stays registered (and listed) until then, as in
 * Triton, so the request never touches a closed handle.
 */

import { TsiError } from './errors.js';
import { byteSize, elementCount, elementSize, fromBytes, toBytes } from './tensor.js';
import type { InferRequest, InferResponse } from './types.js';

/** An open region: `offset` arguments are relative to the registered region's start. */
export interface ShmHandle {
  read(offset: number, length: number): Promise<Uint8Array>;
  write(offset: number, data: Uint8Array): Promise<void>;
  close(): Promise<void>;
}

export interface SystemShmProvider {
  /**
   * Opens the shared-memory object `key` and checks that `[offset, offset + byteSize)` lies inside it
   * (else Triton's INVALID_ARG "failed to register shared memory region '<name>': invalid args").
   * Throws a TsiError naming the key on any other failure (INTERNAL where the object cannot be opened).
   */
  open(key: string, offset: number, byteSize: number, name: string): Promise<ShmHandle>;
}

export interface ShmRef {
  region: string;
  offset: number;
  byteSize: number;
}

export interface SystemRegionStatus {
  name: string;
  key: string;
  offset: number;
  byte_size: number;
}

interface Region extends SystemRegionStatus {
  handle: ShmHandle;
  /** Requests in flight that read or write this region. */
  users: number;
  /** Unregistered while in use: it goes when its last user is done, as in Triton. */
  awaitingUnregister: boolean;
}

export interface SharedMemoryOptions {
  /** --allow-client-shm: registration is refused unless true. */
  allowClientShm: boolean;
  /** How this runtime opens system shared memory; absent where it has none (browser, Windows). */
  provider?: SystemShmProvider;
  /** Why there is no provider, for the error message. */
  unavailableReason?: string;
}

export const SHM_DISABLED_MESSAGE =
  "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable.";

/** Keys of this prefix name the regions Triton's Python backend makes for itself: clients may not take them. */
export const RESERVED_SHM_KEY_PREFIX = 'triton_python_backend_shm_region_';

const UINT64_MAX = (1n << 64n) - 1n;

/** Triton's check of a key before it is opened: not all slashes, not the reserved prefix. */
function checkKey(name: string, key: string): void {
  const bare = key.replace(/^\/+/, '');
  if (bare === '' && key !== '') {
    throw new TsiError('INVALID_ARG', `cannot register shared memory region '${name}' - invalid shm key '${key}'`);
  }
  if (bare.startsWith(RESERVED_SHM_KEY_PREFIX)) {
    throw new TsiError('INVALID_ARG',
      `cannot register shared memory region '${name}' with key '${key}' as the key contains the reserved prefix '${RESERVED_SHM_KEY_PREFIX}'`);
  }
}

export class SharedMemoryManager {
  private readonly regions = new Map<string, Region>();

  constructor(private readonly opts: SharedMemoryOptions) {}

  get enabled(): boolean {
    return this.opts.allowClientShm;
  }

  async registerSystem(name: string, key: string, offset: number, size: number): Promise<void> {
    if (!this.opts.allowClientShm) throw new TsiError('UNSUPPORTED', SHM_DISABLED_MESSAGE);
    checkKey(name, key);
    if (!this.opts.provider) {
      throw new TsiError('UNSUPPORTED', `system shared memory is not available: ${this.opts.unavailableReason ?? 'this runtime has no shared memory'}`);
    }
    if (!name) throw new TsiError('INVALID_ARG', 'shared memory region name must not be empty');
    for (const [what, v] of [['offset', offset], ['byte_size', size]] as const) {
      if (!Number.isSafeInteger(v) || v < 0) {
        throw new TsiError('INVALID_ARG', `invalid ${what} ${String(v)} for shared memory region '${name}': expected a non-negative integer`);
      }
    }
    if (this.regions.has(name)) throw new TsiError('ALREADY_EXISTS', `shared memory region '${name}' already in manager`);
    const handle = await this.opts.provider.open(key, offset, size, name);
    // A concurrent registration of the same name may have won while the file was being opened.
    if (this.regions.has(name)) {
      await handle.close();
      throw new TsiError('ALREADY_EXISTS', `shared memory region '${name}' already in manager`);
    }
    this.regions.set(name, { name, key, offset, byte_size: size, handle, users: 0, awaitingUnregister: false });
  }

  /** All regions, or the named one (NOT_FOUND if it is not registered). */
  systemStatus(name?: string): SystemRegionStatus[] {
    if (name) {
      const r = this.regions.get(name);
      if (!r) throw new TsiError('NOT_FOUND', `Unable to find system shared memory region: '${name}'`);
      return [status(r)];
    }
    return [...this.regions.values()].map(status);
  }

  /**
   * Unregisters one region (a name not registered is not an error, as in Triton) or all of them. A
   * region a request in flight is using stays registered, and listed, until that request is done.
   */
  async unregisterSystem(name?: string): Promise<void> {
    if (!this.opts.allowClientShm) throw new TsiError('UNSUPPORTED', SHM_DISABLED_MESSAGE);
    await this.drop(name ? [name] : [...this.regions.keys()]);
  }

  private async drop(names: Iterable<string>): Promise<void> {
    for (const n of names) {
      const r = this.regions.get(n);
      if (!r) continue;
      if (r.users > 0) {
        r.awaitingUnregister = true;
        continue;
      }
      this.regions.delete(n);
      await r.handle.close();
    }
  }

  /**
   * Marks the regions a request's inputs and outputs name as in use until the returned release is
   * called (once, when the request's last response has been written); undefined if it names none.
   * Names not registered are left to the reads and writes to refuse.
   */
  hold(inputs: readonly ShmRef[], outputs: ReadonlyMap<string, ShmRef>): (() => Promise<void>) | undefined {
    // Most requests name no region: nothing to allocate, nor to wait for, on their path.
    if (inputs.length === 0 && outputs.size === 0) return undefined;
    const names = new Set([...inputs, ...outputs.values()].map((r) => r.region));
    const held = [...names].map((n) => this.regions.get(n)).filter((r): r is Region => r !== undefined);
    for (const r of held) r.users++;
    return async () => {
      for (const r of held) r.users--;
      await this.drop(held.filter((r) => r.users === 0 && r.awaitingUnregister && this.regions.get(r.name) === r).map((r) => r.name));
    };
  }

  registerCuda(name: string): never {
    if (!this.opts.allowClientShm) throw new TsiError('UNSUPPORTED', SHM_DISABLED_MESSAGE);
    throw new TsiError('UNSUPPORTED', `failed to register CUDA shared memory region '${name}': GPUs not supported`);
  }

  /** There are no CUDA regions to unregister; refused, as in Triton, when client shared memory is off. */
  unregisterCuda(): void {
    if (!this.opts.allowClientShm) throw new TsiError('UNSUPPORTED', SHM_DISABLED_MESSAGE);
  }

  cudaStatus(name?: string): { name: string; device_id: number; byte_size: number }[] {
    if (name) throw new TsiError('NOT_FOUND', `Unable to find cuda shared memory region: '${name}'`);
    return [];
  }

  private region(ref: ShmRef, what: string): Region {
    const r = this.regions.get(ref.region);
    if (!r) throw new TsiError('INVALID_ARG', `Unable to find shared memory region: '${ref.region}' (${what})`);
    // Triton's three checks, in its order and with its texts.
    if (!(ref.offset >= 0 && ref.offset < r.byte_size)) {
      throw new TsiError('INVALID_ARG',
        `Invalid offset for shared memory region: '${ref.region}' (${what}): offset ${ref.offset} is not inside the region's ${r.byte_size} bytes`);
    }
    const size = asBig(ref.byteSize);
    if (size !== undefined && size >= 0n && size > UINT64_MAX - asBig(ref.offset)!) {
      throw new TsiError('INVALID_ARG',
        `Integer overflow detected: byte_size (${size}) + offset (${ref.offset}) exceeds maximum value (${UINT64_MAX}) for region '${ref.region}'`);
    }
    if (!Number.isSafeInteger(ref.offset) || !Number.isSafeInteger(ref.byteSize) || ref.offset + ref.byteSize > r.byte_size) {
      throw new TsiError('INVALID_ARG',
        `Invalid offset + byte size for shared memory region: '${ref.region}' (${what}): offset ${ref.offset} + byte size ${ref.byteSize} exceeds the region's ${r.byte_size} bytes`);
    }
    return r;
  }

  /** Fills the data of the inputs that name a region (the codecs leave those empty). */
  async readInputs(request: InferRequest, refs: readonly (ShmRef & { index: number })[]): Promise<void> {
    for (const ref of refs) {
      const input = request.inputs[ref.index]!;
      const r = this.region(ref, `input '${input.name}'`);
      const bytes = await r.handle.read(ref.offset, ref.byteSize);
      if (input.datatype !== 'BYTES') {
        const expected = elementCount(input.shape) * elementSize(input.datatype);
        if (bytes.byteLength !== expected) {
          throw new TsiError('INVALID_ARG',
            `input byte size mismatch for input '${input.name}' for model '${request.model_name}'. Expected ${expected}, got ${bytes.byteLength}`);
        }
      }
      input.data = fromBytes(input.datatype, bytes);
    }
  }

  /**
   * Checks, before inference, that every output region is registered and its range valid, so a bad
   * request fails before it costs a model execution.
   */
  checkOutputs(refs: ReadonlyMap<string, ShmRef>): void {
    for (const [name, ref] of refs) this.region(ref, `output '${name}'`);
  }

  /** Writes the outputs that asked for a region; returns their names (left out of the response body). */
  async writeOutputs(response: InferResponse, refs: ReadonlyMap<string, ShmRef>): Promise<Set<string>> {
    const written = new Set<string>();
    for (const out of response.outputs) {
      const ref = refs.get(out.name);
      if (!ref) continue;
      const r = this.region(ref, `output '${out.name}'`);
      const size = byteSize(out.data);
      if (size > ref.byteSize) {
        throw new TsiError('INTERNAL',
          `shared memory size specified with the request for output '${out.name}' (${ref.byteSize} bytes) should be at least ${size} bytes to hold the results`);
      }
      await r.handle.write(ref.offset, toBytes(out.data));
      written.add(out.name);
    }
    return written;
  }

  /** At shutdown, when no request is left: every region goes, held or not. */
  async close(): Promise<void> {
    const all = [...this.regions.values()];
    this.regions.clear();
    for (const r of all) await r.handle.close();
  }
}

/** A size or offset as the codecs give it (a number, or a bigint past 2^53), exactly; undefined if not an integer. */
function asBig(v: number | bigint): bigint | undefined {
  return typeof v === 'bigint' ? v : Number.isInteger(v) ? BigInt(v) : undefined;
}

function status(r: Region): SystemRegionStatus {
  return { name: r.name, key: r.key, offset: r.offset, byte_size: r.byte_size };
}
