#!/usr/bin/env python3
"""Benchmarks of issue 17 on one GPU: KV-cache decoding, paged vs contiguous caches, and packed
variable-length batches, through flashpp's C API (libflashpp.so, ctypes) on torch tensors.

  decode:  Nq in {1, 4}, B in {1, 16, 64}, Nk in {4096, 32768, 131072}, Hq=32, Hkv=8, D=128, bf16,
           no mask (every query sees every key). Reports microseconds, GB/s of K/V read
           (B x Nk x Hkv x D x 2 bytes x 2 tensors / time), that as % of the device-to-device copy
           bandwidth measured in the same run (a torch copy of a 2 GiB buffer; bytes read + written
           / time), and the ratio to the faster of torch SDPA's FLASH and CUDNN backends
           (enable_gqa=True; "n/a" where a backend refuses the shapes).
  paged:   Nq=1, page sizes 16/64/256 (pages in random order) against the contiguous cache.
  varlen:  64 sequences of random lengths in [100, 8192] (seed 0), Hq=Hkv=16, D=128, bf16, causal,
           against one dense batch of 64 sequences of the mean length: TFLOPS of each (causal
           FLOPs: 2 x Nq x Nk x D x H per sequence and direction's multiplier), forward and backward.

Timing: CUDA events around each call, calls of one round queued back to back; L2 is flushed
(a 256 MiB write) before every timed call, so the caches are read from memory; median of the
rounds. flashpp is called with validate_indices = 0 for decoding (no host copy). Varlen reads
cu_seqlens on the host each call (a synchronisation), which the timing includes.

A/B of the decode variants in the same process (the library reads FLASHPP_DECODE_VARIANT and
FLASHPP_DECODE_SPLITS at every call; each callable sets them around its own call, so the variants
are timed interleaved, in the same rounds as SDPA):
  --ab                 adds "legacy" (FLASHPP_DECODE_VARIANT=legacy: the split heuristic and
                       combine kernel before this change) to every decode and paged cell;
  --sweep-splits 8,16  adds forced split counts (FLASHPP_DECODE_SPLITS) of the default variant
                       on the B = 1 decode cells.
The extra timings go to a table after the main ones (decode_ab.txt).

  python3 tools/decode_bench.py --lib build/libflashpp.so [--quick] [--out DIR] [--deadline S]
                                [--ab] [--sweep-splits LIST] [--decode-only]
"""
import argparse
import ctypes
import math
import os
import random
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flashpp_c import Options, KvCache, PackedBatch, Tensor, tensor_view  # noqa: E402  (the C API's structs, shared)


DTYPES = {torch.float16: 1, torch.bfloat16: 2, torch.float32: 0, torch.int32: 5}  # FLASHPP_I32 = 5


def view(t):
    return tensor_view(t, DTYPES[t.dtype])


