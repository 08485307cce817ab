/**
 * System (POSIX) shared memory for Node. A POSIX shm object `/name` is the file `/dev/shm/name` on
 * Linux, which is what clients' `shm_open` creates. Each registered region is mapped into this
 * process once, at registration (as Triton does), through `shm-map.ts`: inputs become tensors that
 * are views of the client's pages and outputs are written straight into them, one memory copy where
 * positioned I/O cost a page-faulting fresh buffer per read (0.07 of memcpy on 64 MB). Where the
 * mapping cannot be had (koffi does not load) or is turned off (`TSI_SHM_IO=pread`, or the `io`
 * option), regions are open file handles read and written with pread/pwrite instead; the choice is
 * made once, on the first registration, and logged. Keys are checked so a client can name only an
 * object directly inside /dev/shm, never a path elsewhere.
 *
 * Ownership: an input view stays valid after its region is unregistered (the mapping goes only when
 * no view is reachable, see shm-map.ts), so a request in flight never touches unmapped memory. Like
 * Triton's, a mapping trusts the client not to shrink the object under it: each read and write first
 * checks the object's size, which refuses a shrunk region, though not one shrunk during the copy.
 */

import { closeSync, existsSync, fstatSync, openSync } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';
import { TsiError, retainBuffer, type Logger, type ShmHandle, type SystemShmProvider } from '../core/index.js';
import { mapShared, mmapBinding, type Mapping } from './shm-map.js';

export const SHM_DIR = '/dev/shm';

/** How regions are accessed: mapped into the process, or read and written at offsets. */
export type ShmIo = 'mmap' | 'pread';

export interface NodeShmOptions {
  log?: Logger;
  /** Forces a path; the default is `mmap`, or what the TSI_SHM_IO environment variable names. */
  io?: ShmIo;
}

export interface NodeShmProvider extends SystemShmProvider {
  /** The path in use, undefined until the first registration chooses it. */
  readonly io: ShmIo | undefined;
}

/** The file of a POSIX shm key (`/name` or `name`), refusing anything that is not a plain name. */
export function shmPath(key: string): string {
  const name = key.startsWith('/') ? key.slice(1) : key;
  if (name === '' || name === '.' || name === '..' || /[/\\\0]/.test(name)) {
    throw new TsiError('INVALID_ARG',
      `Unable to open shared memory region: '${key}': a key must be a single name such as '/my_region' (no further '/', '..', '\\\\' or NUL)`);
  }
  return `${SHM_DIR}/${name}`;
}

/** Undefined where POSIX shared memory is not reachable as files (macOS, Windows). */
export function nodeShmProvider(opts: NodeShmOptions = {}): NodeShmProvider | undefined {
  if (process.platform !== 'linux' || !existsSync(SHM_DIR)) return undefined;
  let io: ShmIo | undefined;
  let lib: Exclude<ReturnType<typeof mmapBinding>, string> | undefined;
  const choose = (): ShmIo => {
    if (io) return io;
    const asked = opts.io ?? process.env.TSI_SHM_IO;
    if (asked !== undefined && asked !== 'mmap' && asked !== 'pread') {
      throw new TsiError('INVALID_ARG', `TSI_SHM_IO must be 'mmap' or 'pread', not '${asked}'`);
    }
    const binding = asked === 'pread' ? 'TSI_SHM_IO=pread' : mmapBinding();
    if (typeof binding === 'string') {
      io = 'pread';
      opts.log?.info(`system shared memory: regions are read and written with pread/pwrite (${binding}), a copy into a new buffer per input`);
    } else {
      io = 'mmap';
      lib = binding;
      opts.log?.info('system shared memory: regions are mapped into the server (mmap through koffi); inputs are views of them');
    }
    return io;
  };
  return {
    get io() {
      return io;
    },
    async open(key, offset, byteSize, name) {
      const path = shmPath(key);
      const how = choose();
      if (how === 'pread') {
        let fh: FileHandle;
        try {
          fh = await open(path, 'r+');
        } catch (err) {
          throw openError(key, err);
        }
        try {
          checkSize(name, key, (await fh.stat()).size, offset, byteSize);
        } catch (err) {
          await fh.close();
          throw err;
        }
        return fileRegion(fh, key, offset);
      }
      let fd: number;
      try {
        fd = openSync(path, 'r+');
      } catch (err) {
        throw openError(key, err);
      }
      try {
        checkSize(name, key, fstatSync(fd).size, offset, byteSize);
      } catch (err) {
        closeSync(fd);
        throw err;
      }
      let mapping: Mapping;
      try {
        mapping = mapShared(lib!, fd, offset, byteSize); // owns fd from here, on failure too
      } catch (err) {
        throw new TsiError('INTERNAL', `Unable to map shared memory region: '${key}': ${(err as Error).message}`);
      }
      return mappedRegion(mapping, fd, key, offset);
    },
  };
}

