/**
 * The two shared-memory files between tsi and one Python stub process, through which every tensor
 * crosses (the control channel only names offsets). Both are created here under /dev/shm (the temp
 * folder where there is none), unlinked at once, and handed to the child as inherited fds 4 and 5,
 * so nothing is left behind however tsi ends. tsi reads and writes them with positioned I/O (one
 * memcpy into or out of the page cache) rather than mapping them as it maps clients' system
 * shared-memory regions (runtime-node/shm-map.ts, through koffi); Python maps them, and views
 * inputs in place as numpy arrays.
 *
 * - InputRegion (fd 4), written by tsi: execute inputs and BLS results. Blocks are taken first-fit,
 *   64-byte aligned, and given back when the request they belong to has its final response (or when
 *   Python says it copied a BLS result out). Out of room, tsi grows the file; Python maps it again
 *   when it meets an offset beyond its mapping.
 * - OutputRing (fd 5), written by Python: outputs and BLS inputs. Bytes 0..8 hold the sequence
 *   number of the last message tsi has read (little-endian u64); Python reuses space up to there,
 *   and grows the file when it runs out. Data starts at byte 64.
 *
 * A tensor is described on the channel as `[name, datatype, shape, offset, byteSize]` (plus, from
 * Python, the region: 0 the ring, 1 the input region, where an output that is a view of a live
 * request's inputs stays put). BYTES tensors use Triton's layout: a 4-byte length before each element.
 */

