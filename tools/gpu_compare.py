#!/usr/bin/env python3
"""flashpp vs torch SDPA (FLASH, CUDNN, EFFICIENT) on the standard grid of BENCHMARKING.md.

Calls flashpp through its C API (libflashpp.so, ctypes) on torch tensors, in the same process as
the peers, on the same inputs. Times with CUDA events: every implementation is warmed up, then
each round runs every implementation once, in orders balanced over the rounds (each first, and
after each other one, equally often), with the calls queued back to back (GPU time, see
time_interleaved); median over the rounds.
--alt NAME=PATH adds other builds of the library (variants) to the same interleaved timing;
--alt NAME=env:VAR=VALUE adds this build run with VAR=VALUE in the environment (e.g.
sm80=env:FLASHPP_CUDA_FAMILY=sm80: the portable kernel family against the Hopper one);
--alt NAME=opt:FIELD=VALUE this build with one field of the options changed (e.g.
det=opt:deterministic=1); several settings join with '+' (det80=opt:deterministic=1+env:FLASHPP_SM90_BACKWARD=0),
also after another build's path (v2det=build-v2/libflashpp.so+opt:deterministic=1). FLOPs: forward 4*B*Hq*Nq*Nk*D (halved when causal), backward 2.5x forward.
Prints, last, one table per direction: TFLOPS of each and ours/peer ratios.

  python3 tools/gpu_compare.py --lib build-gpu/libflashpp.so [--quick] [--fwd-only | --bwd-only]
      [--dims 64,128] [--seqlens 4096,16384] [--dtypes fp16,bf16] [--peers flash,cudnn] [--out DIR]
"""
import argparse
import ctypes
import math
import os
import shutil
import statistics
import sys
import tempfile
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flashpp_c import Options, Tensor, tensor_view  # noqa: E402  (the C API's structs, shared)


# --------------------------------------------------------------------------------------------
# flashpp through the C API (include/flashpp/flashpp.h)
# --------------------------------------------------------------------------------------------


DTYPE_CODES = {torch.float16: 1, torch.bfloat16: 2, torch.float32: 0}