class Flashpp:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        L = self.lib
        L.flashpp_options_default.restype = Options
        L.flashpp_last_error.restype = ctypes.c_char_p
        L.flashpp_forward_kvcache_workspace_size.argtypes = [
            ctypes.POINTER(Tensor), ctypes.POINTER(KvCache), ctypes.POINTER(Options),
            ctypes.POINTER(ctypes.c_size_t)]
        L.flashpp_forward_kvcache.argtypes = [
            ctypes.POINTER(Tensor), ctypes.POINTER(KvCache), ctypes.POINTER(Tensor),
            ctypes.POINTER(Tensor), ctypes.POINTER(Options), ctypes.c_void_p, ctypes.c_void_p,
            ctypes.c_size_t]
        L.flashpp_forward_varlen.argtypes = [ctypes.POINTER(Tensor)] * 3 + [
            ctypes.POINTER(PackedBatch), ctypes.POINTER(Tensor), ctypes.POINTER(Tensor),
            ctypes.POINTER(Options), ctypes.c_void_p]
        L.flashpp_backward_varlen.argtypes = [ctypes.POINTER(Tensor)] * 9 + [
            ctypes.POINTER(PackedBatch), ctypes.POINTER(Options), ctypes.c_void_p]
        L.flashpp_forward.argtypes = [ctypes.POINTER(Tensor)] * 5 + [ctypes.POINTER(Options), ctypes.c_void_p]
        L.flashpp_backward.argtypes = [ctypes.POINTER(Tensor)] * 9 + [ctypes.POINTER(Options), ctypes.c_void_p]

    def check(self, status, what):
        if status != 0:
            raise RuntimeError(f"flashpp {what}: {self.lib.flashpp_last_error().decode()}")

    def options(self, causal=False, bottom_right=False):
        o = self.lib.flashpp_options_default()
        o.causal = 1 if causal else 0
        o.alignment = 1 if bottom_right else 0
        o.backend = 2
        return o

    def kvcache_call(self, q, k_cache, v_cache, seqlens, block_table, o, lse, env=None):
        """A callable running flashpp_forward_kvcache with views built once; `env` (name -> value)
        is set around the workspace query and around every call (then restored)."""
        with scoped_env(env):
            return self._kvcache_call(q, k_cache, v_cache, seqlens, block_table, o, lse, env)

    def _kvcache_call(self, q, k_cache, v_cache, seqlens, block_table, o, lse, env):
        keep = [view(t) for t in (q, k_cache, v_cache, seqlens, o, lse)]
        bt = view(block_table) if block_table is not None else None
        cache = KvCache(ctypes.pointer(keep[1]), ctypes.pointer(keep[2]), ctypes.pointer(keep[3]),
                        ctypes.pointer(bt) if bt is not None else None, None, None, 0)
        opts = self.options()
        nbytes = ctypes.c_size_t(0)
        self.check(self.lib.flashpp_forward_kvcache_workspace_size(
            ctypes.byref(keep[0]), ctypes.byref(cache), ctypes.byref(opts), ctypes.byref(nbytes)),
            "forward_kvcache_workspace_size")
        ws = torch.empty(max(nbytes.value, 1), dtype=torch.uint8, device=q.device)
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)

        def run():
            with scoped_env(env):
                self.check(self.lib.flashpp_forward_kvcache(
                    ctypes.byref(keep[0]), ctypes.byref(cache), ctypes.byref(keep[4]),
                    ctypes.byref(keep[5]), ctypes.byref(opts), stream,
                    ctypes.c_void_p(ws.data_ptr()), nbytes.value), "forward_kvcache")
        # The torch tensors too: a view does not own its memory, and an output made for this call
        # alone (torch.empty_like(q) in the argument list) would otherwise go back to the
        # allocator and be handed to the next tensor made, which this call then overwrites
        # (session 12: a legacy variant's output landed in the next cell's block table).
        run.keep = (keep, bt, cache, opts, ws, (q, k_cache, v_cache, seqlens, block_table, o, lse))
        return run


class scoped_env:
    """Sets environment variables (os.environ, which putenv()s them for the library's getenv) for
    a with-block and restores the previous values after; None or {} does nothing."""

    def __init__(self, env):
        self.env = env or {}

    def __enter__(self):
        self.old = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)

    def __exit__(self, *exc):
        for k, v in self.old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# Variants of the flashpp decode timed beside the default one: name -> environment.
EXTRA_VARIANTS = {}
SWEEP_SPLITS = []

_FLUSH = None


def flush_l2():
    global _FLUSH
    if _FLUSH is None:
        _FLUSH = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    _FLUSH.zero_()


def time_fns(fns, rounds, warmup=2):
    """Median ms of each callable: rounds of every callable once (rotated order), each call
    between CUDA events after an L2 flush, queued back to back."""
    names = list(fns)
    for n in names:
        for _ in range(warmup):
            fns[n]()
    torch.cuda.synchronize()
    samples = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        events = []
        for n in order:
            flush_l2()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fns[n]()
            e.record()
            events.append((n, s, e))
        torch.cuda.synchronize()
        for n, s, e in events:
            samples[n].append(s.elapsed_time(e))
    return {n: statistics.median(v) for n, v in samples.items()}


def copy_bandwidth():
    """Device-to-device copy, GB/s (bytes read + bytes written per second), 2 GiB buffers."""
    src = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = time_fns({"copy": lambda: dst.copy_(src)}, rounds=10)["copy"]
    del src, dst
    torch.cuda.empty_cache()
    return 2 * (2 << 30) / (ms * 1e-3) / 1e9