import { closeSync, existsSync, fstatSync, ftruncateSync, openSync, readSync, unlinkSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { TsiError, elementCount, encodeBytesElements, fromBytes, type DataType, type NumericArray, type Tensor } from '../../core/index.js';

export const ALIGN = 64;
export const RING_HEADER = 64;
/** Below this many bytes a request's inputs are gathered and written with one call. */
const GATHER_BYTES = 256 * 1024;

export type TensorDesc = [name: string, datatype: string, shape: number[], offset: number, byteSize: number];
export type OutDesc = [name: string, datatype: string, shape: number[], offset: number, byteSize: number, region: 0 | 1];

const align = (n: number) => (n + ALIGN - 1) & ~(ALIGN - 1);

/** A new shared-memory file of `size` bytes, already unlinked: only the returned fd reaches it. */
export function createShmFile(size: number, tag: string): number {
  const dir = existsSync('/dev/shm') ? '/dev/shm' : tmpdir();
  const path = join(dir, `tsi-python-${process.pid}-${tag}-${randomBytes(6).toString('hex')}`);
  const fd = openSync(path, 'wx+', 0o600);
  unlinkSync(path);
  try {
    ftruncateSync(fd, size);
  } catch (err) {
    closeSync(fd);
    throw new TsiError('UNAVAILABLE', `cannot size the python backend's shared memory in ${dir} to ${size} bytes: ${(err as Error).message}`);
  }
  return fd;
}

function bytesOf(t: Tensor): Uint8Array {
  if (Array.isArray(t.data)) return encodeBytesElements(t.data as Uint8Array[]);
  const d = t.data as NumericArray;
  return new Uint8Array(d.buffer, d.byteOffset, d.byteLength);
}

function writeAll(fd: number, data: Uint8Array, offset: number): void {
  let done = 0;
  while (done < data.byteLength) done += writeSync(fd, data, done, data.byteLength - done, offset + done);
}

/**
 * Triton's text when its pool cannot grow (python backend shm_manager.cc), which clients and tests
 * match: a tmpfs without room for the pages (ENOSPC on write, as /dev/shm's size is met only when
 * pages are touched) or a file that cannot be sized. Any other error passes through.
 */
function poolFull(err: unknown, size: number): unknown {
  const code = (err as NodeJS.ErrnoException).code;
  if (code !== 'ENOSPC' && code !== 'EFBIG' && code !== 'EDQUOT') return err;
  return new TsiError('UNAVAILABLE', `Failed to increase the shared memory pool size to ${size} bytes. If you are running tsi inside docker, `
    + `use '--shm-size' flag to control the shared memory region size. Error: ${(err as Error).message}`);
}

/** Region written by tsi. */
export class InputRegion {
  size: number;
  /** Free spans, sorted by offset, never adjacent (merged on free). */
  private readonly free: { off: number; size: number }[];
  private readonly used = new Map<number, number>();
  private staging = Buffer.allocUnsafe(64 * 1024);

  constructor(readonly fd: number, initial: number, private readonly growth: number) {
    this.size = initial;
    this.free = [{ off: 0, size: initial }];
  }

  alloc(n: number): number {
    const need = Math.max(ALIGN, align(n));
    for (let i = 0; i < this.free.length; i++) {
      const f = this.free[i]!;
      if (f.size < need) continue;
      const off = f.off;
      if (f.size === need) this.free.splice(i, 1);
      else {
        f.off += need;
        f.size -= need;
      }
      this.used.set(off, need);
      return off;
    }
    this.grow(need);
    return this.alloc(n);
  }

  private grow(need: number): void {
    const last = this.free[this.free.length - 1];
    const tailFree = last && last.off + last.size === this.size ? last.size : 0;
    const next = this.size + Math.max(this.growth, align(need - tailFree));
    try {
      ftruncateSync(this.fd, next);
    } catch (err) {
      throw poolFull(err, next);
    }
    this.release(this.size, next - this.size);
    this.size = next;
  }

  /**
   * Back to `size` after a write that grew the file and then failed: a full tmpfs (ENOSPC) keeps the
   * pages the write did fill, and until the file shrinks every other model's shared memory would
   * meet a full /dev/shm too. Only the failed block lay past `size`, and it is free again; Python has
   * mapped no more than `size`, as the block was never named to it.
   */
  private shrink(size: number): void {
    const last = this.free[this.free.length - 1];
    if (size >= this.size || !last || last.off > size || last.off + last.size !== this.size) return;
    try {
      ftruncateSync(this.fd, size);
    } catch {
      return;
    }
    last.size = size - last.off;
    if (last.size === 0) this.free.pop();
    this.size = size;
  }

  /** Gives back the block at `off`; unknown offsets are ignored (a block is given back once). */
  freeBlock(off: number): void {
    const size = this.used.get(off);
    if (size === undefined) return;
    this.used.delete(off);
    this.release(off, size);
  }

  private release(off: number, size: number): void {
    const free = this.free;
    let i = 0;
    while (i < free.length && free[i]!.off < off) i++;
    const prev = i > 0 ? free[i - 1] : undefined;
    const next = free[i];
    if (prev && prev.off + prev.size === off) {
      prev.size += size;
      if (next && off + size === next.off) {
        prev.size += next.size;
        free.splice(i, 1);
      }
    } else if (next && off + size === next.off) {
      next.off = off;
      next.size += size;
    } else free.splice(i, 0, { off, size });
  }

  get usedBytes(): number {
    let n = 0;
    for (const s of this.used.values()) n += s;
    return n;
  }

  /**
   * Writes `tensors` into one new block; returns the block and each tensor's description. Small
   * sets are gathered into one buffer and written with one call; big tensors are written in place.
   */
  writeTensors(tensors: readonly Tensor[]): { block: [number, number]; descs: TensorDesc[] } {
    const parts = tensors.map(bytesOf);
    let total = 0;
    const rel: number[] = [];
    for (const p of parts) {
      rel.push(total);
      total += align(p.byteLength);
    }
    const sizeBefore = this.size;
    const base = this.alloc(total);
    try {
      if (total <= GATHER_BYTES) {
        if (this.staging.byteLength < total) this.staging = Buffer.allocUnsafe(align(total * 2));
        for (let i = 0; i < parts.length; i++) this.staging.set(parts[i]!, rel[i]);
        if (total > 0) writeAll(this.fd, this.staging.subarray(0, total), base);
      } else {
        for (let i = 0; i < parts.length; i++) writeAll(this.fd, parts[i]!, base + rel[i]!);
      }
    } catch (err) {
      this.freeBlock(base);
      const full = poolFull(err, this.size);
      this.shrink(sizeBefore);
      throw full;
    }
    const descs = tensors.map((t, i): TensorDesc => [t.name, t.datatype, t.shape, base + rel[i]!, parts[i]!.byteLength]);
    return { block: [base, base + Math.max(ALIGN, total)], descs };
  }
}

/** Region written by Python. */
export class OutputRing {
  private consumed = 0;
  private written = 0;
  private readonly header = Buffer.alloc(8);

  constructor(readonly fd: number, private readonly input: InputRegion) {}

  /** The tensors of one message, read with one call per region. */
  readTensors(descs: readonly OutDesc[]): Tensor[] {
    let lo = Infinity;
    let hi = 0;
    for (const d of descs) {
      if (d[5] === 0 && d[4] > 0) {
        lo = Math.min(lo, d[3]);
        hi = Math.max(hi, d[3] + d[4]);
      }
    }
    const ring = hi > 0 ? this.read(this.fd, lo, hi - lo) : undefined;
    return descs.map(([name, datatype, shape, off, n, region]) => {
      const dt = datatype as DataType;
      const bytes = n === 0 ? new Uint8Array(0) : region === 0 ? ring!.subarray(off - lo, off - lo + n) : this.read(this.input.fd, off, n);
      return { name, datatype: dt, shape, data: fromBytes(dt, bytes, dt === 'BYTES' ? elementCount(shape) : undefined) };
    });
  }

  private read(fd: number, off: number, n: number): Uint8Array {
    // Not zero-filled (every byte is read over) and never a slice of Node's shared pool, so tensors
    // made from it own their memory.
    const out = new Uint8Array(Buffer.allocUnsafeSlow(n).buffer, 0, n);
    let done = 0;
    while (done < n) {
      const got = readSync(fd, out, done, n - done, off + done);
      if (got === 0) {
        throw new TsiError('INTERNAL', `python backend: shared memory ended at ${off + done} (${fstatSync(fd).size} bytes) before ${off + n}`);
      }
      done += got;
    }
    return out;
  }

  /** Notes that the message with ring sequence `seq` has been read (written out by `flush`). */
  consume(seq: number): void {
    if (seq > this.consumed) this.consumed = seq;
  }

  /** Tells Python how far it may reuse the ring: once per batch of messages, not per message. */
  flush(): void {
    if (this.consumed === this.written) return;
    this.header.writeBigUInt64LE(BigInt(this.consumed), 0);
    writeSync(this.fd, this.header, 0, 8, 0);
    this.written = this.consumed;
  }
}