class Flashpp:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.lib.flashpp_options_default.restype = Options
        self.lib.flashpp_last_error.restype = ctypes.c_char_p
        self.lib.flashpp_forward.argtypes = [ctypes.POINTER(Tensor)] * 5 + [ctypes.POINTER(Options), ctypes.c_void_p]
        self.lib.flashpp_backward.argtypes = [ctypes.POINTER(Tensor)] * 9 + [ctypes.POINTER(Options), ctypes.c_void_p]
        if hasattr(self.lib, "flashpp_cuda_kernel_families"):  # builds before 2026-11-24 lack it
            self.lib.flashpp_cuda_kernel_families.restype = ctypes.c_char_p
            self.lib.flashpp_cuda_kernel_families.argtypes = [ctypes.c_int]

    def kernel_families(self):
        """Which kernel families the library runs on device 0 now (no silent slow path)."""
        if not hasattr(self.lib, "flashpp_cuda_kernel_families"):
            return "unknown (this build predates flashpp_cuda_kernel_families)"
        return self.lib.flashpp_cuda_kernel_families(0).decode()

    @staticmethod
    def view(t):
        return tensor_view(t, DTYPE_CODES[t.dtype])

    def options(self, causal):
        o = self.lib.flashpp_options_default()
        o.causal = 1 if causal else 0
        o.backend = 2  # CUDA
        o.dropout_p = DROPOUT
        o.seed, o.offset = 1234, 0
        return o

    def _check(self, status, what):
        if status != 0:
            raise RuntimeError(f"flashpp {what}: {self.lib.flashpp_last_error().decode()}")

    def forward(self, q, k, v, o, lse, opts):
        """q, k, v, o: [B, N, H, D] tensors (any strides, last contiguous); lse [B, H, N] f32."""
        stream = torch.cuda.current_stream().cuda_stream
        views = [self.view(t) for t in (q, k, v, o, lse)]
        self._check(self.lib.flashpp_forward(*[ctypes.byref(x) for x in views], ctypes.byref(opts),
                                             ctypes.c_void_p(stream)), "forward")

    def backward(self, q, k, v, o, lse, do, dq, dk, dv, opts):
        stream = torch.cuda.current_stream().cuda_stream
        views = [self.view(t) for t in (q, k, v, o, lse, do, dq, dk, dv)]
        self._check(self.lib.flashpp_backward(*[ctypes.byref(x) for x in views], ctypes.byref(opts),
                                              ctypes.c_void_p(stream)), "backward")

    def backward_args(self, shape):
        """The arguments of one backward call (for self.backward(*args)) for a "B,H,N,D[,causal]"
        shape: bf16 [B, N, H, D] random inputs, O and lse from one forward. tools/bwd_trace.py
        and tools/kernel_times.py take their calls from here."""
        parts = shape.split(",")
        B, H, N, D = (int(x) for x in parts[:4])
        causal = len(parts) > 4 and parts[4] in ("1", "c", "causal", "yes")
        q, k, v, do = (torch.randn(B, N, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        o = torch.empty_like(q)
        lse = torch.empty(B, H, N, device="cuda", dtype=torch.float32)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        opts = self.options(causal)
        self.forward(q, k, v, o, lse, opts)
        return q, k, v, o, lse, do, dq, dk, dv, opts

    def bound(self, direction, tensors, opts):
        """A callable that runs forward or backward on `tensors` with the views built once, so
        the timed call is the library call itself (the peers' calls are torch's own API)."""
        fn = self.lib.flashpp_forward if direction == "fwd" else self.lib.flashpp_backward
        views = [self.view(t) for t in tensors]
        args = [ctypes.byref(x) for x in views] + [ctypes.byref(opts),
                                                     ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)]

        def run():
            self._check(fn(*args), direction)
        run.keep_alive = (views, opts)
        return run


class WithEnv:
    """A Flashpp whose calls run with one environment variable set (read by the library per call,
    e.g. FLASHPP_CUDA_FAMILY), restored after each call."""

    def __init__(self, fp, var, value):
        self.fp, self.var, self.value = fp, var, value

    def _wrap(self, fn):
        def run(*args):
            old = os.environ.get(self.var)
            os.environ[self.var] = self.value
            try:
                return fn(*args)
            finally:
                if old is None:
                    del os.environ[self.var]
                else:
                    os.environ[self.var] = old
        return run

    def backward(self, *args):
        return self._wrap(self.fp.backward)(*args)

    def bound(self, direction, tensors, opts):
        inner = self.fp.bound(direction, tensors, opts)
        run = self._wrap(inner)
        run.keep_alive = inner
        return run


class WithOption:
    """A Flashpp whose calls run with one field of the options changed (e.g. deterministic=1)."""

    def __init__(self, fp, field, value):
        self.fp, self.field = fp, field
        self.value = float(value) if field in ("dropout_p", "softcap", "softmax_scale") else int(value)

    def _opts(self, opts):
        changed = Options.from_buffer_copy(opts)
        setattr(changed, self.field, self.value)
        return changed

    def backward(self, *args):
        return self.fp.backward(*args[:-1], self._opts(args[-1]))

    def bound(self, direction, tensors, opts):
        return self.fp.bound(direction, tensors, self._opts(opts))


def wrapped(fp, spec):
    """The library with the settings of an --alt spec: env:VAR=VALUE and opt:FIELD=VALUE parts
    joined by '+'."""
    lib = fp
    for part in spec.split("+"):
        kind, setting = part.split(":", 1)
        key, value = setting.split("=", 1)
        lib = WithEnv(lib, key, value) if kind == "env" else WithOption(lib, key, value)
    return lib


def alternatives(fp, specs):
    """{name: library} of --alt specs NAME=env:...|opt:... (fp with settings), NAME=PATH (another
    build) or NAME=PATH+env:...+opt:... (another build with settings)."""
    alts = {}
    for spec in specs:
        name, path = spec.split("=", 1)
        if path.startswith(("env:", "opt:")):
            alts[name] = wrapped(fp, path)
            continue
        path, _, settings = path.partition("+")
        # A private copy: the dynamic loader would otherwise hand back the already-loaded library.
        copy = os.path.join(tempfile.mkdtemp(), f"libflashpp_{name}.so")
        shutil.copy(path, copy)
        alts[name] = wrapped(Flashpp(copy), settings) if settings else Flashpp(copy)
    return alts


def base_library(lib):
    while hasattr(lib, "fp"):
        lib = lib.fp
    return lib


# --------------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------------
def flops_fwd(B, H, N, D, causal):
    f = 4.0 * B * H * N * N * D
    return f / 2 if causal else f


ROUNDS, SYNCED = 30, False  # set from the command line in main()

DROPOUT = 0.0  # --dropout: applied to ours and the peers
PEERS = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
         ("efficient", SDPBackend.EFFICIENT_ATTENTION)]


def balanced_orders(n):
    """Orders of n implementations in which each one comes first equally often and follows every
    other one equally often (a Williams design: n rows for even n, 2n for odd n). The kernel
    that ran just before matters: after a long, power-hungry kernel the GPU runs at lower clocks
    for a while (seen here: identical code read 6% slower when it always followed cuDNN's
    kernel, in a plain rotation of a fixed order), so no implementation may keep one neighbour."""
    first = [0]
    low, high = 1, n - 1
    while len(first) < n:
        first.append(low)
        low += 1
        if len(first) < n:
            first.append(high)
            high -= 1
    rows = [[(x + k) % n for x in first] for k in range(n)]
    if n % 2:
        rows += [list(reversed(r)) for r in rows]
    return rows


