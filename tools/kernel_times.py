#!/usr/bin/env python3
"""GPU time of each kernel of one flashpp backward call (torch.profiler), per shape.

    python3 tools/kernel_times.py LIB B,H,N,D[,causal] [B,H,N,D[,causal] ...]

bf16, [B, N, H, D] tensors; three warm-up calls, then five profiled calls; prints microseconds per
call for each kernel (the sm90 or sm80 main kernel, the preprocess, the postprocess), longest
first. Shows what the calls spend outside the main kernel (BENCHMARKS.md, session 23 run 1).
"""
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_compare import Flashpp  # noqa: E402


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        sys.exit(2)
    fp = Flashpp(sys.argv[1])
    for shape in sys.argv[2:]:
        args = fp.backward_args(shape)
        for _ in range(3):
            fp.backward(*args)
        torch.cuda.synchronize()
        calls = 5
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                fp.backward(*args)
            torch.cuda.synchronize()
        per_kernel = {}
        for e in prof.events():
            if e.device_type.name == "CUDA":
                per_kernel[e.name[:90]] = per_kernel.get(e.name[:90], 0.0) + e.device_time_total
        total = sum(per_kernel.values()) / calls
        print(f"== backward {shape}: {total:.1f} us of kernels a call")
        for name, t in sorted(per_kernel.items(), key=lambda x: -x[1]):
            print(f"  {t / calls:10.1f} us  {100 * t / calls / total:5.1f}%  {name}")


if __name__ == "__main__":
    main()