def sdpa_fn(backend, q, k, v):
    """SDPA on [B, H, N, D] views of our [B, N, H, D] tensors; None when the backend refuses."""
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def run():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)
    try:
        run()
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001  (a backend that refuses these shapes)
        return None, f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
    return run, None


def decode_grid(fp, quick, log, deadline, gbps_copy):
    rows = []
    Hq, Hkv, D, dtype = 32, 8, 128, torch.bfloat16
    nks = [4096, 32768] if quick else [4096, 32768, 131072]
    rounds = 5 if quick else 10
    for Nq in (1, 4):
        for B in (1, 16, 64):
            for Nk in nks:
                if time.time() > deadline:
                    log(f"decode Nq={Nq} B={B} Nk={Nk}: skipped (deadline)")
                    continue
                torch.manual_seed(0)
                q = torch.randn(B, Nq, Hq, D, device="cuda", dtype=dtype)
                k = torch.randn(B, Nk, Hkv, D, device="cuda", dtype=dtype)
                v = torch.randn_like(k)
                seqlens = torch.full((B,), Nk, dtype=torch.int32, device="cuda")
                o = torch.empty_like(q)
                lse = torch.empty(B, Hq, Nq, dtype=torch.float32, device="cuda")
                fns = {"flashpp": fp.kvcache_call(q, k, v, seqlens, None, o, lse)}
                extra = dict(EXTRA_VARIANTS)
                if B == 1:
                    extra.update({f"splits={n}": {"FLASHPP_DECODE_SPLITS": str(n)}
                                  for n in SWEEP_SPLITS})
                extra_out = {}
                for name, env in extra.items():
                    extra_out[name] = torch.empty_like(q)
                    fns[name] = fp.kvcache_call(q, k, v, seqlens, None, extra_out[name], lse, env)
                notes = []
                for name, backend in (("sdpa-flash", SDPBackend.FLASH_ATTENTION),
                                      ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION)):
                    fn, why = sdpa_fn(backend, q, k, v)
                    if fn is None:
                        notes.append(f"{name}: {why}")
                    else:
                        fns[name] = fn
                # Correctness spot check against the fastest peer that ran (or the math backend).
                fns["flashpp"]()
                ref = None
                for name in ("sdpa-flash", "sdpa-cudnn"):
                    if name in fns:
                        ref = fns[name]().transpose(1, 2)
                        break
                for name in extra:
                    fns[name]()
                if ref is not None:
                    for name, out in [("flashpp", o)] + list(extra_out.items()):
                        err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
                        if not err < 2e-2:
                            raise RuntimeError(f"decode Nq={Nq} B={B} Nk={Nk}: {name} differs "
                                               f"from SDPA: relative error {err:.3g}")
                ms = time_fns(fns, rounds)
                kv_bytes = 2 * B * Nk * Hkv * D * 2
                gbps = kv_bytes / (ms["flashpp"] * 1e-3) / 1e9
                peers = [ms[n] for n in ("sdpa-flash", "sdpa-cudnn") if n in ms]
                ratio = min(peers) / ms["flashpp"] if peers else float("nan")
                row = dict(Nq=Nq, B=B, Nk=Nk, us=ms["flashpp"] * 1e3, gbps=gbps,
                           pct=100 * gbps / gbps_copy, ratio=ratio,
                           flash=ms.get("sdpa-flash", float("nan")) * 1e3,
                           cudnn=ms.get("sdpa-cudnn", float("nan")) * 1e3,
                           extra={n: ms[n] * 1e3 for n in extra})
                rows.append(row)
                log(f"decode {row}" + (f"  ({'; '.join(notes)})" if notes else ""))
                del q, k, v, o, lse, fns, ref, extra_out
                torch.cuda.empty_cache()
    return rows


