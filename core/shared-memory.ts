/**
 * The shared-memory extension's bookkeeping, platform-neutral: the registry of client-registered system
 * shared-memory regions (name → key, offset, byte size), reading inputs out of them and writing outputs
 * into them for any transport, and Triton's answers for CUDA regions on a server without CUDA. How a
 * region is actually opened is a runtime's business (`SystemShmProvider`: POSIX shm files in Node; none
 * in the browser), so core never touches a file. Registration is off unless the operator allows it
 * (tritonserver's --allow-client-shm, default false), because a registered region lets a network client
 * make the server read and write host memory objects.
 *
 * Concurrency: regions are registered and unregistered between requests; a request reads its inputs
 * before it is queued and writes its outputs after its response, so a region unregistered meanwhile
 * fails that request with a clear error rather than touching a closed handle.
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
   * Opens the shared-memory object `key` and checks that `[offset, offset + byteSize)` lies inside it.
   * Throws a TsiError naming the key on any failure.
   */
  open(key: string, offset: number, byteSize: number): Promise<ShmHandle>;
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
  'client shared memory is disabled on this server; start it with --allow-client-shm=true to register regions';

export class SharedMemoryManager {
  private readonly regions = new Map<string, Region>();

  constructor(private readonly opts: SharedMemoryOptions) {}

  get enabled(): boolean {
    return this.opts.allowClientShm;
  }

  async registerSystem(name: string, key: string, offset: number, size: number): Promise<void> {
    if (!this.opts.allowClientShm) throw new TsiError('UNSUPPORTED', SHM_DISABLED_MESSAGE);
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
    const handle = await this.opts.provider.open(key, offset, size);
    // A concurrent registration of the same name may have won while the file was being opened.
    if (this.regions.has(name)) {
      await handle.close();
      throw new TsiError('ALREADY_EXISTS', `shared memory region '${name}' already in manager`);
    }
    this.regions.set(name, { name, key, offset, byte_size: size, handle });
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

  /** Unregisters one region (a name not registered is not an error, as in Triton) or all of them. */
  async unregisterSystem(name?: string): Promise<void> {
    const names = name ? [name] : [...this.regions.keys()];
    for (const n of names) {
      const r = this.regions.get(n);
      if (!r) continue;
      this.regions.delete(n);
      await r.handle.close();
    }
  }

  registerCuda(name: string): never {
    throw new TsiError('UNSUPPORTED', `failed to register CUDA shared memory region '${name}': GPUs not supported`);
  }

  cudaStatus(name?: string): { name: string; device_id: number; byte_size: number }[] {
    if (name) throw new TsiError('NOT_FOUND', `Unable to find cuda shared memory region: '${name}'`);
    return [];
  }

  private region(ref: ShmRef, what: string): Region {
    const r = this.regions.get(ref.region);
    if (!r) throw new TsiError('INVALID_ARG', `Unable to find shared memory region: '${ref.region}' (${what})`);
    if (!Number.isSafeInteger(ref.offset) || ref.offset < 0 || !Number.isSafeInteger(ref.byteSize) || ref.byteSize < 0
      || ref.offset + ref.byteSize > r.byte_size) {
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

  async close(): Promise<void> {
    await this.unregisterSystem();
  }
}

function status(r: Region): SystemRegionStatus {
  return { name: r.name, key: r.key, offset: r.offset, byte_size: r.byte_size };
}
