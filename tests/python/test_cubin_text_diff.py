"""tools/cubin_text_diff.py on small ELF64 files written here: it must find a kernel whose code
differs, one present on one side only, and call identical code identical."""
import os
import struct
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tools", "cubin_text_diff.py")


def write_elf(path, sections):
    """An ELF64 little-endian file with a null section, the given (name, bytes) sections and
    .shstrtab (the only parts the tool reads)."""
    names = b"\0" + b"".join(name.encode() + b"\0" for name, _ in sections) + b".shstrtab\0"
    body = b"".join(data for _, data in sections)
    header_size, entry = 64, 64
    data_at = header_size
    names_at = data_at + len(body)
    shoff = names_at + len(names)
    count = len(sections) + 2
    header = bytearray(header_size)
    header[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", header, 0x28, shoff)
    struct.pack_into("<HHH", header, 0x3A, entry, count, count - 1)
    table = [struct.pack("<IIQQQQIIQQ", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)]
    name_at, offset = 1, data_at
    for name, blob in sections:
        table.append(struct.pack("<IIQQQQIIQQ", name_at, 1, 6, 0, offset, len(blob), 0, 0, 16, 0))
        name_at += len(name) + 1
        offset += len(blob)
    table.append(struct.pack("<IIQQQQIIQQ", name_at, 3, 0, 0, names_at, len(names), 0, 0, 1, 0))
    with open(path, "wb") as f:
        f.write(bytes(header) + body + names + b"".join(table))


def run(a, b):
    return subprocess.run([sys.executable, TOOL, a, b], capture_output=True, text=True)


def test_identical_and_different_kernels(tmp_path):
    a, b, c = (str(tmp_path / n) for n in ("a.cubin", "b.cubin", "c.cubin"))
    write_elf(a, [(".text.k1", b"\x01" * 32), (".text.k2", b"\x02" * 16), (".nv.info", b"x")])
    write_elf(b, [(".text.k1", b"\x01" * 32), (".text.k2", b"\x02" * 16), (".nv.info", b"y")])
    write_elf(c, [(".text.k1", b"\x01" * 31 + b"\x09"), (".text.k3", b"\x03" * 8)])
    same = run(a, b)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "2 kernels identical, 0 different" in same.stdout
    diff = run(a, c)
    assert diff.returncode == 1
    assert "differs: k1 (32 -> 32 bytes)" in diff.stdout
    assert "differs: k2 (16 -> 0 bytes)" in diff.stdout
    assert "differs: k3 (0 -> 8 bytes)" in diff.stdout
    assert "0 kernels identical, 3 different" in diff.stdout
