#!/usr/bin/env python3
"""Compare the machine code of two cubins (ELF files from `nvcc -cubin`), kernel by kernel.

    python3 tools/cubin_text_diff.py before.cubin after.cubin

Prints each kernel whose code section (.text.<kernel>) differs or exists in only one file, then a
count of identical and different sections; exits 1 when any differs. For refactors of kernel
source that should not change what runs: identical code sections need no timing run on a GPU,
and this needs no cuobjdump (the build machine has none). Build both cubins with the same
command (for example an instance's compile line from compile_commands.json with -cubin in place
of -c); -lineinfo changes only the line tables, not the .text sections compared here.
"""
import struct
import sys


def code_sections(path):
    """{section name: bytes} of the .text.* sections of an ELF64 little-endian file."""
    data = open(path, "rb").read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        sys.exit(f"{path}: not an ELF64 little-endian file")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]
    sections = {}
    for name_offset, _type, _flags, _addr, offset, size, *_ in headers:
        end = data.index(b"\0", names_at + name_offset)
        name = data[names_at + name_offset:end].decode()
        if name.startswith(".text."):
            sections[name] = data[offset:offset + size]
    return sections


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    before, after = code_sections(sys.argv[1]), code_sections(sys.argv[2])
    same = 0
    differ = []
    for name in sorted(set(before) | set(after)):
        if before.get(name) == after.get(name):
            same += 1
        else:
            differ.append(name)
            print(f"differs: {name[len('.text.'):]} ({len(before.get(name, b''))} -> "
                  f"{len(after.get(name, b''))} bytes)")
    print(f"{same} kernels identical, {len(differ)} different")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
