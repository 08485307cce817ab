/**
 * System (POSIX) shared memory for Node. A POSIX shm object `/name` is the file `/dev/shm/name` on
 * Linux, which is what clients' `shm_open` creates; Node cannot `mmap`, so a region is an open file
 * handle read and written at offsets with positioned I/O. On tmpfs that is a memory copy, the same copy
 * an mmap-based server makes into its tensors, without a native addon to build (no npm mmap package is
 * both maintained and installable without a compiler). Keys are checked so a client can name only an
 * object directly inside /dev/shm, never a path elsewhere.
 */

import { existsSync } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';
import { TsiError, type ShmHandle, type SystemShmProvider } from '../core/index.js';

export const SHM_DIR = '/dev/shm';

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
export function nodeShmProvider(): SystemShmProvider | undefined {
  if (process.platform !== 'linux' || !existsSync(SHM_DIR)) return undefined;
  return {
    async open(key, offset, byteSize) {
      const path = shmPath(key);
      let fh: FileHandle;
      try {
        fh = await open(path, 'r+');
      } catch (err) {
        throw new TsiError('INVALID_ARG', `Unable to open shared memory region: '${key}': ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
      }
      const size = (await fh.stat()).size;
      if (offset + byteSize > size) {
        await fh.close();
        throw new TsiError('INVALID_ARG',
          `shared memory region '${key}' is ${size} bytes, too small for offset ${offset} + byte_size ${byteSize}`);
      }
      return fileRegion(fh, key, offset);
    },
  };
}

function fileRegion(fh: FileHandle, key: string, base: number): ShmHandle {
  let closed = false;
  const live = () => {
    if (closed) throw new TsiError('UNAVAILABLE', `shared memory region '${key}' was unregistered`);
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