def time_interleaved(fns, rounds=30, warmup=3, synced=False):
    """Median milliseconds of each fn in `fns` (name -> callable): at least `rounds` rounds (a
    whole number of balanced_orders' rows), each running every callable once, so that every
    implementation sees the same GPU clocks and temperature (a drift over the run moves all of
    them alike), and each comes first and follows each other one equally often.

    Each call is timed by a pair of CUDA events around it. By default the calls of a round are
    queued back to back behind a short GPU sleep, so the events measure GPU time alone, as in
    training where the host runs ahead of the GPU (triton.testing.do_bench times the same way).
    synced=True waits for every call before queueing the next one, so host-side launch work
    (Python, argument checks, kernel launches) counts too: the method of the tables before
    2026-11-23 evening."""
    names = list(fns)
    for name in names:
        for _ in range(warmup):
            fns[name]()
    torch.cuda.synchronize()
    samples = {name: [] for name in names}
    orders = balanced_orders(len(names))
    rounds = -(-rounds // len(orders)) * len(orders)
    for r in range(rounds):
        order = [names[i] for i in orders[r % len(orders)]]
        events = []
        if not synced:
            torch.cuda._sleep(2_000_000)  # ~1 ms of GPU work while the host queues the round
        for name in order:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fns[name]()
            end.record()
            if synced:
                end.synchronize()
            events.append((name, start, end))
        torch.cuda.synchronize()
        for name, start, end in events:
            samples[name].append(start.elapsed_time(end))
    return {name: statistics.median(t) for name, t in samples.items()}


def in_backend(backend, fn):
    """fn() run with torch SDPA forced to `backend` (the forward picks the kernel; a backward
    follows the kernel its forward used)."""
    def run():
        with sdpa_kernel(backend):
            return fn()
    return run


def bench_one(fp, B, H, N, D, causal, dtype, do_bwd, log, do_fwd=True, alts=None):
    torch.manual_seed(0)
    # flashpp gets [B, N, H, D] contiguous; SDPA gets the same memory viewed as [B, H, N, D].
    q, k, v, do = (torch.randn(B, N, H, D, device="cuda", dtype=dtype) for _ in range(4))
    o = torch.empty_like(q)
    lse = torch.empty(B, H, N, device="cuda", dtype=torch.float32)
    opts = fp.options(causal)
    ffl = flops_fwd(B, H, N, D, causal)

    def ours_fwd():
        fp.forward(q, k, v, o, lse, opts)

    # Sanity against SDPA (whichever backend torch picks).
    ref = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                         is_causal=causal).transpose(1, 2)
    ours_fwd()
    torch.cuda.synchronize()
    diff = (o.float() - ref.float()).abs().max().item()
    log(f"  check: max |ours - sdpa| = {diff:.3e}")
    if not (diff < 5e-2):
        log(f"  WARNING: forward differs from SDPA by {diff}")

    # Ours and each alternative build of the library (same buffers, same inputs).
    libs = {"ours": fp, **(alts or {})}
    fwd_fns, bwd_fns = {}, {}
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    for name, lib in libs.items():
        if do_fwd:
            fwd_fns[name] = lib.bound("fwd", (q, k, v, o, lse), opts)
        if do_bwd:
            try:
                lib.backward(q, k, v, o, lse, do, dq, dk, dv, opts)
                bwd_fns[name] = lib.bound("bwd", (q, k, v, o, lse, do, dq, dk, dv), opts)
            except RuntimeError as e:
                log(f"  {name} bwd unavailable: {e}")

    qt, kt, vt = (x.transpose(1, 2).detach().requires_grad_(do_bwd) for x in (q, k, v))
    dot = do.transpose(1, 2)
    for name, backend in PEERS:
        try:
            with sdpa_kernel(backend):
                out = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, dropout_p=DROPOUT)
            if do_fwd:
                fwd_fns[name] = in_backend(
                    backend, lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal,
                                                                    dropout_p=DROPOUT))
            if do_bwd:
                bwd_fns[name] = (lambda out=out: torch.autograd.grad(out, (qt, kt, vt), dot,
                                                                     retain_graph=True))
                bwd_fns[name]()
        except RuntimeError as e:
            log(f"  {name} unavailable: {str(e).splitlines()[0][:120]}")
    res = {}
    for direction, fns, flops in (("fwd", fwd_fns, ffl), ("bwd", bwd_fns, 2.5 * ffl)):
        if fns:
            for name, ms in time_interleaved(fns, rounds=ROUNDS, synced=SYNCED).items():
                res[(direction, name)] = flops / ms / 1e9
    del q, k, v, do, o, lse, fwd_fns, bwd_fns
    torch.cuda.empty_cache()
    return res


