#!/usr/bin/env python3
"""flashpp against torch's scaled_dot_product_attention backends, forward and backward.

The standard grid (BENCHMARKING.md): B=4, Hq=32, N = 1024..16384, D in {64, 128},
causal in {no, yes}, dtype in {fp16, bf16}. Providers: flashpp, and SDPA forced through
torch.nn.attention.sdpa_kernel to FLASH_ATTENTION, CUDNN_ATTENTION and EFFICIENT_ATTENTION.
Every provider gets the same [B, H, N, D] tensors (random normal) in the same process.

Timing: CUDA events around each call, warm-up first, the median of many repetitions, input
sets rotated for shapes that fit in L2. The backward is timed alone (autograd.grad with
retain_graph over one forward), for every provider alike. FLOPs: forward 4·B·H·N²·D (halved
when causal), backward 2.5× forward. Also printed: each provider's error against flashpp's
output (a sanity check) and the peak extra memory of one forward+backward.

    python tools/bench.py                      # the whole grid (CUDA)
    python tools/bench.py --quick              # fp16, N in {1024, 4096, 16384}
    python tools/bench.py --dtypes bf16 --dims 128 --seqlens 4096 8192 --out-dir bench-out

Writes bench-out/bench.csv and one PNG per dtype (TFLOPS against N, a line per provider).
"""
from __future__ import annotations

import argparse
import csv
import math
import os
import statistics
import sys
import time

import torch

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
L2_BYTES = 50 * 2**20


# ---- providers --------------------------------------------------------------------------------

def sdpa_provider(backend_name):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, backend_name)

    def run(q, k, v, causal):
        with sdpa_kernel(backend):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return run


def flashpp_provider():
    from flashpp.torch import scaled_dot_product_attention

    def run(q, k, v, causal):
        return scaled_dot_product_attention(q, k, v, is_causal=causal)

    return run


def providers(names):
    table = {
        "flashpp": flashpp_provider,
        "sdpa-flash": lambda: sdpa_provider("FLASH_ATTENTION"),
        "sdpa-cudnn": lambda: sdpa_provider("CUDNN_ATTENTION"),
        "sdpa-efficient": lambda: sdpa_provider("EFFICIENT_ATTENTION"),
        "sdpa-math": lambda: sdpa_provider("MATH"),
    }
    return {n: table[n]() for n in names}


# ---- timing -----------------------------------------------------------------------------------

def median_ms(fns, warmup_ms=100.0, rep_ms=400.0, min_reps=5, max_reps=200):
    """Median time of one call, cycling through `fns` (one per input set)."""
    fns[0]()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fns[0]()
    torch.cuda.synchronize()
    estimate = max((time.perf_counter() - t0) * 1e3, 1e-3)
    for i in range(max(1, int(warmup_ms / estimate))):
        fns[i % len(fns)]()
    reps = int(min(max_reps, max(min_reps, rep_ms / estimate)))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        starts[i].record()
        fns[i % len(fns)]()
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def flops(B, H, N, D, causal, mode):
    f = 4.0 * B * H * N * N * D * (0.5 if causal else 1.0)
    return f * (2.5 if mode == "bwd" else 1.0)


def rel_err(x, ref):
    x, ref = x.double(), ref.double()
    return float((x - ref).norm() / ref.norm())


# ---- one configuration ------------------------------------------------------------------------

