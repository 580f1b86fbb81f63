#!/usr/bin/env python3
"""flashpp against torch SDPA timed with triton.testing.do_bench, one provider at a time (the seeds'
method: each provider's median over back-to-back calls, host launch work included whenever the GPU
waits on the host). Companion of tools/gpu_compare.py (interleaved GPU-time rounds); the issues ask
for both. flashpp is called through its C API (libflashpp.so, ctypes, views built once).

  python3 tools/bench_do_bench.py --lib build-gpu/libflashpp.so [--dims 64,128] [--seqlens 4096,16384]
      [--dtypes fp16,bf16] [--fwd-only] [--peers flash,cudnn] [--alt sm80=env:FLASHPP_CUDA_FAMILY=sm80]
      [--dropout 0.1 --alt p0=opt:dropout_p=0] [--alt base=other/libflashpp.so[+env:VAR=VALUE]]
      [--shape B,Hq,Hkv,Nq,Nk,D]... [--repeats K]

B=4, Hq=32 (B=2 at N=16384, as the Hopper issues state); --shape adds other problems (GQA, Nq != Nk).
--interleaved ROUNDS times the same calls with gpu_compare.py's method instead (GPU time, one call
of each provider per round in balanced orders, median over at least ROUNDS rounds): the
interleaved figures for shapes gpu_compare.py's fixed grid does not have. --repeats K times each
provider K times with do_bench, in rotated orders, and keeps the median: a GPU at its power limit
(an H200 under seconds of attention reaches 700 W and drops from 1980 to ~1500-1600 MHz) reads
differently at different moments of that drift, and one do_bench per provider puts each provider
at one moment of it.
"""
import argparse
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
import triton.testing

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_compare  # noqa: E402
from gpu_compare import Flashpp, alternatives, base_library  # noqa: E402

PEERS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
         "efficient": SDPBackend.EFFICIENT_ATTENTION}


def flops_fwd(B, Hq, Nq, Nk, D, causal):
    """4·B·Hq·(visible query-key pairs)·D: all Nq·Nk pairs, or under top-left causal (SDPA's
    is_causal) row i's min(i + 1, Nk) keys, which is Nq·Nk/2 (the usual halving) when Nq = Nk."""
    if not causal:
        pairs = Nq * Nk
    elif Nq == Nk:
        pairs = Nq * Nk / 2
    else:
        full = max(0, Nq - Nk)  # rows that see every key
        part = Nq - full
        pairs = part * (part + 1) / 2 + full * Nk
    return 4.0 * B * Hq * pairs * D


def make_problem(B, Hq, Hkv, Nq, Nk, D, dtype):
    """Inputs (seed 0) and outputs of one problem, [B, N, H, D]: q, k, v, o, lse, do, dq, dk, dv."""
    torch.manual_seed(0)
    q = torch.randn(B, Nq, Hq, D, device="cuda", dtype=dtype)
    k, v = (torch.randn(B, Nk, Hkv, D, device="cuda", dtype=dtype) for _ in range(2))
    do = torch.randn_like(q)
    o, dq, dk, dv = torch.empty_like(q), torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    lse = torch.empty(B, Hq, Nq, device="cuda", dtype=torch.float32)
    return q, k, v, o, lse, do, dq, dk, dv


def provider_calls(libs, peers, B, Hq, Hkv, Nq, Nk, D, causal, dtype, do_bwd):
    """One problem's calls: {"fwd": {provider: fn}, "bwd": {provider: fn}} (the backward ones only
    with do_bwd) and the forward's FLOPs. Our libraries' backwards read o and lse of one of our
    forwards; a peer's backward differentiates that peer's forward output."""
    q, k, v, o, lse, do, dq, dk, dv = make_problem(B, Hq, Hkv, Nq, Nk, D, dtype)
    calls = {"fwd": {}, "bwd": {}}
    for name, lib in libs.items():
        opts = base_library(lib).options(causal)
        calls["fwd"][name] = lib.bound("fwd", (q, k, v, o, lse), opts)
        if do_bwd:
            calls["bwd"][name] = lib.bound("bwd", (q, k, v, o, lse, do, dq, dk, dv), opts)
    calls["fwd"]["ours"]()  # o and lse for every library's backward
    gqa = Hq != Hkv
    qt = q.transpose(1, 2).detach().requires_grad_(do_bwd)
    kt, vt = (x.transpose(1, 2).detach().requires_grad_(do_bwd) for x in (k, v))
    dot = do.transpose(1, 2)
    for name in peers:
        def fwd(backend=PEERS[name]):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, enable_gqa=gqa,
                                                      dropout_p=gpu_compare.DROPOUT)
        try:
            out = fwd()
        except RuntimeError as e:
            print(f"  {name} unavailable: {str(e).splitlines()[0][:100]}", flush=True)
            continue
        calls["fwd"][name] = fwd
        if do_bwd:
            calls["bwd"][name] = lambda out=out: torch.autograd.grad(out, (qt, kt, vt), dot, retain_graph=True)
    return calls, flops_fwd(B, Hq, Nq, Nk, D, causal)