def table(rows, direction, alt_names=()):
    names = ["ours"] + list(alt_names) + [n for n, _ in PEERS]
    head = f"{'dtype':5} {'D':>4} {'N':>6} {'causal':>6} | " + " ".join(f"{n:>9}" for n in names) + \
        " | " + " ".join(f"{'/' + n:>10}" for n, _ in PEERS)
    lines = [f"[{direction}] TFLOPS and ours/peer", head, "-" * len(head)]
    for key, res in rows:
        dtype, D, N, causal = key
        tf = [res.get((direction, n)) for n in names]
        if tf[0] is None and all(t is None for t in tf):
            continue
        cells = " ".join(f"{t:9.1f}" if t is not None else f"{'-':>9}" for t in tf)
        ratios = " ".join(f"{tf[0] / t:10.2f}" if (tf[0] is not None and t) else f"{'-':>10}"
                          for t in tf[1 + len(alt_names):])
        lines.append(f"{dtype:5} {D:4d} {N:6d} {('yes' if causal else 'no'):>6} | {cells} | {ratios}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True, help="path to libflashpp.so")
    ap.add_argument("--quick", action="store_true", help="N in {4096, 16384} only")
    ap.add_argument("--fwd-only", action="store_true")
    ap.add_argument("--bwd-only", action="store_true", help="time the backward only (the forward still runs once)")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--seqlens", default=None, help="comma list (default 1024..16384)")
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--peers", default="flash,cudnn,efficient", help="comma list, or 'none'")
    ap.add_argument("--tag", default="", help="label of this run (e.g. a tile variant) in the log")
    ap.add_argument("--alt", action="append", default=[], metavar="NAME=PATH",
                    help="another build of libflashpp.so, or env:VAR=VALUE (this build with VAR set), "
                         "timed interleaved with ours (A/B of variants)")
    ap.add_argument("--dropout", type=float, default=0.0,
                    help="dropout probability for ours and the peers (an alt can set ours back: "
                         "--alt p0=opt:dropout_p=0)")
    ap.add_argument("--rounds", type=int, default=30, help="timed rounds (one call of each implementation per round)")
    ap.add_argument("--synced", action="store_true",
                    help="wait for each call before the next (host launch time counted; the old method)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()

    os.makedirs(args.out, exist_ok=True)
    suffix = f"_{args.tag}" if args.tag else ""
    logf = open(os.path.join(args.out, f"gpu_compare{suffix}.log"), "w")

    def log(msg):
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()

    global PEERS, ROUNDS, SYNCED, DROPOUT
    ROUNDS, SYNCED, DROPOUT = args.rounds, args.synced, args.dropout
    PEERS = [p for p in PEERS if p[0] in args.peers.split(",")]
    fp = Flashpp(args.lib)
    alts = alternatives(fp, args.alt)
    log(f"flashpp kernels: {fp.kernel_families()}")
    B, H = 4, 32
    seqlens = [int(s) for s in args.seqlens.split(",")] if args.seqlens else \
        ([4096, 16384] if args.quick else [1024, 2048, 4096, 8192, 16384])
    dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16}
    log(f"GPU: {torch.cuda.get_device_name()}  torch {torch.__version__}  cuDNN {torch.backends.cudnn.version()}"
        f"  CUDA {torch.version.cuda}  date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    log(f"B={B} Hq={H} layout [B,N,H,D]; CUDA-event medians of at least {args.rounds} rounds (whole "
        f"balanced designs), one call of each implementation per round, after 3 warm-ups; "
        + ("each call waited for (host launch time counted)" if args.synced else
           "calls queued back to back (GPU time)"))
    rows = []
    for dname in args.dtypes.split(","):
        for D in [int(d) for d in args.dims.split(",")]:
            for N in seqlens:
                for causal in (False, True):
                    log(f"{dname} D={D} N={N} causal={causal}")
                    res = bench_one(fp, B, H, N, D, causal, dtypes[dname], not args.fwd_only, log,
                                    do_fwd=not args.bwd_only, alts=alts)
                    for (direction, name), tf in sorted(res.items()):
                        log(f"  {direction} {name:10s} {tf:8.1f} TFLOPS")
                    rows.append(((dname, D, N, causal), res))
    tables = ([] if args.bwd_only else [table(rows, "fwd", alts)]) + \
        ([] if args.fwd_only else [table(rows, "bwd", alts)])
    out = "\n\n".join(tables)
    if args.tag:
        out = f"({args.tag})\n" + out
    with open(os.path.join(args.out, f"gpu_compare_table{suffix}.txt"), "w") as f:
        f.write(out + "\n")
    log("")
    log(out)


if __name__ == "__main__":
    main()