def paged_grid(fp, quick, log, deadline):
    rows = []
    Hq, Hkv, D, dtype = 32, 8, 128, torch.bfloat16
    shapes = [(16, 32768), (64, 4096)] if not quick else [(16, 32768)]
    for B, Nk in shapes:
        if time.time() > deadline:
            log(f"paged B={B} Nk={Nk}: skipped (deadline)")
            continue
        torch.manual_seed(0)
        q = torch.randn(B, 1, Hq, D, device="cuda", dtype=dtype)
        k = torch.randn(B, Nk, Hkv, D, device="cuda", dtype=dtype)
        v = torch.randn_like(k)
        seqlens = torch.full((B,), Nk, dtype=torch.int32, device="cuda")
        o_ref = torch.empty_like(q)
        lse = torch.empty(B, Hq, 1, dtype=torch.float32, device="cuda")
        fns = {"contiguous": fp.kvcache_call(q, k, v, seqlens, None, o_ref, lse)}
        for name, env in EXTRA_VARIANTS.items():
            fns[f"contiguous {name}"] = fp.kvcache_call(q, k, v, seqlens, None, torch.empty_like(q),
                                                        lse, env)
        outs = {}
        for page in (16, 64, 256):
            pages_per_seq = Nk // page
            perm = torch.randperm(B * pages_per_seq, device="cuda").to(torch.int32)
            table = perm.view(B, pages_per_seq).contiguous()
            kp = torch.empty(B * pages_per_seq, page, Hkv, D, device="cuda", dtype=dtype)
            vp = torch.empty_like(kp)
            kp[table.long().flatten()] = k.view(B * pages_per_seq, page, Hkv, D)
            vp[table.long().flatten()] = v.view(B * pages_per_seq, page, Hkv, D)
            o = torch.empty_like(q)
            outs[page] = (o, kp, vp, table)
            fns[f"page{page}"] = fp.kvcache_call(q, kp, vp, seqlens, table, o, lse)
            for name, env in EXTRA_VARIANTS.items():
                fns[f"page{page} {name}"] = fp.kvcache_call(q, kp, vp, seqlens, table,
                                                            torch.empty_like(q), lse, env)
        for f in fns.values():
            f()
        for page, (o, *_rest) in outs.items():
            if not torch.equal(o, o_ref):
                err = ((o.float() - o_ref.float()).norm() / o_ref.float().norm()).item()
                if not err < 1e-3:
                    raise RuntimeError(f"paged page={page} B={B} Nk={Nk}: differs from the "
                                       f"contiguous cache: relative error {err:.3g}")
        ms = time_fns(fns, 10)
        for page in (16, 64, 256):
            rows.append(dict(B=B, Nk=Nk, page=page, us=ms[f"page{page}"] * 1e3,
                             contiguous_us=ms["contiguous"] * 1e3,
                             ratio=ms[f"page{page}"] / ms["contiguous"],
                             extra={n: (ms[f"page{page} {n}"] * 1e3, ms[f"contiguous {n}"] * 1e3)
                                    for n in EXTRA_VARIANTS}))
            log(f"paged {rows[-1]}")
        del q, k, v, fns, outs
        torch.cuda.empty_cache()
    return rows


