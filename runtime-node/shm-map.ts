/**
 * mmap for Node through koffi (a prebuilt FFI, no compiler at install): maps an open file descriptor
 * shared, read-write, and hands back an ArrayBuffer over the mapping itself, so system shared-memory
 * inputs become tensors without a copy and outputs are written straight into the client's pages.
 *
 * Lifetime is the hard part: a typed array over a mapping that has been unmapped faults the process
 * on its next access, and a request that read its inputs keeps those views until it is answered,
 * possibly after its region was unregistered. So `release()` does not unmap; it drops the mapping's
 * own reference, and the mapping goes (munmap, then close of the descriptor) only once the
 * ArrayBuffer has been garbage-collected, i.e. once no view of it can be reached from any JavaScript
 * at all. A view is never transferred to a worker: Node copies a foreign ArrayBuffer rather than
 * detach it, and the shm provider also marks it retained so backends do not try. A worker thread
 * can instead view the same pages by their address (`mappedAddress`, `viewAt`), as long as the
 * sending thread keeps its own view reachable until the worker is done with them.
 *
 * koffi loads lazily, on the first registration, and a failure to load it (an unsupported platform,
 * a missing optional package) is reported as a reason, so the caller falls back to positioned I/O.
 */

import { closeSync } from 'node:fs';
import { createRequire } from 'node:module';

type Koffi = typeof import('koffi');
type Fn = (...args: unknown[]) => unknown;

const PROT_READ = 0x1;
const PROT_WRITE = 0x2;
const MAP_SHARED = 0x1; // the same value on Linux, macOS and the BSDs
const MAP_FAILED = 0xffffffffffffffffn; // (void *)-1 on 64-bit
const MAP_FAILED_32 = 0xffffffffn;

interface Libc {
  koffi: Koffi;
  mmap: Fn;
  munmap: Fn;
  pageSize: number;
}

export interface Mapping {
  /** The mapped bytes from `delta` on are the file's from the requested offset on. */
  readonly buffer: ArrayBuffer;
  readonly delta: number;
  /** Gives up the mapping's own reference; it is unmapped once no view of `buffer` is reachable. */
  release(): void;
}

let libc: Libc | string | undefined;

/** The mmap binding, or why there is none (kept for the life of the process). */
export function mmapBinding(): Libc | string {
  if (libc !== undefined) return libc;
  try {
    const koffi = createRequire(import.meta.url)('koffi') as Koffi;
    // The process itself: libc's symbols, whichever libc (glibc, musl, libSystem) Node was linked with.
    const self = koffi.load(null);
    libc = {
      koffi,
      // `long` is off_t's width wherever this runs without large-file macros (LP64, and 32-bit glibc's mmap).
      mmap: self.func('void *mmap(void *addr, size_t length, int prot, int flags, int fd, long offset)'),
      munmap: self.func('int munmap(void *addr, size_t length)'),
      pageSize: Number(self.func('int getpagesize()')()),
    };
    // A view that cannot be created (a runtime forbidding external buffers) is a load failure too.
    koffi.view(null, 0);
  } catch (err) {
    libc = `koffi could not be loaded: ${err instanceof Error ? err.message.split('\n')[0] : String(err)}`;
  }
  return libc;
}

interface Held { munmap: Fn; ptr: unknown; size: number; fd: number }

// Weak both ways: an entry goes with its mapping's buffer, and never keeps it reachable.
const addresses = new WeakMap<ArrayBufferLike, bigint>();

/** Where a mapping's buffer starts in this process's memory; undefined for any other buffer. */
export function mappedAddress(buffer: ArrayBufferLike): bigint | undefined {
  return addresses.get(buffer);
}

/**
 * An ArrayBuffer over `byteLength` bytes at `address`: in a worker thread, a view of pages the main
 * thread mapped (`mappedAddress`), valid only while the main thread keeps its own view reachable.
 * Throws where koffi does not load in this thread.
 */
export function viewAt(address: bigint, byteLength: number): ArrayBuffer {
  const lib = mmapBinding();
  if (typeof lib === 'string') throw new Error(lib);
  return lib.koffi.view(lib.koffi.decode(BigUint64Array.of(address), 'void *'), byteLength);
}

// Registered with the buffer as target and only the pointer as held value: the buffer itself must
// not be reachable from here, or it would never be collected.
const unmapper = new FinalizationRegistry<Held>(({ munmap, ptr, size, fd }) => {
  munmap(ptr, size);
  closeSync(fd);
});

/**
 * Maps `[offset, offset + length)` of `fd` (which the mapping then owns and closes). Throws with the
 * errno's name where mmap fails; `fd` is closed in that case too.
 */
export function mapShared(lib: Libc, fd: number, offset: number, length: number): Mapping {
  const { koffi, mmap, munmap, pageSize } = lib;
  // mmap's offset must be page-aligned: map from the page the region starts in.
  const delta = offset % pageSize;
  const size = length + delta;
  if (size === 0) {
    closeSync(fd);
    return { buffer: new ArrayBuffer(0), delta: 0, release() {} };
  }
  const ptr = mmap(null, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, offset - delta);
  const addr = ptr === null ? 0n : koffi.address(ptr);
  if (addr === 0n || addr === MAP_FAILED || addr === MAP_FAILED_32) {
    const errno = koffi.errno();
    closeSync(fd);
    const name = Object.entries(koffi.os.errno).find(([, v]) => v === errno)?.[0] ?? `errno ${errno}`;
    throw new Error(`mmap failed: ${name}`);
  }
  let buffer: ArrayBuffer | undefined = koffi.view(ptr, size);
  unmapper.register(buffer, { munmap, ptr, size, fd });
  addresses.set(buffer, addr);
  return {
    get buffer(): ArrayBuffer {
      if (!buffer) throw new Error('mapping released');
      return buffer;
    },
    delta,
    release() {
      buffer = undefined;
    },
  };
}
