"""tools/flashpp_c.py's ctypes structs against the C compiler's layout of include/flashpp/flashpp.h:
every struct's size and every field's offset (a short ctypes struct once let
flashpp_options_default() write past it in the benchmark tools)."""
import ctypes
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import flashpp_c  # noqa: E402

CC = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


@pytest.mark.skipif(CC is None, reason="no C compiler on PATH")
def test_ctypes_structs_match_the_c_header(tmp_path):
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "flashpp/flashpp.h"', "int main(void) {"]
    for cname, cls in flashpp_c.STRUCTS.items():
        lines.append(f'  printf("{cname} size %zu\\n", sizeof({cname}));')
        for field, _ in cls._fields_:
            lines.append(f'  printf("{cname} {field} %zu\\n", offsetof({cname}, {field}));')
    lines += ["  return 0;", "}"]
    src = tmp_path / "layouts.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "layouts"
    subprocess.run([CC, "-std=c11", "-I", os.path.join(ROOT, "include"), str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
    c_layout = {tuple(line.split()[:2]): int(line.split()[2]) for line in out if line}
    for cname, cls in flashpp_c.STRUCTS.items():
        assert c_layout[(cname, "size")] == ctypes.sizeof(cls), cname
        for field, _ in cls._fields_:
            assert c_layout[(cname, field)] == getattr(cls, field).offset, f"{cname}.{field}"
