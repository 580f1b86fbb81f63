#!/usr/bin/env python3
"""Host time per eager call: flashpp.attention against torch SDPA (flash, cuDNN; math on CPU).

Issue 12's small-call regime: B=1, H=8, N=128, D=64, causal, fp16 (bf16 on the CPU) by default.
Two methods, side by side:
  host   blocks of 200 calls back to back without synchronising (host clock, perf_counter; the
         GPU is synchronised between blocks, untimed): the host work per call while the GPU
         keeps up. Every (provider, mode) block runs once per round, in an order that rotates
         from round to round, after a time-based warm-up of all of them; the median over the
         rounds is reported with its min-max. (Timing each provider's modes one after the other,
         as this script did before, let a host that sped up during the run favour whatever was
         timed last: session 10's table read flashpp's no-grad forward, timed first of all,
         slower than its forward with grad, and fwd 73.6 > 55.1 > 36.6 us in timing order.)
  bench  triton.testing.do_bench per provider (the seeds' method; it synchronises, so it shows
         the larger of host and GPU time per call), when triton is installed (--no-do-bench to
         skip).
Modes: fwd (no grad), fwd+grad (inputs require grad: what a training step's forward pays),
fwd+bwd (forward then o.backward(do): one training call, gradients accumulating into .grad as
in the earlier tables; --zero-grad sets them to None first, as zero_grad() does);
bwd = (fwd+bwd) - (fwd+grad).

  python3 tools/bench_host_overhead.py [--B 1 --H 8 --N 128 --D 64 --causal 1 --dtype fp16]
                                       [--rounds 9 --calls 200 --warmup-s 1.0]
"""
import argparse
import contextlib
import statistics
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashpp

MODES = ("fwd", "fwd+grad", "fwd+bwd")


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def block_us(fn, calls):
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls * 1e6


def bench_us(fn):
    try:
        import triton.testing
        return triton.testing.do_bench(fn) * 1e3
    except Exception:  # no triton, or no GPU driver for it
        return None


def mode_context(mode):
    return torch.no_grad() if mode == "fwd" else contextlib.nullcontext()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--B", type=int, default=1)
    ap.add_argument("--H", type=int, default=8)
    ap.add_argument("--N", type=int, default=128)
    ap.add_argument("--D", type=int, default=64)
    ap.add_argument("--causal", type=int, default=1)
    ap.add_argument("--dtype", default=None, help="fp16 | bf16 | fp32 (default fp16 on CUDA, bf16 on CPU)")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--calls", type=int, default=200, help="calls per timed block")
    ap.add_argument("--warmup-s", type=float, default=1.0, help="seconds of warm-up, all blocks")
    ap.add_argument("--zero-grad", action="store_true", help="fwd+bwd: .grad = None first")
    ap.add_argument("--no-do-bench", action="store_true")
    a = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[
        a.dtype or ("fp16" if dev == "cuda" else "bf16")]
    causal = bool(a.causal)
    torch.manual_seed(0)
    q, k, v, do = (torch.randn(a.B, a.N, a.H, a.D, device=dev, dtype=dtype) for _ in range(4))
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))

    def flashpp_fn(grad):
        qq, kk, vv = (qg, kg, vg) if grad else (q, k, v)
        return lambda: flashpp.attention(qq, kk, vv, causal=causal)

    def sdpa_fn(backend, grad):
        qq, kk, vv = ((qg, kg, vg) if grad else (q, k, v))
        qt, kt, vt = (t.transpose(1, 2) for t in (qq, kk, vv))

        def run():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
        return run

    providers = {"flashpp": flashpp_fn}
    if dev == "cuda":
        providers["sdpa-flash"] = lambda grad: sdpa_fn(SDPBackend.FLASH_ATTENTION, grad)
        providers["sdpa-cudnn"] = lambda grad: sdpa_fn(SDPBackend.CUDNN_ATTENTION, grad)
    else:
        providers["sdpa-math"] = lambda grad: sdpa_fn(SDPBackend.MATH, grad)
    dot = do.transpose(1, 2)

    # (provider, mode) -> the callable; providers that fail their first call are left out.
    blocks = {}
    for name, make in providers.items():
        try:
            fwd, fwd_grad = make(False), make(True)
            grad_out = do if name == "flashpp" else dot

            def train(fwd_grad=fwd_grad, grad_out=grad_out):
                if a.zero_grad:
                    qg.grad = kg.grad = vg.grad = None
                fwd_grad().backward(grad_out)
            with torch.no_grad():
                fwd()
            fwd_grad()
            train()
            blocks[(name, "fwd")] = fwd
            blocks[(name, "fwd+grad")] = fwd_grad
            blocks[(name, "fwd+bwd")] = train
        except RuntimeError as e:
            print(f"{name}: unavailable: {str(e).splitlines()[0][:120]}")
    order = list(blocks)

    end = time.perf_counter() + a.warmup_s
    while True:  # warm-up: every block, until the time is up (at least once)
        for key in order:
            with mode_context(key[1]):
                block_us(blocks[key], 20)
        sync()
        if time.perf_counter() >= end:
            break
    times = {key: [] for key in order}
    for rnd in range(a.rounds):
        shift = rnd % len(order)
        for key in order[shift:] + order[:shift]:
            with mode_context(key[1]):
                times[key].append(block_us(blocks[key], a.calls))
            sync()
    do_bench = {}
    if not a.no_do_bench:
        for key in order:
            with mode_context(key[1]):
                do_bench[key] = bench_us(blocks[key])

    names = list(dict.fromkeys(key[0] for key in order))
    host = {key: statistics.median(t) for key, t in times.items()}
    for name in names:
        host[(name, "bwd")] = host[(name, "fwd+bwd")] - host[(name, "fwd+grad")]
        fb, fg = do_bench.get((name, "fwd+bwd")), do_bench.get((name, "fwd+grad"))
        do_bench[(name, "bwd")] = fb - fg if fb is not None and fg is not None else None

    print(f"\nflashpp kernels: {flashpp._C.cuda_kernel_families(0) if dev == 'cuda' else 'cpu'}")
    print(f"device {torch.cuda.get_device_name() if dev == 'cuda' else 'cpu'}, torch {torch.__version__}, "
          f"B={a.B} H={a.H} N={a.N} D={a.D} causal={causal} {dtype}")
    print(f"microseconds per call: host clock, median of {a.rounds} interleaved rounds of "
          f"{a.calls} unsynchronised calls | do_bench"
          + ("; fwd+bwd with .grad = None first" if a.zero_grad else ""))
    head = f"{'provider':12} " + " ".join(f"{m:>19}" for m in MODES + ("bwd",))
    print(head)
    print("-" * len(head))

    def cell(h, b):
        return f"{h:8.1f} | " + (f"{b:8.1f}" if b is not None else f"{'-':>8}")
    for name in names:
        print(f"{name:12} " + " ".join(cell(host[(name, m)], do_bench.get((name, m)))
                                       for m in MODES + ("bwd",)))
    print("spread of the host rounds (min-max):")
    for name in names:
        print(f"  {name:12} " + "  ".join(
            f"{m} {min(times[(name, m)]):.1f}-{max(times[(name, m)]):.1f}" for m in MODES))
    peers = [n for n in names if n != "flashpp"]
    if "flashpp" in names and peers:
        print("\nflashpp / best peer (host clock medians; targets: fwd <= 1.0, bwd <= 1.2):")
        for m in MODES + ("bwd",):
            best = min(host[(n, m)] for n in peers)
            print(f"  {m:9} {host[('flashpp', m)] / best:5.2f}")


if __name__ == "__main__":
    main()
