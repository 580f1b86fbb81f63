#!/usr/bin/env python3
"""Per-kernel SASS check of the sm90 families (issue 14): every sm90 attention kernel in a built
library or object holds warpgroup matrix instructions (HGMMA; QGMMA for FP8) and none holds HMMA
(mma.sync, the Ampere road). Needs cuobjdump (the GPU machine has it).

  python3 tools/sass_check.py build-gpu/libflashpp.so

Prints one line per failing function and a last line `sass check: ok` or `sass check: FAILED`
(exit status 1). tools/gpu_check.sh's aggregate count (HGMMA, UTMALDG and HMMA over the sm90
objects) can hide one kernel on the slow road among many; this check cannot.
"""
import re
import subprocess
import sys

MATRIX_KERNELS = ("flash_fwd_sm90", "flash_bwd_sm90", "flash_fwd_fp8")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sass = subprocess.run(["cuobjdump", "-sass", sys.argv[1]], capture_output=True, text=True,
                          check=True).stdout
    rows = []
    for body in re.split(r"\n\s*Function : ", sass)[1:]:
        name = body.split("\n", 1)[0].strip()
        if "sm90" not in name:
            continue
        gmma = len(re.findall(r"\b[HQ]GMMA\b", body))
        hmma = len(re.findall(r"\bHMMA\b", body))
        rows.append((name, gmma, hmma))
    bad = [r for r in rows if r[2] > 0 or (any(k in r[0] for k in MATRIX_KERNELS) and r[1] == 0)]
    with_gmma = sum(1 for r in rows if r[1] > 0)
    print(f"sm90 functions {len(rows)}, with HGMMA/QGMMA {with_gmma}, "
          f"HMMA instructions in them {sum(r[2] for r in rows)}")
    for name, gmma, hmma in bad:
        print(f"BAD {name[:160]}: GMMA {gmma}, HMMA {hmma}")
    ok = bool(rows) and not bad
    print("sass check:", "ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
