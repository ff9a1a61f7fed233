#!/usr/bin/env python3
"""fatbin_images.py — the GPU code images an object file or executable embeds, for a test that
checks the build's -gencode list without cuobjdump (which this machine lacks; the GPU machine has
it). Reads the ELF section .nv_fatbin (objcopy) and walks its fat binary containers: a 16-byte
header (magic 0xBA55ED50, u16 version, u16 header size, u64 size of what follows), then entries,
each a header (u16 kind: 1 PTX, 2 ELF; u32 header size at 4; u32 padded payload size at 8; u32
architecture at 28) and its payload. The layout is the one CUDA's fatbinary tool writes (seen in
the objects nvcc 13 makes; cuobjdump --list-elf / --list-ptx give the same lists).

Usage: fatbin_images.py FILE
Prints one line per container: the images, sorted, e.g. "elf sm_80 elf sm_90 ptx compute_90".
Exit 1 (with a message on stderr) when FILE has no .nv_fatbin section or it does not parse."""
import os
import struct
import subprocess
import sys
import tempfile

MAGIC = 0xBA55ED50
KINDS = {1: "ptx compute_", 2: "elf sm_"}


def containers(blob):
    pos = 0
    while pos + 16 <= len(blob):
        magic, _version, header_size, size = struct.unpack_from("<IHHQ", blob, pos)
        if magic != MAGIC:
            if any(blob[pos:pos + 8]):  # only zero padding may lie between containers
                raise ValueError(f"no fat binary header at offset {pos}")
            pos += 8
            continue
        end = pos + header_size + size
        if end > len(blob):
            raise ValueError(f"container at offset {pos} runs past the section ({end} > {len(blob)})")
        images, at = [], pos + header_size
        while at + 32 <= end:
            kind, _, entry_size, payload = struct.unpack_from("<HHII", blob, at)
            arch = struct.unpack_from("<I", blob, at + 28)[0]
            if entry_size < 32:
                raise ValueError(f"entry at offset {at} has a header of {entry_size} bytes")
            images.append(KINDS.get(kind, f"kind{kind} arch") + str(arch))
            at += entry_size + payload
        yield sorted(images)
        pos = end + (-end % 8)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "fatbin")
        r = subprocess.run(["objcopy", "-O", "binary", "--only-section=.nv_fatbin", sys.argv[1], out],
                           capture_output=True, text=True)
        if r.returncode != 0 or not os.path.exists(out) or os.path.getsize(out) == 0:
            sys.exit(f"{sys.argv[1]}: no .nv_fatbin section {r.stderr.strip()}")
        blob = open(out, "rb").read()
    try:
        for images in containers(blob):
            print(" ".join(images))
    except ValueError as e:
        sys.exit(f"{sys.argv[1]}: {e}")


if __name__ == "__main__":
    main()
