#!/usr/bin/env python3
"""The backward of one or more builds of the library against a float32 torch reference, on awkward
shapes (lengths off the tiles, causal and not, D 64/96/128, bf16), with dQ, dK and dV filled with
NaN before each call: prints max |err| / max |ref| per gradient and build, and exits 1 above 2e-2.
A quick check of kernel variants before they are timed (the GPU test suite is the full one).

  python3 tools/bwd_check.py head=build-a/libflashpp.so new=build-b/libflashpp.so
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_compare import Flashpp  # noqa: E402

# (B, H, N, D, causal)
SHAPES = [(2, 4, 1000, 64, False), (2, 4, 1000, 64, True), (1, 3, 4173, 128, False),
          (1, 3, 4173, 128, True), (3, 2, 577, 96, True), (1, 2, 300, 128, False),
          (2, 2, 2049, 64, False), (1, 8, 8192, 128, True)]
LIMIT = 2e-2


def reference(q, k, v, do, causal):
    """dQ, dK, dV of float32 SDPA on the same (bf16-valued) inputs, [B, N, H, D]."""
    qf, kf, vf = (t.float().transpose(1, 2).requires_grad_() for t in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, is_causal=causal)
    out.backward(do.float().transpose(1, 2))
    return [t.grad.transpose(1, 2) for t in (qf, kf, vf)]


def relative_errors(fp, q, k, v, do, causal, refs):
    B, N, H, _ = q.shape
    o = torch.empty_like(q)
    lse = torch.empty(B, H, N, device="cuda", dtype=torch.float32)
    dq, dk, dv = (torch.full_like(q, float("nan")) for _ in range(3))
    opts = fp.options(causal)
    fp.forward(q, k, v, o, lse, opts)
    fp.backward(q, k, v, o, lse, do, dq, dk, dv, opts)
    torch.cuda.synchronize()
    return [((x.float() - r).abs().max() / r.abs().max()).item() for x, r in zip((dq, dk, dv), refs)]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    libs = [(name, Flashpp(path)) for name, path in (a.split("=", 1) for a in sys.argv[1:])]
    torch.manual_seed(0)
    worst = 0.0
    for B, H, N, D, causal in SHAPES:
        q, k, v, do = (torch.randn(B, N, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        refs = reference(q, k, v, do, causal)
        row = []
        for name, fp in libs:
            errs = relative_errors(fp, q, k, v, do, causal, refs)
            # NaN (an unwritten element) compares false with everything: counted as infinite.
            worst = max(worst, *(e if e == e else float("inf") for e in errs))
            row.append(f"{name} " + "/".join(f"{e:.1e}" for e in errs))
        print(f"B{B} H{H} N{N} D{D} c{int(causal)}: " + "  ".join(row))
    ok = worst < LIMIT
    print(f"worst relative error {worst:.2e}: {'OK' if ok else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