def measure(run, B, H, N, D, causal, dtype):
    """{fwd_ms, bwd_ms, extra_mib, out} for one provider; raises if the provider refuses."""
    bytes_per_set = 4 * B * H * N * D * dtype.itemsize
    sets = 3 if 4 * bytes_per_set < 4 * L2_BYTES else 1
    gen = torch.Generator(device="cuda").manual_seed(0)
    inputs = [[torch.randn(B, H, N, D, device="cuda", dtype=dtype, generator=gen)
               .requires_grad_() for _ in range(3)] for _ in range(sets)]
    dout = torch.randn(B, H, N, D, device="cuda", dtype=dtype, generator=gen)
    out = run(*inputs[0], causal)
    fwd = median_ms([(lambda x=x: run(*x, causal)) for x in inputs])
    outs = [run(*x, causal) for x in inputs]
    bwd = median_ms([(lambda o=o, x=x: torch.autograd.grad(o, x, dout, retain_graph=True))
                     for o, x in zip(outs, inputs)])
    del outs
    # Peak memory of one forward+backward beyond its inputs and outputs.
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    o = run(*inputs[0], causal)
    grads = torch.autograd.grad(o, inputs[0], dout)
    torch.cuda.synchronize()
    io = o.numel() * o.element_size() + sum(g.numel() * g.element_size() for g in grads)
    extra = (torch.cuda.max_memory_allocated() - base - io) / 2**20
    return dict(fwd_ms=fwd, bwd_ms=bwd, extra_mib=max(extra, 0.0), out=out.detach())


# ---- output -----------------------------------------------------------------------------------

def progress(total):
    try:
        from tqdm import tqdm

        return tqdm(total=total, unit="cfg", dynamic_ncols=True, file=sys.stderr)
    except ImportError:
        class Plain:
            n = 0

            def update(self, k=1):
                self.n += k
                print(f"[{self.n}/{total}]", file=sys.stderr, flush=True)

            def set_postfix_str(self, s):
                pass

            def close(self):
                pass

        return Plain()


def print_table(rows, names):
    head = f"{'dtype':5} {'D':>4} {'N':>6} {'causal':6} {'mode':4} " + " ".join(
        f"{n:>14}" for n in names) + f" {'vs best peer':>12}"
    print(head)
    print("-" * len(head))
    keys = sorted({(r["dtype"], r["D"], r["N"], r["causal"]) for r in rows},
                  key=lambda k: (k[0], k[1], k[3], k[2]))
    for key in keys:
        for mode in ("fwd", "bwd"):
            cells, best_peer, ours = [], 0.0, None
            for n in names:
                r = next((r for r in rows if (r["dtype"], r["D"], r["N"], r["causal"]) == key
                          and r["provider"] == n), None)
                t = r and r.get(f"{mode}_tflops")
                cells.append(f"{t:14.1f}" if t else f"{'-':>14}")
                if t and n == "flashpp":
                    ours = t
                elif t:
                    best_peer = max(best_peer, t)
            ratio = f"{ours / best_peer:12.2f}" if ours and best_peer else f"{'-':>12}"
            print(f"{key[0]:5} {key[1]:4d} {key[2]:6d} {('yes' if key[3] else 'no'):6} "
                  f"{mode:4} " + " ".join(cells) + " " + ratio)
    print("(TFLOPS; 'vs best peer' = flashpp / the fastest SDPA backend)")