def varlen_bench(fp, quick, log, deadline):
    if time.time() > deadline:
        log("varlen: skipped (deadline)")
        return None
    H, D, dtype, nseq = 16, 128, torch.bfloat16, 64
    rnd = random.Random(0)
    lens = [rnd.randint(100, 8192) for _ in range(nseq)]
    mean = round(sum(lens) / nseq)
    total = sum(lens)
    torch.manual_seed(0)
    dev = "cuda"
    cu = torch.tensor([0] + [sum(lens[:i + 1]) for i in range(nseq)], dtype=torch.int32, device=dev)
    q = torch.randn(total, H, D, device=dev, dtype=dtype)
    k, v, do = torch.randn_like(q), torch.randn_like(q), torch.randn_like(q)
    o, dq, dk, dv = (torch.zeros_like(q) for _ in range(4))
    lse = torch.empty(H, total, dtype=torch.float32, device=dev)
    V = [view(t) for t in (q, k, v, o, lse, do, dq, dk, dv, cu)]
    batch = PackedBatch(ctypes.pointer(V[9]), ctypes.pointer(V[9]), max(lens), max(lens))
    opts = fp.options(causal=True)
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    r = ctypes.byref

    def varlen_fwd():
        fp.check(fp.lib.flashpp_forward_varlen(r(V[0]), r(V[1]), r(V[2]), r(batch), r(V[3]),
                                               r(V[4]), r(opts), stream), "forward_varlen")

    def varlen_bwd():
        fp.check(fp.lib.flashpp_backward_varlen(r(V[0]), r(V[1]), r(V[2]), r(V[3]), r(V[4]),
                                                r(V[5]), r(V[6]), r(V[7]), r(V[8]), r(batch),
                                                r(opts), stream), "backward_varlen")

    # The dense batch of the mean length.
    qd = torch.randn(nseq, mean, H, D, device=dev, dtype=dtype)
    kd, vd, dod = torch.randn_like(qd), torch.randn_like(qd), torch.randn_like(qd)
    od, dqd, dkd, dvd = (torch.empty_like(qd) for _ in range(4))
    lsed = torch.empty(nseq, H, mean, dtype=torch.float32, device=dev)
    W = [view(t) for t in (qd, kd, vd, od, lsed, dod, dqd, dkd, dvd)]

    def dense_fwd():
        fp.check(fp.lib.flashpp_forward(*[r(x) for x in W[:5]], r(opts), stream), "forward")

    def dense_bwd():
        fp.check(fp.lib.flashpp_backward(*[r(x) for x in W], r(opts), stream), "backward")

    varlen_fwd()
    dense_fwd()
    # Oracle spot check: sequence 3 of the packed batch against a dense call on it alone.
    s = slice(int(cu[3]), int(cu[4]))
    q3, k3, v3 = (t[s].unsqueeze(0).contiguous() for t in (q, k, v))
    o3, l3 = torch.empty_like(q3), torch.empty(1, H, lens[3], dtype=torch.float32, device=dev)
    fp.check(fp.lib.flashpp_forward(*[r(view(t)) for t in (q3, k3, v3, o3, l3)], r(opts), stream),
             "forward")
    torch.cuda.synchronize()
    if not torch.equal(o3[0], o[s]):
        err = ((o3[0].float() - o[s].float()).norm() / o3.float().norm()).item()
        if not err < 1e-3:
            raise RuntimeError(f"varlen: sequence 3 differs from its dense result: {err:.3g}")
    rounds = 5 if quick else 10
    ms_f = time_fns({"varlen": varlen_fwd, "dense": dense_fwd}, rounds)
    ms_b = time_fns({"varlen": varlen_bwd, "dense": dense_bwd}, rounds)
    flops_var = sum(2.0 * 2 * H * n * n * D / 2 for n in lens)  # causal: half of 4*H*N^2*D
    flops_dense = nseq * 2.0 * 2 * H * mean * mean * D / 2
    res = {}
    for name, ms, mult in (("fwd", ms_f, 1.0), ("bwd", ms_b, 2.5)):
        tv = flops_var * mult / (ms["varlen"] * 1e-3) / 1e12
        td = flops_dense * mult / (ms["dense"] * 1e-3) / 1e12
        res[name] = dict(varlen_ms=ms["varlen"], dense_ms=ms["dense"], varlen_tflops=tv,
                         dense_tflops=td, ratio=tv / td)
        log(f"varlen {name}: {res[name]}")
    res["mean"] = mean
    return res


