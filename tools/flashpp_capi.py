#!/usr/bin/env python3
"""flashpp's CPU backend against torch's CPU SDPA, in one process, through the C API (ctypes over
libflashpp.so): no Python extension build needed.

    python3 tools/flashpp_capi.py --lib build/libflashpp.so --threads 2 [--N 4096 --D 128 --H 8]

Run one process per thread count: flashpp's OpenMP reads OMP_NUM_THREADS when it starts (this
script sets it before loading the library), torch gets torch.set_num_threads. Prints one line per
(dtype, causal, direction): GFLOPS of both (medians over --reps rounds, each round timing flashpp
and torch back to back) and their ratio, the largest difference between the two outputs
(relative to the largest output magnitude; backward: the largest of dQ's, dK's, dV's) as a
sanity check, and the CPU kernel that ran in each direction (flashpp_cpu_kernel: e.g. "amx bf16
backward (tdpbf16ps tiles)" for the bf16 backward on AMX). FLOPs: forward 4*B*H*N*N*D (halved
when causal), backward 2.5x the forward.

A/B of builds: --alt NAME=PATH (repeatable) times another libflashpp.so in the same rounds
(each direction right after ours), into outputs of its own, and prints one ALT line per (dtype,
causal, direction): its GFLOPS, its ratio to ours and to torch. --fwd-only skips the backward.

AVX2 proxy on an AVX-512 machine: FLASHPP_CPU_ISA=avx2 for flashpp; for torch
ATEN_CPU_CAPABILITY=avx2 alone is not enough (its SDPA's matrix products go to MKL, which still
runs its AVX-512 sgemm), so also MKL_ENABLE_INSTRUCTIONS=AVX2 (and ONEDNN_MAX_CPU_ISA=AVX2).
"""
import argparse
import ctypes
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flashpp_c import Tensor, Options  # noqa: E402  (the C API's structs, shared)


DTYPE_CODES = {"f32": 0, "f16": 1, "bf16": 2}


