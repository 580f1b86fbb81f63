#!/usr/bin/env python3
"""The forward on scores that jump between key tiles, against float64, for one or more builds.

The sm90 forward's softmax keeps each row's reference max while a tile's P stay at most 2^8 and
starts the exponentials before the tile's max is known (online_softmax_speculative in
src/cuda/common/forward_steps.cuh); a tile where a row rises further is rescaled, and one where
it rises by 2^100 or more is recomputed. Random normal inputs almost never reach those cases:
here a band of key rows is scaled (x3: kept, x6: rescaled, x60: recomputed), early keys (the
kernels walk key tiles from the last one) or middle ones, causal and not, D 64 and 128, fp16 and
bf16. Prints one line per build and case: O's relative error, lse's largest error, NaN count.
A build that skips a case's repair shows errors of 1e+4 and more, or NaN (session 28).

  python3 tools/score_jump_check.py ours=build/libflashpp.so [base=other/libflashpp.so ...]
"""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_compare  # noqa: E402  (Flashpp over the C API, private copies of each build)


def reference(q, k, v, causal, scale):
    """O and lse in float64, [B, N, H, D] and [B, H, N]."""
    qd, kd, vd = (t.double().transpose(1, 2) for t in (q, k, v))
    s = (qd @ kd.transpose(-1, -2)) * scale
    if causal:
        n, m = s.shape[-2:]
        hidden = torch.ones(n, m, dtype=torch.bool, device=s.device).triu(1)
        s = s.masked_fill(hidden, float("-inf"))
    return (torch.softmax(s, -1) @ vd).transpose(1, 2), torch.logsumexp(s, -1)


def main():
    if len(sys.argv) < 2 or any("=" not in a for a in sys.argv[1:]):
        sys.exit(__doc__)
    builds = {}
    for arg in sys.argv[1:]:
        name = arg.split("=", 1)[0]
        builds[name] = gpu_compare.alternatives(None, [arg])[name]
    torch.manual_seed(0)
    B, N, H = 1, 1100, 2
    for D in (64, 128):
        for dtype in (torch.bfloat16, torch.float16):
            for factor, lo, hi in ((3, 0, 900), (6, 0, 256), (60, 0, 256), (6, 512, 640), (60, 512, 640)):
                for causal in (False, True):
                    q, k, v = (torch.randn(B, N, H, D, device="cuda", dtype=dtype) for _ in range(3))
                    k[:, lo:hi] = (k[:, lo:hi].float() * factor).to(dtype)
                    o_ref, lse_ref = reference(q, k, v, causal, 1 / math.sqrt(D))
                    for name, lib in builds.items():
                        o = torch.full_like(q, float("nan"))
                        lse = torch.full((B, H, N), float("nan"), device="cuda")
                        lib.forward(q, k, v, o, lse, lib.options(causal))
                        torch.cuda.synchronize()
                        err = ((o.double() - o_ref).norm() / o_ref.norm()).item()
                        lse_err = (lse.double() - lse_ref).abs().max().item()
                        print(f"{name:8s} D={D} {str(dtype)[6:]:8s} keys {lo}-{hi} x{factor} "
                              f"causal={int(causal)}: O rel err {err:.2e}  lse err {lse_err:.2e}  "
                              f"NaN {torch.isnan(o).sum().item()}")


if __name__ == "__main__":
    main()