def plot(rows, names, out_dir):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("bench: matplotlib not installed, no plot", file=sys.stderr)
        return []
    files = []
    for dtype in sorted({r["dtype"] for r in rows}):
        dims = sorted({r["D"] for r in rows if r["dtype"] == dtype})
        fig, axes = plt.subplots(2, 2 * len(dims), figsize=(5 * 2 * len(dims), 8), squeeze=False)
        for ci, (D, mode) in enumerate((D, m) for D in dims for m in ("fwd", "bwd")):
            for ri, causal in enumerate((False, True)):
                ax = axes[ri][ci]
                for n in names:
                    pts = sorted((r["N"], r[f"{mode}_tflops"]) for r in rows
                                 if r["dtype"] == dtype and r["D"] == D and r["causal"] == causal
                                 and r["provider"] == n and r.get(f"{mode}_tflops"))
                    if pts:
                        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=n)
                ax.set_xscale("log", base=2)
                ax.set_title(f"{dtype} D={D} {'causal' if causal else 'non-causal'} {mode}")
                ax.set_xlabel("sequence length N")
                ax.set_ylabel("TFLOPS")
                ax.grid(True, alpha=0.3)
                ax.legend(fontsize=8)
        fig.suptitle(f"attention, B=4 H=32, {torch.cuda.get_device_name()}")
        fig.tight_layout()
        path = os.path.join(out_dir, f"bench_{dtype}.png")
        fig.savefig(path, dpi=80)
        plt.close(fig)
        files.append(path)
    return files


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtypes", nargs="+", default=["fp16", "bf16"], choices=list(DTYPES))
    ap.add_argument("--dims", nargs="+", type=int, default=[64, 128])
    ap.add_argument("--seqlens", nargs="+", type=int, default=[1024, 2048, 4096, 8192, 16384])
    ap.add_argument("--causal", nargs="+", default=["no", "yes"], choices=["no", "yes"])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--providers", nargs="+",
                    default=["flashpp", "sdpa-flash", "sdpa-cudnn", "sdpa-efficient"])
    ap.add_argument("--quick", action="store_true", help="fp16, N in {1024, 4096, 16384}")
    ap.add_argument("--out-dir", default="bench-out")
    args = ap.parse_args()
    if args.quick:
        args.dtypes, args.seqlens = ["fp16"], [1024, 4096, 16384]
    if not torch.cuda.is_available():
        sys.exit("bench.py: needs a CUDA GPU (torch.cuda.is_available() is False)")
    os.makedirs(args.out_dir, exist_ok=True)
    impls = providers(args.providers)
    configs = [(dt, D, N, c == "yes") for dt in args.dtypes for D in args.dims
               for c in args.causal for N in args.seqlens]
    fields = ["provider", "dtype", "B", "H", "D", "N", "causal", "fwd_ms", "bwd_ms",
              "fwd_tflops", "bwd_tflops", "extra_mib", "err_vs_first", "error"]
    csv_path = os.path.join(args.out_dir, "bench.csv")
    csv_file = open(csv_path, "w", newline="")  # written row by row: a cut-off run keeps its rows
    writer = csv.DictWriter(csv_file, fieldnames=fields)
    writer.writeheader()
    rows, bar = [], progress(len(configs) * len(impls))
    for dt, D, N, causal in configs:
        reference = None
        for name, run in impls.items():
            bar.set_postfix_str(f"{dt} D={D} N={N} causal={causal} {name}")
            row = dict(provider=name, dtype=dt, D=D, N=N, causal=causal, B=args.batch,
                       H=args.heads)
            try:
                m = measure(run, args.batch, args.heads, N, D, causal, DTYPES[dt])
                for mode in ("fwd", "bwd"):
                    ms = m[f"{mode}_ms"]
                    row[f"{mode}_ms"] = ms
                    row[f"{mode}_tflops"] = flops(args.batch, args.heads, N, D, causal, mode) / (
                        ms * 1e-3) / 1e12
                row["extra_mib"] = m["extra_mib"]
                if reference is None:
                    reference = m["out"]
                    row["err_vs_first"] = 0.0
                else:
                    row["err_vs_first"] = rel_err(m["out"], reference)
            except Exception as e:  # a backend that refuses this shape: recorded, not fatal
                row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
            rows.append(row)
            writer.writerow(row)
            csv_file.flush()
            torch.cuda.empty_cache()
            bar.update(1)
    bar.close()
    csv_file.close()
    pngs = plot(rows, list(impls), args.out_dir)
    errors = [r for r in rows if "error" in r]
    for r in errors:
        print(f"bench: {r['provider']} {r['dtype']} D={r['D']} N={r['N']} causal={r['causal']}: "
              f"{r['error']}")
    bad = [r for r in rows if r.get("err_vs_first", 0.0) > 2e-2 and not math.isnan(r["err_vs_first"])]
    for r in bad:
        print(f"bench: WARNING {r['provider']} output differs from {args.providers[0]}'s by "
              f"{r['err_vs_first']:.3g} at {r['dtype']} D={r['D']} N={r['N']} causal={r['causal']}")
    print(f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; B={args.batch} H={args.heads}")
    print(f"wrote {csv_path} {' '.join(pngs)}")
    print_table(rows, list(impls))


if __name__ == "__main__":
    main()