class Flashpp:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        L = self.lib
        L.flashpp_make_bhnd.restype = Tensor
        L.flashpp_make_bhnd.argtypes = [ctypes.c_void_p, ctypes.c_int] + [ctypes.c_int64] * 4 + [
            ctypes.c_int, ctypes.c_int32]
        L.flashpp_make_lse.restype = Tensor
        L.flashpp_make_lse.argtypes = [ctypes.c_void_p] + [ctypes.c_int64] * 3 + [ctypes.c_int,
                                                                                   ctypes.c_int32]
        L.flashpp_options_default.restype = Options
        P = ctypes.POINTER(Tensor)
        L.flashpp_forward.argtypes = [P, P, P, P, P, ctypes.POINTER(Options), ctypes.c_void_p]
        L.flashpp_backward.argtypes = [P] * 9 + [ctypes.POINTER(Options), ctypes.c_void_p]
        L.flashpp_last_error.restype = ctypes.c_char_p
        L.flashpp_cpu_kernel.restype = ctypes.c_char_p
        L.flashpp_cpu_kernel.argtypes = [ctypes.c_int, ctypes.c_int]

    def kernel(self, dtype, backward):
        return self.lib.flashpp_cpu_kernel(DTYPE_CODES[dtype], int(backward)).decode()

    def view(self, t, dtype):  # t: torch tensor [B, H, N, D], contiguous
        B, H, N, D = t.shape
        return self.lib.flashpp_make_bhnd(t.data_ptr(), DTYPE_CODES[dtype], B, N, H, D, 0, 0)

    def options(self, causal):
        o = self.lib.flashpp_options_default()
        o.causal = int(causal)
        o.backend = 1  # FLASHPP_BACKEND_CPU
        return o

    def check(self, status):
        if status != 0:
            raise RuntimeError(self.lib.flashpp_last_error().decode())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--B", type=int, default=1)
    ap.add_argument("--H", type=int, default=8)
    ap.add_argument("--N", type=int, default=4096)
    ap.add_argument("--D", type=int, default=128)
    ap.add_argument("--dtypes", default="f32,bf16")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--deadline", type=float, default=0, help="epoch seconds: skip what starts later")
    ap.add_argument("--alt", action="append", default=[], metavar="NAME=PATH",
                    help="another libflashpp.so whose forward is timed in the same rounds")
    ap.add_argument("--fwd-only", action="store_true")
    args = ap.parse_args()

    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # before libflashpp (and its OpenMP) loads
    fp = Flashpp(args.lib)
    alts = [(spec.split("=", 1)[0], Flashpp(spec.split("=", 1)[1])) for spec in args.alt]
    import torch
    torch.set_num_threads(args.threads)
    tdt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
    B, H, N, D = args.B, args.H, args.N, args.D
    print(f"# threads={args.threads} B={B} H={H} N={N} D={D} torch={torch.__version__} "
          f"torch_threads={torch.get_num_threads()}", flush=True)
    for dt in args.dtypes.split(","):
        print(f"# kernels {dt}: fwd {fp.kernel(dt, False)}; bwd {fp.kernel(dt, True).split(';')[0]}", flush=True)
    for dt in args.dtypes.split(","):
        for causal in [bool(int(c)) for c in args.causal.split(",")]:
            if args.deadline and time.time() > args.deadline:
                print(f"SKIP {dt} causal={int(causal)}: deadline", flush=True)
                continue
            g = torch.Generator().manual_seed(0)
            q, k, v, do = (torch.randn(B, H, N, D, generator=g).to(tdt[dt]) for _ in range(4))
            o = torch.empty_like(q)
            lse = torch.empty(B, H, N, dtype=torch.float32)
            dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
            V = {n: fp.view(t, dt) for n, t in dict(q=q, k=k, v=v, o=o, do=do, dq=dq, dk=dk, dv=dv).items()}
            L = fp.lib.flashpp_make_lse(lse.data_ptr(), B, H, N, 0, 0)
            opt = fp.options(causal)
            R = ctypes.byref
            fwd = lambda: fp.check(fp.lib.flashpp_forward(R(V["q"]), R(V["k"]), R(V["v"]), R(V["o"]), R(L), R(opt), None))
            bwd = lambda: fp.check(fp.lib.flashpp_backward(R(V["q"]), R(V["k"]), R(V["v"]), R(V["o"]), R(L), R(V["do"]),
                                                           R(V["dq"]), R(V["dk"]), R(V["dv"]), R(opt), None))
            flops = 4.0 * B * H * N * N * D * (0.5 if causal else 1.0)
            alt_runs = []  # per alt: its calls and its own outputs (kept alive with the calls)
            for name, lib in alts:
                ra = dict(name=name, o=torch.empty_like(q), lse=torch.empty(B, H, N, dtype=torch.float32),
                          dq=torch.empty_like(q), dk=torch.empty_like(k), dv=torch.empty_like(v))
                Va = {n: lib.view(t, dt) for n, t in dict(q=q, k=k, v=v, do=do, o=ra["o"], dq=ra["dq"],
                                                          dk=ra["dk"], dv=ra["dv"]).items()}
                La = lib.lib.flashpp_make_lse(ra["lse"].data_ptr(), B, H, N, 0, 0)
                opt_a = lib.options(causal)
                ra["fwd"] = (lambda lib=lib, Va=Va, La=La, opt_a=opt_a: lib.check(lib.lib.flashpp_forward(
                    R(Va["q"]), R(Va["k"]), R(Va["v"]), R(Va["o"]), R(La), R(opt_a), None)))
                ra["bwd"] = (lambda lib=lib, Va=Va, La=La, opt_a=opt_a: lib.check(lib.lib.flashpp_backward(
                    R(Va["q"]), R(Va["k"]), R(Va["v"]), R(Va["o"]), R(La), R(Va["do"]), R(Va["dq"]),
                    R(Va["dk"]), R(Va["dv"]), R(opt_a), None)))
                ra["keepalive"] = (Va, La, opt_a)
                alt_runs.append(ra)
            # torch's CPU SDPA, same tensors
            qt, kt, vt = (t.clone().requires_grad_(True) for t in (q, k, v))
            sdpa = torch.nn.functional.scaled_dot_product_attention
            with torch.no_grad():
                ref = sdpa(q, k, v, is_causal=causal)

            def timed(fn):
                t0 = time.perf_counter()
                fn()
                return time.perf_counter() - t0

            def torch_bwd_once():
                for t in (qt, kt, vt):
                    t.grad = None  # one backward's gradient, not a sum over repetitions
                out = sdpa(qt, kt, vt, is_causal=causal)
                t0 = time.perf_counter()
                out.backward(do)
                return time.perf_counter() - t0

            # Interleaved rounds (flashpp fwd, torch fwd, flashpp bwd, torch bwd), one warm-up
            # round first: on a shared machine the speed drifts over seconds, and interleaving
            # puts both libraries under the same drift. Medians over the rounds.
            times = {"fp_f": [], "t_f": [], "fp_b": [], "t_b": []}
            for ra in alt_runs:
                times.update({"alt_f_" + ra["name"]: [], "alt_b_" + ra["name"]: []})
            nan = float("nan")
            for rnd in range(args.reps + 1):
                round_times = dict(fp_f=timed(fwd))
                for ra in alt_runs:
                    round_times["alt_f_" + ra["name"]] = timed(ra["fwd"])
                round_times["t_f"] = timed(lambda: sdpa(q, k, v, is_causal=causal))
                if not args.fwd_only:
                    round_times["fp_b"] = timed(bwd)
                    for ra in alt_runs:
                        round_times["alt_b_" + ra["name"]] = timed(ra["bwd"])
                    round_times["t_b"] = torch_bwd_once()
                if rnd > 0:
                    for key, val in round_times.items():
                        times[key].append(val)
            med = {key: statistics.median(val) if val else nan for key, val in times.items()}
            t_fp_f, t_t_f, t_fp_b, t_t_b = (med[key] for key in ("fp_f", "t_f", "fp_b", "t_b"))
            scale = ref.float().abs().max().item()
            diff_o = (o.float() - ref.float()).abs().max().item() / scale
            def rel_diff(ours, theirs):
                theirs = theirs.float()
                return (ours.float() - theirs).abs().max().item() / max(theirs.abs().max().item(), 1e-30)
            # the backward's sanity figure: the largest of dQ's, dK's and dV's
            diff_dq = (nan if args.fwd_only else
                       max(rel_diff(dq, qt.grad), rel_diff(dk, kt.grad), rel_diff(dv, vt.grad)))
            for ra in alt_runs:
                name = ra["name"]
                rows = [("fwd", "alt_f_", "fp_f", t_t_f, flops, rel_diff(ra["o"], ref))]
                if not args.fwd_only:
                    rows.append(("bwd", "alt_b_", "fp_b", t_t_b, 2.5 * flops,
                                 max(rel_diff(ra["dq"], qt.grad), rel_diff(ra["dk"], kt.grad),
                                     rel_diff(ra["dv"], vt.grad))))
                for direction, key, ours, tt, f, diff in rows:
                    ta = med[key + name]
                    print(f"ALT {name} threads={args.threads} dtype={dt} causal={int(causal)} dir={direction} "
                          f"gflops={f / ta / 1e9:.0f} vs_ours={med[ours] / ta:.2f} "
                          f"vs_torch={tt / ta:.2f} maxdiff={diff:.1e}", flush=True)
            directions = (("fwd", t_fp_f, t_t_f, flops),) + (
                () if args.fwd_only else (("bwd", t_fp_b, t_t_b, 2.5 * flops),))
            for direction, tf, tt, f in directions:
                gf, gt = f / tf / 1e9, f / tt / 1e9
                kern = fp.kernel(dt, direction == "bwd").split(";")[0]
                print(f"ROW threads={args.threads} dtype={dt} causal={int(causal)} dir={direction} "
                      f"flashpp={gf:.0f} torch={gt:.0f} ratio={gf / gt:.2f} "
                      f"maxdiff={diff_o if direction == 'fwd' else diff_dq:.1e} kernel=\"{kern}\"", flush=True)


if __name__ == "__main__":
    main()
