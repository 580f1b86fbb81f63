#!/usr/bin/env python3
"""Host time per eager call: flashpp.attention against torch SDPA (flash, cuDNN; math on CPU).

Issue 12's small-call regime: B=1, H=8, N=128, D=64, causal, fp16 (bf16 on the CPU) by default.
Two methods, side by side:
  host   time 200 calls back to back without synchronising (host clock, perf_counter), after a
         warm-up, median of 5 repetitions: the host work per call while the GPU keeps up;
  bench  triton.testing.do_bench per provider (the seeds' method; it synchronises, so it shows
         the larger of host and GPU time per call), when triton is installed.
Modes: fwd (no grad), fwd+grad (inputs require grad: what a training step's forward pays),
fwd+bwd (forward then o.backward(do): one training call); bwd = (fwd+bwd) - (fwd+grad).

  python3 tools/bench_host_overhead.py [--B 1 --H 8 --N 128 --D 64 --causal 1 --dtype fp16]
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashpp


def host_us(fn, calls=200, reps=5):
    for _ in range(20):
        fn()
    sync()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls * 1e6)
        sync()
    return statistics.median(times)


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def bench_us(fn):
    try:
        import triton.testing
        return triton.testing.do_bench(fn) * 1e3
    except Exception:  # no triton, or no GPU driver for it
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--B", type=int, default=1)
    ap.add_argument("--H", type=int, default=8)
    ap.add_argument("--N", type=int, default=128)
    ap.add_argument("--D", type=int, default=64)
    ap.add_argument("--causal", type=int, default=1)
    ap.add_argument("--dtype", default=None, help="fp16 | bf16 | fp32 (default fp16 on CUDA, bf16 on CPU)")
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

    rows = {}
    for name, make in providers.items():
        try:
            fwd = make(False)
            fwd_grad = make(True)
            out = fwd_grad()
            grad_out = do if name == "flashpp" else dot

            def train(fwd_grad=fwd_grad, grad_out=grad_out):
                fwd_grad().backward(grad_out)
            train()
            with torch.no_grad():
                r = {"fwd": (host_us(fwd), bench_us(fwd))}
            r["fwd+grad"] = (host_us(fwd_grad), bench_us(fwd_grad))
            r["fwd+bwd"] = (host_us(train), bench_us(train))
            rows[name] = r
            del out
        except RuntimeError as e:
            print(f"{name}: unavailable: {str(e).splitlines()[0][:120]}")

    print(f"\nflashpp kernels: {getattr(flashpp._C, 'cuda_available', lambda: False)() and dev}")
    print(f"device {torch.cuda.get_device_name() if dev == 'cuda' else 'cpu'}, torch {torch.__version__}, "
          f"B={a.B} H={a.H} N={a.N} D={a.D} causal={causal} {dtype}")
    print("microseconds per call: host clock over 200 unsynchronised calls | do_bench")
    head = f"{'provider':12} " + " ".join(f"{m:>19}" for m in ("fwd", "fwd+grad", "fwd+bwd", "bwd"))
    print(head)
    print("-" * len(head))

    def cell(h, b):
        return f"{h:8.1f} | " + (f"{b:8.1f}" if b is not None else f"{'-':>8}")
    for name, r in rows.items():
        bwd_h = r["fwd+bwd"][0] - r["fwd+grad"][0]
        bwd_b = (r["fwd+bwd"][1] - r["fwd+grad"][1]) if r["fwd+bwd"][1] is not None else None
        print(f"{name:12} " + " ".join(cell(*r[m]) for m in ("fwd", "fwd+grad", "fwd+bwd")) +
              " " + cell(bwd_h, bwd_b))
    peers = [n for n in rows if n != "flashpp"]
    if "flashpp" in rows and peers:
        print("\nflashpp / best peer (host clock):")
        for m in ("fwd", "fwd+grad", "fwd+bwd"):
            best = min(rows[n][m][0] for n in peers)
            print(f"  {m:9} {rows['flashpp'][m][0] / best:5.2f}")
        best_bwd = min(rows[n]["fwd+bwd"][0] - rows[n]["fwd+grad"][0] for n in peers)
        fl_bwd = rows["flashpp"]["fwd+bwd"][0] - rows["flashpp"]["fwd+grad"][0]
        print(f"  {'bwd':9} {fl_bwd / best_bwd:5.2f}")


if __name__ == "__main__":
    main()