def format_tables(dec, paged, var, gbps_copy):
    """The summary tables (lines) and the variants' table (lines, empty without variants)."""
    lines = [f"decode (bf16, Hq=32, Hkv=8, D=128; copy bandwidth {gbps_copy:.0f} GB/s): "
             "targets >= 80% of copy, >= 1.3x the faster SDPA"]
    lines.append(f"{'Nq':>3} {'B':>3} {'Nk':>7} {'us':>9} {'GB/s':>7} {'%copy':>6} "
                 f"{'flash us':>9} {'cudnn us':>9} {'x SDPA':>7}")
    for d in dec:
        lines.append(f"{d['Nq']:>3} {d['B']:>3} {d['Nk']:>7} {d['us']:>9.1f} {d['gbps']:>7.0f} "
                     f"{d['pct']:>5.0f}% {d['flash']:>9.1f} {d['cudnn']:>9.1f} {d['ratio']:>7.2f}")
    lines.append("paged vs contiguous (Nq=1; target: ratio <= 1.10)")
    lines.append(f"{'B':>3} {'Nk':>7} {'page':>5} {'us':>9} {'contig us':>10} {'ratio':>6}")
    for p in paged:
        lines.append(f"{p['B']:>3} {p['Nk']:>7} {p['page']:>5} {p['us']:>9.1f} "
                     f"{p['contiguous_us']:>10.1f} {p['ratio']:>6.3f}")
    if var:
        lines.append(f"varlen (64 seqs, 100..8192, mean {var['mean']}; H=16, D=128, bf16, causal; "
                     "target: ratio >= 0.95)")
        for name in ("fwd", "bwd"):
            x = var[name]
            lines.append(f"  {name}: varlen {x['varlen_tflops']:.0f} TFLOPS ({x['varlen_ms']:.2f} ms), "
                         f"dense {x['dense_tflops']:.0f} TFLOPS ({x['dense_ms']:.2f} ms), "
                         f"ratio {x['ratio']:.3f}")
    ab = []
    extra_names = sorted({n for d in dec for n in d["extra"]}, key=lambda n: (n != "legacy", n))
    if extra_names:
        ab = ["decode variants, same rounds (us; 'x' = that variant's time / the default's: > 1 means "
              "the default is faster)"]
        ab.append(f"{'Nq':>3} {'B':>3} {'Nk':>7} {'default':>9} " +
                  " ".join(f"{n:>14}" for n in extra_names))
        for d in dec:
            cells = []
            for n in extra_names:
                t = d["extra"].get(n)
                cells.append(f"{t:>7.1f} {t / d['us']:>5.2f}x" if t is not None else f"{'':>14}")
            ab.append(f"{d['Nq']:>3} {d['B']:>3} {d['Nk']:>7} {d['us']:>9.1f} " + " ".join(cells))
        for p in paged:
            for n, (tp, tc) in p["extra"].items():
                ab.append(f"paged B={p['B']} Nk={p['Nk']} page={p['page']}: default {p['us']:.1f} us "
                          f"(contiguous {p['contiguous_us']:.1f}), {n} {tp:.1f} us "
                          f"(contiguous {tc:.1f})")
        lines.append("")
        lines.extend(ab)
    return lines, ab


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=".")
    ap.add_argument("--deadline", type=float, default=1e9, help="seconds from now")
    ap.add_argument("--ab", action="store_true",
                    help="also time FLASHPP_DECODE_VARIANT=legacy, interleaved")
    ap.add_argument("--sweep-splits", default="",
                    help="comma-separated forced split counts for the B = 1 decode cells")
    ap.add_argument("--decode-only", action="store_true", help="skip the paged and varlen parts")
    ap.add_argument("--paged-only", action="store_true", help="only the paged part")
    args = ap.parse_args()
    if args.ab:
        EXTRA_VARIANTS["legacy"] = {"FLASHPP_DECODE_VARIANT": "legacy"}
    SWEEP_SPLITS.extend(int(x) for x in args.sweep_splits.split(",") if x.strip())
    deadline = time.time() + args.deadline
    os.makedirs(args.out, exist_ok=True)
    logf = open(os.path.join(args.out, "decode_bench.log"), "w")

    def log(msg):
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()

    if not torch.cuda.is_available():
        raise SystemExit("decode_bench: no CUDA device visible to torch")
    fp = Flashpp(args.lib)
    log(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    gbps_copy = copy_bandwidth()
    log(f"copy bandwidth: {gbps_copy:.0f} GB/s (read + write)")
    dec = [] if args.paged_only else decode_grid(fp, args.quick, log, deadline, gbps_copy)
    paged = [] if args.decode_only else paged_grid(fp, args.quick, log, deadline)
    var = None if args.decode_only or args.paged_only else varlen_bench(fp, args.quick, log, deadline)

    lines, ab = format_tables(dec, paged, var, gbps_copy)
    if ab:
        with open(os.path.join(args.out, "decode_ab.txt"), "w") as f:
            f.write("\n".join(ab) + "\n")
    table = "\n".join(lines)
    with open(os.path.join(args.out, "decode_tables.txt"), "w") as f:
        f.write(table + "\n")
    print()
    print(table)


if __name__ == "__main__":
    main()
