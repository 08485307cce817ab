#!/usr/bin/env python3
"""Zeroes, in a CUDA library's .nv_fatbin section, every device-code entry this SM architecture cannot use
(cubins for other SMs, PTX for newer ones), so the file compresses to a fraction of its size (the device tool carries 64 MiB a call).
The file keeps its size and layout: the loader and the CUDA runtime read the same headers; only kernels
for other GPUs become zero bytes, which is fine on the one GPU the copy is made for, and nowhere else.
Usage: fatbin-keep.py <in.so> <out.so> <sm> (e.g. 90 for H100/H200). Prints what it kept and zeroed."""
import struct, sys

FATBIN_MAGIC = 0xBA55ED50

def section(data, name):
    # ELF64 little-endian section headers
    shoff, = struct.unpack_from('<Q', data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from('<HHH', data, 0x3A)
    stroff = struct.unpack_from('<Q', data, shoff + shstrndx * shentsize + 0x18)[0]
    for i in range(shnum):
        base = shoff + i * shentsize
        nameoff, = struct.unpack_from('<I', data, base)
        end = data.index(b'\0', stroff + nameoff)
        if data[stroff + nameoff:end].decode() == name:
            off, size = struct.unpack_from('<QQ', data, base + 0x18)
            return off, size
    raise SystemExit(f'no {name} section')

def main():
    src, dst, sm = sys.argv[1], sys.argv[2], int(sys.argv[3])
    data = bytearray(open(src, 'rb').read())
    off, size = section(data, '.nv_fatbin')
    pos, end = off, off + size
    kept = zeroed = 0
    while pos + 16 <= end:
        magic, _ver, hsize, fsize = struct.unpack_from('<IHHQ', data, pos)
        if magic != FATBIN_MAGIC:
            pos += 8  # containers are 8-byte aligned; padding between them
            continue
        e, stop = pos + hsize, pos + hsize + fsize
        while e + 32 <= stop:
            kind, _v, ehsize, psize = struct.unpack_from('<HHIQ', data, e)
            arch, = struct.unpack_from('<I', data, e + 28)
            if ehsize == 0:
                break
            # Cubins for this SM, and PTX for this SM or older (the driver JIT-compiles it for this GPU
            # where a kernel has no cubin of its own here).
            if arch == sm or (kind == 1 and arch <= sm):
                kept += psize
            else:
                data[e + ehsize:e + ehsize + psize] = bytes(psize)
                zeroed += psize
            e += ehsize + psize
        pos = stop
    open(dst, 'wb').write(data)
    print(f'{src}: kept {kept / 2**20:.1f} MiB of sm_{sm} device code, zeroed {zeroed / 2**20:.1f} MiB for other architectures')

main()
