#!/usr/bin/env python3
"""fatbin_images.py — the GPU code images an object file or executable embeds, for a test that
checks the build's -gencode list without cuobjdump (which this machine lacks; the GPU machine has
it). Reads the ELF section .nv_fatbin (objcopy) and walks its fat binary containers: a 16-byte
header (magic 0xBA55ED50, u16 version, u16 header size, u64 size of what follows), then entries,
each a header (u16 kind: 1 PTX, 2 ELF; u32 header size at 4; u32 padded payload size at 8; u32
architecture at 28) and its payload. The layout is the one CUDA's fatbinary tool writes (seen in
the objects nvcc 13 makes; cuobjdump --list-elf / --list-ptx give the same lists).

With --kernels it also opens each ELF image (a cubin: uncompressed in the objects nvcc 13 makes;
an image that is not an ELF is an error) and prints one line per kernel and architecture: the
SHA-256 of its SASS (section .text.KERNEL), of its parameter bank (.nv.constant0.KERNEL) and its
static shared memory size (.nv.shared.KERNEL). Two builds whose sorted --kernels lines are equal
run the same machine code, whichever files the kernels live in: the check for a refactor that
only moves kernels between files (docs/architecture.md). The attribute table .nv.info.KERNEL is
left out: it names symbols by their index in the file's symbol table, which moving changes.

Usage: fatbin_images.py FILE
       fatbin_images.py --kernels FILE...
Prints one line per container: the images, sorted, e.g. "elf sm_80 elf sm_90 ptx compute_90";
with --kernels "sm_90 KERNEL text=SHA constant0=SHA shared=BYTES", sorted.
Exit 1 (with a message on stderr) when FILE has no .nv_fatbin section or it does not parse."""
import hashlib
import os
import struct
import subprocess
import sys
import tempfile

MAGIC = 0xBA55ED50
KINDS = {1: "ptx compute_", 2: "elf sm_"}


def containers(blob, payloads=False):
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
            name = KINDS.get(kind, f"kind{kind} arch") + str(arch)
            body = blob[at + entry_size:at + entry_size + payload]
            images.append((name, body) if payloads else name)
            at += entry_size + payload
        yield sorted(images)
        pos = end + (-end % 8)


def elf_sections(elf):
    """{name: (type, bytes)} of an ELF64 little-endian image (a cubin)."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        raise ValueError("an ELF image is not a 64-bit little-endian ELF (compressed?)")
    shoff = struct.unpack_from("<Q", elf, 0x28)[0]
    entsize, count, names_index = struct.unpack_from("<HHH", elf, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", elf, shoff + i * entsize) for i in range(count)]
    names_at = headers[names_index][4]

    def name(off):
        return elf[names_at + off:elf.index(b"\0", names_at + off)].decode()
    return {name(h[0]): (h[1], elf[h[4]:h[4] + h[5]] if h[1] != 8 else h[5]) for h in headers}


def kernel_lines(blob):
    """'sm_XX KERNEL text=.. constant0=.. shared=..' for every kernel of every ELF image."""
    digest = lambda b: hashlib.sha256(b).hexdigest()[:16]
    for images in containers(blob, payloads=True):
        for image, body in images:
            if not image.startswith("elf "):
                continue
            sections = elf_sections(body)
            for sec, (_, text) in sections.items():
                if not sec.startswith(".text."):
                    continue
                kernel = sec[len(".text."):]
                const = sections.get(".nv.constant0." + kernel, (0, b""))[1]
                shared = sections.get(".nv.shared." + kernel, (8, 0))[1]
                yield f"{image[4:]} {kernel} text={digest(text)} constant0={digest(const)} shared={shared}"


def fatbin_of(path):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "fatbin")
        r = subprocess.run(["objcopy", "-O", "binary", "--only-section=.nv_fatbin", path, out],
                           capture_output=True, text=True)
        if r.returncode != 0 or not os.path.exists(out) or os.path.getsize(out) == 0:
            sys.exit(f"{path}: no .nv_fatbin section {r.stderr.strip()}")
        return open(out, "rb").read()


def main():
    args = sys.argv[1:]
    by_kernel = args[:1] == ["--kernels"]
    files = args[1:] if by_kernel else args
    if not files or (not by_kernel and len(files) != 1):
        sys.exit(__doc__)
    lines = []
    for path in files:
        blob = fatbin_of(path)
        try:
            if by_kernel:
                lines += kernel_lines(blob)
            else:
                for images in containers(blob):
                    print(" ".join(images))
        except (ValueError, struct.error, IndexError) as e:
            sys.exit(f"{path}: {e}")
    for line in sorted(lines):
        print(line)


if __name__ == "__main__":
    main()
