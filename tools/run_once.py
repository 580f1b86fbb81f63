#!/usr/bin/env python3
"""One forward or backward at one shape (B=4, Hq=32, [B,N,H,D]), for profilers (ncu): flashpp's,
or with --impl flash torch SDPA's FlashAttention-2 backend (the peer, to profile side by side).

  python3 tools/run_once.py --lib build/libflashpp.so --pass bwd --dtype fp16 --dim 64 --seqlen 4096 --causal 0
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_compare import Flashpp  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--pass", dest="which", choices=("fwd", "bwd"), default="bwd")
    ap.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--causal", type=int, default=0)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--impl", choices=("ours", "flash"), default="ours")
    a = ap.parse_args()
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[a.dtype]
    torch.manual_seed(0)
    if a.impl == "flash":
        run_sdpa_flash(a, dt)
        return
    fp = Flashpp(a.lib)
    q, k, v, do = (torch.randn(a.batch, a.seqlen, a.heads, a.dim, device="cuda", dtype=dt) for _ in range(4))
    o = torch.empty_like(q)
    lse = torch.empty(a.batch, a.heads, a.seqlen, device="cuda", dtype=torch.float32)
    opts = fp.options(bool(a.causal))
    fp.forward(q, k, v, o, lse, opts)
    if a.which == "bwd":
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        fp.backward(q, k, v, o, lse, do, dq, dk, dv, opts)
    torch.cuda.synchronize()


def run_sdpa_flash(a, dt):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    # SDPA takes [B, H, N, D]; the transposed views keep [B, N, H, D] storage like ours.
    q, k, v = (torch.randn(a.batch, a.seqlen, a.heads, a.dim, device="cuda", dtype=dt)
               .transpose(1, 2).requires_grad_(a.which == "bwd") for _ in range(3))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=bool(a.causal))
        if a.which == "bwd":
            o.backward(torch.randn_like(o))
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
