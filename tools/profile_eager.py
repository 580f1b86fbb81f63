#!/usr/bin/env python3
"""Where the host time of an eager flashpp.attention call goes: each piece timed alone (host
clock, many calls, no synchronisation), then cProfile of the call with autograd.

  python3 tools/profile_eager.py [--device cuda] [--N 128]
"""
import argparse
import cProfile
import pstats
import time

import torch

import flashpp
from flashpp._options import make_config
from flashpp.torch import _eager


def per_call_us(fn, n=2000):
    for _ in range(200):
        fn()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    us = (time.perf_counter() - start) / n * 1e6
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return us


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--N", type=int, default=128)
    a = ap.parse_args()
    dtype = torch.float16 if a.device == "cuda" else torch.float32
    q, k, v = (torch.randn(1, a.N, 8, 64, device=a.device, dtype=dtype) for _ in range(3))
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
    cfg = make_config(causal=True)

    class Trivial(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):
            o = torch.empty_like(q)
            ctx.save_for_backward(q, k, v, o)
            return o

        @staticmethod
        def backward(ctx, g):
            return g, g, g

    pieces = {
        "flashpp.attention, no grad": lambda: flashpp.attention(q, k, v, causal=True),
        "flashpp.attention, grad": lambda: flashpp.attention(qg, kg, vg, causal=True),
        "_eager.forward": lambda: _eager.forward(q, k, v, cfg, 0, 0),
        "_Attention.apply": lambda: _eager._Attention.apply(qg, kg, vg, (cfg, 0, 0)),
        "trivial autograd.Function": lambda: Trivial.apply(qg, kg, vg),
        "torch.empty_like": lambda: torch.empty_like(q),
        "make_config": lambda: make_config(causal=True),
        "usable": lambda: _eager.usable(q, k, v),
    }
    for name, fn in pieces.items():
        print(f"{name:30} {per_call_us(fn):8.1f} us")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(2000):
        flashpp.attention(qg, kg, vg, causal=True)
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(14)


if __name__ == "__main__":
    main()
