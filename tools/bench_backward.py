#!/usr/bin/env python3
"""The CUDA backward alone: flashpp vs torch SDPA FLASH_ATTENTION (and optionally CUDNN), same
process, same inputs, timed as tools/gpu_compare.py times (GPU time, one call of each per round in
balanced orders; its C API binding too). --deterministic times the deterministic mode.

  python3 tools/bench_backward.py --lib build/libflashpp.so [--dims 64,128] [--seqlens 4096,16384]
      [--dtypes fp16,bf16] [--cudnn] [--deterministic] [--once]

--once runs one backward per case and no peers (for ncu). FLOPs: 2.5 x forward (BENCHMARKING.md).
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_compare import Flashpp, flops_fwd, time_interleaved  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--seqlens", default="4096,16384")
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--cudnn", action="store_true")
    ap.add_argument("--deterministic", action="store_true")
    ap.add_argument("--once", action="store_true")
    args = ap.parse_args()
    fp = Flashpp(args.lib)
    dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16}
    B, H = args.batch, args.heads
    print(f"GPU {torch.cuda.get_device_name()} torch {torch.__version__}; B={B} H={H}; bwd TFLOPS")
    print(f"{'dtype':5} {'D':>4} {'N':>6} {'causal':>6} | {'ours':>7} {'flash':>7} {'cudnn':>7} | {'ours/flash':>10}")
    for dname in args.dtypes.split(","):
        for D in [int(d) for d in args.dims.split(",")]:
            for N in [int(n) for n in args.seqlens.split(",")]:
                for causal in (False, True):
                    torch.manual_seed(0)
                    q, k, v, do = (torch.randn(B, N, H, D, device="cuda", dtype=dtypes[dname]) for _ in range(4))
                    o = torch.empty_like(q)
                    lse = torch.empty(B, H, N, device="cuda", dtype=torch.float32)
                    opts = fp.options(causal)
                    opts.deterministic = 1 if args.deterministic else 0
                    fp.forward(q, k, v, o, lse, opts)
                    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
                    if args.once:
                        fp.backward(q, k, v, o, lse, do, dq, dk, dv, opts)
                        torch.cuda.synchronize()
                        continue
                    fl = 2.5 * flops_fwd(B, H, N, D, causal)
                    fns = {"ours": fp.bound("bwd", (q, k, v, o, lse, do, dq, dk, dv), opts)}
                    fns["ours"]()
                    ours_grads = [x.clone() for x in (dq, dk, dv)]
                    qt, kt, vt = (x.transpose(1, 2).detach().requires_grad_(True) for x in (q, k, v))
                    dot = do.transpose(1, 2)
                    errs = None
                    for name, be in [("flash", SDPBackend.FLASH_ATTENTION)] + \
                            ([("cudnn", SDPBackend.CUDNN_ATTENTION)] if args.cudnn else []):
                        try:
                            with sdpa_kernel(be):
                                out = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
                            g = torch.autograd.grad(out, (qt, kt, vt), dot, retain_graph=True)
                            fns[name] = (lambda out=out: torch.autograd.grad(out, (qt, kt, vt), dot,
                                                                             retain_graph=True))
                            if name == "flash":  # accuracy sanity against SDPA's own gradients
                                errs = [((a.transpose(1, 2).float() - b.float()).norm() / b.float().norm()).item()
                                        for a, b in zip(g, ours_grads)]
                        except RuntimeError as e:
                            print(f"  {name}: {str(e).splitlines()[0][:100]}")
                    # The same GPU-time method as gpu_compare.py: one call of each per round,
                    # queued, in balanced orders.
                    times = time_interleaved(fns)
                    ours = fl / times.pop("ours") / 1e9
                    peers = {name: fl / ms / 1e9 for name, ms in times.items()}
                    fl_ = peers.get("flash")
                    cells = " ".join(f"{peers[n]:7.1f}" if n in peers else f"{'-':>7}" for n in ("flash", "cudnn"))
                    ratio = f"{ours / fl_:10.2f}" if fl_ else f"{'-':>10}"
                    err = " rel.diff vs flash dq/dk/dv " + "/".join(f"{e:.1e}" for e in errs) if errs else ""
                    print(f"{dname:5} {D:4d} {N:6d} {('yes' if causal else 'no'):>6} | {ours:7.1f} {cells} | {ratio}{err}",
                          flush=True)
                    del q, k, v, do, o, lse, dq, dk, dv
                    torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