def bench(libs, peers, B, Hq, Hkv, Nq, Nk, D, causal, dtype, do_fwd, do_bwd, repeats=1):
    """do_bench's median of each provider's calls; with repeats > 1 each provider is timed that many
    times, the providers in a rotated order each time, and the median of its medians is kept (under
    sustained load a GPU at its power limit lowers its clock by 20% or more within seconds, so a
    provider timed once, at one moment of that drift, can read several percent off; session 38)."""
    calls, ffl = provider_calls(libs, peers, B, Hq, Hkv, Nq, Nk, D, causal, dtype, do_bwd)
    keys = [(d, name) for d, wanted in (("fwd", do_fwd), ("bwd", do_bwd)) if wanted for name in calls[d]]
    times = {key: [] for key in keys}
    for r in range(repeats):
        for d, name in keys[r % len(keys):] + keys[:r % len(keys)]:
            times[(d, name)].append(triton.testing.do_bench(calls[d][name], return_mode="median"))
    return {key: (ffl if key[0] == "fwd" else 2.5 * ffl) / statistics.median(ms) / 1e9
            for key, ms in times.items()}


def bench_interleaved(libs, peers, B, Hq, Hkv, Nq, Nk, D, causal, dtype, do_fwd, do_bwd, rounds):
    """bench's problem and providers, timed by gpu_compare.time_interleaved (GPU time)."""
    calls, ffl = provider_calls(libs, peers, B, Hq, Hkv, Nq, Nk, D, causal, dtype, do_bwd)
    res = {}
    for d, flops, wanted in (("fwd", ffl, do_fwd), ("bwd", 2.5 * ffl, do_bwd)):
        if wanted:
            for name, ms in gpu_compare.time_interleaved(calls[d], rounds=rounds).items():
                res[(d, name)] = flops / ms / 1e9
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--seqlens", default="4096,16384")
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--peers", default="flash,cudnn")
    ap.add_argument("--fwd-only", action="store_true")
    ap.add_argument("--bwd-only", action="store_true")
    ap.add_argument("--alt", action="append", default=[],
                    metavar="NAME=env:VAR=VALUE|opt:FIELD=VALUE|PATH[+env:...|+opt:...]")
    ap.add_argument("--dropout", type=float, default=0.0, help="for ours and the peers")
    ap.add_argument("--shape", action="append", default=[], metavar="B,Hq,Hkv,Nq,Nk,D")
    ap.add_argument("--repeats", type=int, default=1, metavar="K",
                    help="time each provider K times in rotated orders, keep the median (do_bench only)")
    ap.add_argument("--interleaved", type=int, default=0, metavar="ROUNDS",
                    help="time with gpu_compare.py's interleaved rounds instead of do_bench")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    gpu_compare.DROPOUT = args.dropout
    fp = Flashpp(args.lib)
    libs = {"ours": fp, **alternatives(fp, args.alt)}
    peers = [p for p in args.peers.split(",") if p in PEERS]
    dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16}
    problems = []
    for D in [int(d) for d in args.dims.split(",")]:
        for N in [int(n) for n in args.seqlens.split(",")]:
            B = 2 if N >= 16384 else 4
            problems.append((B, 32, 32, N, N, D))
    for s in args.shape:
        problems.append(tuple(int(x) for x in s.split(",")))
    print(f"flashpp kernels: {fp.kernel_families()}", flush=True)
    names = list(libs) + peers
    method = (f"interleaved GPU time (gpu_compare.time_interleaved, {args.interleaved} rounds)"
              if args.interleaved else
              "do_bench" + (f" ({args.repeats} per provider, rotated; median of medians)" if args.repeats > 1 else ""))
    lines = [f"{method} medians, TFLOPS; GPU {torch.cuda.get_device_name()}, torch {torch.__version__}"]
    head = f"{'dir':3} {'dtype':5} {'B,Hq,Hkv,Nq,Nk,D':>24} {'causal':>6} | " + \
        " ".join(f"{n:>8}" for n in names) + " | " + " ".join(f"{'ours/' + p:>11}" for p in peers)
    for dname in args.dtypes.split(","):
        for prob in problems:
            for causal in (False, True):
                if args.interleaved:
                    res = bench_interleaved(libs, peers, *prob, causal, dtypes[dname], not args.bwd_only,
                                            not args.fwd_only, args.interleaved)
                else:
                    res = bench(libs, peers, *prob, causal, dtypes[dname], not args.bwd_only, not args.fwd_only,
                                args.repeats)
                for d in ("fwd", "bwd"):
                    if (d, "ours") not in res:
                        continue
                    cells = " ".join(f"{res.get((d, n), float('nan')):8.1f}" for n in names)
                    ratios = " ".join(f"{res[(d, 'ours')] / res[(d, p)]:11.2f}" if (d, p) in res else f"{'-':>11}"
                                      for p in peers)
                    line = f"{d:3} {dname:5} {','.join(map(str, prob)):>24} {('yes' if causal else 'no'):>6} | {cells} | {ratios}"
                    print(line, flush=True)
                    lines.append(line)
    out = "\n".join([lines[0], head] + lines[1:])
    os.makedirs(args.out, exist_ok=True)
    table = "interleaved_table.txt" if args.interleaved else "do_bench_table.txt"
    with open(os.path.join(args.out, table), "w") as f:
        f.write(out + "\n")
    print("\n" + out)


if __name__ == "__main__":
    main()
