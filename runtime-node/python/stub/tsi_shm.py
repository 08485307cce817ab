# The Python half of the shared memory between tsi and this process (the Node half and the layouts
# are described in runtime-node/python/shm.ts): the input region tsi writes, mapped again when tsi
# has grown it, whose tensors numpy views in place; and the output ring this process writes, whose
# space is reused once tsi's consumed sequence number (bytes 0..8) passes it, and which grows when
# it is full and not wrapped.

import collections
import errno
import mmap
import os
import struct
import time

import numpy as np

import triton_python_backend_utils as pb

ALIGN = 64
RING_HEADER = 64
_U64 = struct.Struct("<Q")
_DTYPES = {name: np.dtype(pb._CODE_NUMPY[code]) for code, name in pb._CODE_NAME.items() if code != 13}


def _reserve(fd, size):
    """Backs the ring's pages now: a full /dev/shm is then an error here, not a SIGBUS on a later
    write through the mapping."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as e:
        if e.errno == errno.ENOSPC:
            # Triton's text (shm_manager.cc), which clients and tests match.
            raise pb.TritonModelException(
                "Failed to increase the shared memory pool size to %d bytes. If you are running tsi inside docker, "
                "use '--shm-size' flag to control the shared memory region size. Error: no space left in /dev/shm" % size)
        # Filesystems without fallocate: the pages are allocated as they are written.


def _align(n):
    return (n + ALIGN - 1) & ~(ALIGN - 1)


def _address(mm):
    import ctypes
    return ctypes.addressof(ctypes.c_char.from_buffer(mm))


class InputRegion:
    """The file tsi writes into; mapped again whenever tsi has grown it past our mapping."""

    def __init__(self, fd):
        self.fd = fd
        self.size = 0
        self.mm = None
        self.maps = []  # (address, size) of every mapping made, to recognise our views in outputs

    def ensure(self, end):
        if end > self.size:
            size = os.fstat(self.fd).st_size
            self.mm = mmap.mmap(self.fd, size)
            self.size = size
            self.maps.append((_address(self.mm), size))

    def tensor(self, name, dt, shape, off, nbytes):
        self.ensure(off + nbytes)
        if dt == "BYTES":
            arr = pb.deserialize_bytes_tensor(memoryview(self.mm)[off:off + nbytes]) if nbytes else np.empty(0, np.object_)
            return pb.Tensor._wrap(name, arr.reshape(shape), 13)
        dtype = _DTYPES[dt]
        if nbytes == 0:
            arr = np.empty(shape, dtype)
        else:
            arr = np.frombuffer(self.mm, dtype=dtype, count=nbytes // dtype.itemsize, offset=off).reshape(shape)
        return pb.Tensor._wrap(name, arr, pb._NAME_CODE[dt])

    def offset_of(self, arr):
        """The region offset of an array that views this region, else None."""
        ptr = arr.__array_interface__["data"][0]
        for addr, size in self.maps:
            if addr <= ptr < addr + size:
                return ptr - addr
        return None


class Ring:
    """The output ring. Spans are taken in send order and released once tsi's consumed sequence
    number (header bytes 0..8) passes theirs; when the ring is full and not wrapped it grows."""

    def __init__(self, fd, growth):
        self.fd = fd
        self.growth = growth
        self.size = os.fstat(fd).st_size
        _reserve(fd, self.size)
        self.mm = mmap.mmap(fd, self.size)
        self.spans = collections.deque()
        self.tail = RING_HEADER
        self.seq = 0

    def _release(self):
        done = _U64.unpack_from(self.mm, 0)[0]
        spans = self.spans
        while spans and spans[0][0] <= done:
            spans.popleft()

    def alloc(self, n):
        self._release()
        delay = 2e-5
        while True:
            if not self.spans:
                self.tail = RING_HEADER
            head = self.spans[0][1] if self.spans else None
            if head is None or self.tail >= head:
                if self.tail + n <= self.size:
                    off = self.tail
                elif head is not None and RING_HEADER + n <= head:
                    off = RING_HEADER
                else:
                    self._grow(self.tail + n)
                    off = self.tail
                break
            if self.tail + n <= head:
                off = self.tail
                break
            # Wrapped and full: tsi reads every message as it arrives, so space frees up shortly.
            time.sleep(delay)
            delay = min(delay * 2, 1e-3)
            self._release()
        self.seq += 1
        self.tail = off + n
        self.spans.append((self.seq, off))
        return off, self.seq

    def used_bytes(self):
        """Bytes held: the header and every message tsi has not consumed yet (call under the lock)."""
        self._release()
        if not self.spans:
            return RING_HEADER
        head = self.spans[0][1]
        if self.tail >= head:
            return RING_HEADER + self.tail - head
        return RING_HEADER + (self.size - head) + (self.tail - RING_HEADER)

    def _grow(self, need):
        size = max(self.size + self.growth, _align(need))
        os.ftruncate(self.fd, size)
        _reserve(self.fd, size)
        self.mm = mmap.mmap(self.fd, size)
        self.size = size

    def write(self, off, data):
        self.mm[off:off + len(data)] = data


class SharedMemory:
    """Triton's `c_python_backend_utils.shared_memory`: the pool this process writes tensors into (the
    output ring), in bytes. Leak checks compare free_memory() before and after: a message tsi never
    consumed keeps its span, so the number really falls."""

    def __init__(self, ring, lock):
        self._ring = ring
        self._lock = lock

    def free_memory(self):
        with self._lock:
            return self._ring.size - self._ring.used_bytes()

    def used_memory(self):
        with self._lock:
            return self._ring.used_bytes()