/** INTERNAL, as Triton answers a failed shm_open. */
function openError(key: string, err: unknown): TsiError {
  return new TsiError('INTERNAL', `Unable to open shared memory region: '${key}': ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
}

/** Triton's text, then what was wrong. */
function checkSize(name: string, key: string, size: number, offset: number, byteSize: number): void {
  if (offset + byteSize > size) {
    throw new TsiError('INVALID_ARG',
      `failed to register shared memory region '${name}': invalid args (the object '${key}' is ${size} bytes, too small for offset ${offset} + byte_size ${byteSize})`);
  }
}

const unregistered = (key: string) => new TsiError('UNAVAILABLE', `shared memory region '${key}' was unregistered`);

/** A region mapped into the process: reads are views, writes one copy into the client's pages. */
function mappedRegion(m: Mapping, fd: number, key: string, base: number): ShmHandle {
  let closed = false;
  // Backends must not transfer (detach) tensors over these pages: onnx-backend hands its worker their
  // address (shm-map.ts's mappedAddress), others copy them.
  retainBuffer(new Uint8Array(m.buffer));
  const span = (offset: number, length: number): Uint8Array => {
    if (closed) throw unregistered(key);
    if (length === 0) return new Uint8Array(0);
    // Touching a page past the end of a shrunk object would fault the whole server.
    const size = fstatSync(fd).size;
    if (base + offset + length > size) {
      throw new TsiError('INVALID_ARG', `shared memory region '${key}' shrank to ${size} bytes, too small for offset ${base + offset} + ${length} bytes`);
    }
    return new Uint8Array(m.buffer, m.delta + offset, length);
  };
  return {
    async read(offset, length) {
      return span(offset, length);
    },
    async write(offset, data) {
      span(offset, data.byteLength).set(data);
    },
    async close() {
      if (closed) return;
      closed = true;
      m.release();
    },
  };
}

/** A region as an open file handle, read into fresh buffers and written at offsets. */
function fileRegion(fh: FileHandle, key: string, base: number): ShmHandle {
  let closed = false;
  const live = () => {
    if (closed) throw unregistered(key);
  };
  return {
    async read(offset, length) {
      live();
      // A fresh, unshared buffer: backends may transfer it to a worker thread.
      const out = new Uint8Array(length);
      let done = 0;
      while (done < length) {
        const { bytesRead } = await fh.read(out, done, length - done, base + offset + done);
        if (bytesRead === 0) throw new TsiError('INVALID_ARG', `shared memory region '${key}' ended before ${length} bytes could be read`);
        done += bytesRead;
      }
      return out;
    },
    async write(offset, data) {
      live();
      let done = 0;
      while (done < data.byteLength) {
        const { bytesWritten } = await fh.write(data, done, data.byteLength - done, base + offset + done);
        done += bytesWritten;
      }
    },
    async close() {
      if (closed) return;
      closed = true;
      await fh.close();
    },
  };
}
