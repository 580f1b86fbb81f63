#!/usr/bin/env python3
"""SM clock, board power and temperature while each provider runs, under do_bench and under
gpu_compare.py's interleaved rounds: is a method's figure a burst one or a power-capped one?
(BENCHMARKS.md session 38 run 5.) nvidia-smi samples every 20 ms in the background; each timing
window prints the median clock (MHz), power (W) and temperature (C) of its samples.

  python3 tools/power_clocks.py build-gpu/libflashpp.so OUTDIR

Four forward cells (B=4 H=32, B=2 at N=16384): for each, do_bench of ours, cuDNN, ours (100 ms and
1000 ms of calls), then 40 interleaved rounds of ours and cuDNN. The 100 ms windows' readings lag
(nvidia-smi's values update more slowly than its loop); read the 1000 ms and interleaved rows.
"""
import datetime
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
import triton.testing

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_compare  # noqa: E402
from gpu_compare import Flashpp, base_library  # noqa: E402
from bench_do_bench import make_problem, flops_fwd  # noqa: E402

CELLS = [(128, 16384, 2, True, torch.float16), (128, 16384, 2, False, torch.float16),
         (64, 4096, 4, True, torch.float16), (128, 4096, 4, False, torch.bfloat16)]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    lib, out = Flashpp(sys.argv[1]), sys.argv[2]
    os.makedirs(out, exist_ok=True)
    smi_path = os.path.join(out, "smi.csv")
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu",
                            "--format=csv,noheader,nounits", "-lms", "20"], stdout=open(smi_path, "w"))
    time.sleep(1.5)
    windows = []  # (label, start, end, TFLOPS text)

    def window(label, fn, flops):
        t0 = datetime.datetime.now()
        result = fn()
        t1 = datetime.datetime.now()
        if isinstance(result, dict):
            text = " / ".join(f"{flops / ms / 1e9:.1f}" for ms in result.values())
        else:
            text = f"{flops / result / 1e9:.1f}"
        windows.append((label, t0, t1, text))

    for D, N, B, causal, dt in CELLS:
        q, k, v, o, lse, *_ = make_problem(B, 32, 32, N, N, D, dt)
        ffl = flops_fwd(B, 32, N, N, D, causal)
        ours = lib.bound("fwd", (q, k, v, o, lse), base_library(lib).options(causal))
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
        cell = f"D={D} N={N} {'causal' if causal else 'full'} {str(dt)[6:]}"
        for rep in (100, 1000):
            for name, fn in (("ours", ours), ("cudnn", cudnn), ("ours", ours)):
                window(f"{cell}|do_bench rep={rep}|{name}",
                       lambda: triton.testing.do_bench(fn, rep=rep, return_mode="median"), ffl)
        window(f"{cell}|interleaved|ours / cudnn",
               lambda: gpu_compare.time_interleaved({"ours": ours, "cudnn": cudnn}, rounds=40), ffl)
    time.sleep(0.5)
    smi.terminate()
    smi.wait()
    samples = []
    for line in open(smi_path):
        try:
            ts, clk, pw, tmp = [x.strip() for x in line.split(",")]
            samples.append((datetime.datetime.strptime(ts, "%Y/%m/%d %H:%M:%S.%f"),
                            float(clk), float(pw), float(tmp)))
        except ValueError:
            pass
    print(f"{'window':62} {'TFLOPS':>15} {'MHz':>6} {'W':>6} {'C':>4}")
    for label, t0, t1, text in windows:
        s = [x for x in samples if t0 <= x[0] <= t1]
        med = [statistics.median([x[i] for x in s]) if s else float("nan") for i in (1, 2, 3)]
        print(f"{label:62} {text:>15} {med[0]:6.0f} {med[1]:6.0f} {med[2]:4.0f}")


if __name__ == "__main__":
    main()
