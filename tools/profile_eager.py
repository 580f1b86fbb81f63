#!/usr/bin/env python3
"""Where the host time of an eager flashpp.attention call goes, layer by layer.

Each row times one layer of the call alone (host clock, blocks of back-to-back calls without
synchronising, the GPU synchronised between blocks), every row once per round in a rotating
order, median over the rounds: so a host that speeds up or slows down during the run moves
every row alike instead of the rows timed first.

  forward (no grad), outermost first; each row includes the ones below it:
    flashpp.attention          the public call (make_config, dtype checks, dispatch)
    torch functional           flashpp.torch.functional.attention (layout views, usable())
    _eager.attention           rng pair, the grad-mode branch
    _eager.forward             plan lookup, alignment, allocation of o (and lse), the launch
    plan.run, o preallocated   nanobind call + the C++ side
    C++ forward (time_run)     the C++ side alone: validation, dispatch, tensor maps, launch
  then the torch pieces the layers use (an allocation, a one-kernel op), the operator path
  (torch.library custom op + DLPack), SDPA for scale, the autograd layers, the backward's
  layers, and _C._host_probe: each CUDA runtime/driver step of a launch alone.

  python3 tools/profile_eager.py [--device cuda] [--B 1 --H 8 --N 128 --D 64] [--rounds 7]
  python3 tools/profile_eager.py --cprofile     # also cProfile of the call with autograd

Differences between adjacent rows are that layer's own cost (e.g. Python = flashpp.attention
- plan.run; nanobind and the GIL = plan.run - C++ forward). Rows a build lacks print n/a.
"""
import argparse
import contextlib
import statistics
import time

import torch

import flashpp
from flashpp._options import make_config
from flashpp.torch import _eager
from flashpp.torch import functional as torch_functional
from flashpp.torch import ops


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def block_us(fn, calls):
    """Microseconds per call of `calls` back-to-back calls (fn may return a time of its own)."""
    start = time.perf_counter()
    own = 0.0
    for _ in range(calls):
        r = fn()
        if isinstance(r, float):
            own += r
    elapsed = time.perf_counter() - start
    return (own if own > 0.0 else elapsed) / calls * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--B", type=int, default=1)
    ap.add_argument("--H", type=int, default=8)
    ap.add_argument("--N", type=int, default=128)
    ap.add_argument("--D", type=int, default=64)
    ap.add_argument("--calls", type=int, default=200, help="calls per timed block")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--cprofile", action="store_true")
    a = ap.parse_args()
    dev = a.device
    dtype = torch.float16 if dev == "cuda" else torch.float32
    torch.manual_seed(0)
    q, k, v, do = (torch.randn(a.B, a.N, a.H, a.D, device=dev, dtype=dtype) for _ in range(4))
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
    cfg = make_config(causal=True)
    stream = _eager._stream(q)

    # The cached plans of this shape (built by a first call), for the lower layers.
    flashpp.attention(q, k, v, causal=True)
    o_ref, lse_ref = _eager.forward(q, k, v, cfg, 0, 0)
    flashpp.attention(qg, kg, vg, causal=True).backward(do)

    def plan_of(cache, want_lse):
        for key, plan in cache.items():
            if plan is False or key[0] != q.shape:
                continue
            if isinstance(key[-1], bool) and key[-1] != want_lse:
                continue
            return plan
        return None

    fplan = plan_of(_eager._forward_plans, False) or plan_of(_eager._forward_plans, True)
    bplan = next((p for p in _eager._backward_plans.values() if p is not False), None)

    def plan_parts(plan):
        """(run, the nanobind plan object, workspace bytes) across the plan-cache formats."""
        if plan is None:
            return None, None, 0
        if isinstance(plan, tuple):
            return plan[0], getattr(plan[0], "__self__", None), plan[-1]
        return plan.run, plan, plan.workspace_bytes

    frun, fobj, fws_bytes = plan_parts(fplan)
    brun, bobj, bws_bytes = plan_parts(bplan)
    o_pre, lse_pre = torch.empty_like(q), torch.empty_like(lse_ref)
    fws = torch.empty(fws_bytes, dtype=torch.uint8, device=dev) if fws_bytes else None
    bws = torch.empty(bws_bytes, dtype=torch.uint8, device=dev) if bws_bytes else None
    fptrs = (q.data_ptr(), k.data_ptr(), v.data_ptr(), o_pre.data_ptr(), lse_pre.data_ptr())
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    bdata = [t.data_ptr() for t in (q, k, v, o_ref, lse_ref, do, dq, dk, dv)]
    ws_ptr = (lambda ws: 0 if ws is None else ws.data_ptr())

    def eager_forward_nolse():
        try:
            return _eager.forward(q, k, v, cfg, 0, 0, False)
        except TypeError:  # a build before write_lse
            return _eager.forward(q, k, v, cfg, 0, 0)

    def eager_attention_nolse():
        try:
            return _eager.attention(q, k, v, cfg, None, None, False)
        except TypeError:
            return _eager.attention(q, k, v, cfg, None, None)

    class Trivial(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):
            o = torch.empty_like(q)
            ctx.save_for_backward(q, k, v, o)
            return o

        @staticmethod
        def backward(ctx, g):
            return g, g, g

    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def sdpa_with(backend):
        from torch.nn.attention import sdpa_kernel

        def run():
            with sdpa_kernel(backend):
                return sdpa(qt, kt, vt, is_causal=True)
        run()
        return run

    rows = []  # (section, name, fn, calls, no_grad)

    def row(section, name, make, calls=None, no_grad=False):
        try:
            fn = make()
            fn()
            rows.append((section, name, fn, calls or a.calls, no_grad))
        except Exception as e:  # a layer this build or device lacks
            rows.append((section, name, None, str(e).splitlines()[0][:70], no_grad))

    S = "forward, no grad"
    row(S, "flashpp.attention", lambda: lambda: flashpp.attention(q, k, v, causal=True),
        no_grad=True)
    row(S, "torch functional", lambda: lambda: torch_functional.attention(
        q, k, v, cfg, seed=None, offset=None, layout="bnhd", return_lse=False,
        return_rng_state=False), no_grad=True)
    row(S, "_eager.attention", lambda: eager_attention_nolse, no_grad=True)
    row(S, "_eager.forward", lambda: eager_forward_nolse, no_grad=True)
    row(S, "_eager.forward, with lse", lambda: lambda: _eager.forward(q, k, v, cfg, 0, 0),
        no_grad=True)
    row(S, "plan.run, o preallocated", lambda: (lambda: frun(
        *fptrs[:4], fptrs[4], 0, 0, stream, ws_ptr(fws))) if frun else None)
    row(S, "C++ forward (time_run)", lambda: (lambda: fobj.time_run(
        1, *fptrs, stream, ws_ptr(fws))) if fobj is not None else None, calls=100)
    S = "torch pieces"
    row(S, "torch.empty_like(q)", lambda: lambda: torch.empty_like(q))
    row(S, "new_empty lse", lambda: lambda: q.new_empty(lse_ref.shape, dtype=torch.float32))
    row(S, "torch.neg(q, out=o): 1 kernel", lambda: lambda: torch.neg(q, out=o_pre))
    row(S, "operator path (custom op)", lambda: lambda: ops.attention_fwd(
        q, k, v, 0.0, True, False, -1, -1, 0.0, 0.0, 0, 0, False, "auto"), no_grad=True)
    if dev == "cuda":
        from torch.nn.attention import SDPBackend
        row(S, "sdpa-flash fwd", lambda: sdpa_with(SDPBackend.FLASH_ATTENTION), no_grad=True)
        row(S, "sdpa-cudnn fwd", lambda: sdpa_with(SDPBackend.CUDNN_ATTENTION), no_grad=True)
    S = "forward with grad"
    row(S, "flashpp.attention (grad)", lambda: lambda: flashpp.attention(qg, kg, vg, causal=True))
    row(S, "_Attention apply", lambda: lambda: getattr(_eager, "_apply", _eager._Attention.apply)(
        qg, kg, vg, (cfg, 0, 0)))
    row(S, "trivial autograd.Function", lambda: lambda: Trivial.apply(qg, kg, vg))
    S = "backward"
    row(S, "fwd+bwd (grads kept)", lambda: lambda: flashpp.attention(
        qg, kg, vg, causal=True).backward(do))
    row(S, "_eager.backward", lambda: lambda: _eager.backward(do, q, k, v, o_ref, lse_ref, cfg,
                                                              0, 0))
    row(S, "C++ backward (time_run)", lambda: (lambda: bobj.time_run(
        1, bdata, stream, ws_ptr(bws))) if bobj is not None else None, calls=100)

    live = [r for r in rows if r[2] is not None]
    for r in live:  # warm-up
        with torch.no_grad() if r[4] else contextlib.nullcontext():
            for _ in range(20):
                r[2]()
    sync()
    times = {r[1]: [] for r in live}
    for rnd in range(a.rounds):
        order = live[rnd % len(live):] + live[:rnd % len(live)]
        for section, name, fn, calls, no_grad in order:
            with torch.no_grad() if no_grad else contextlib.nullcontext():
                times[name].append(block_us(fn, calls))
            sync()

    print(f"device {torch.cuda.get_device_name() if dev == 'cuda' else 'cpu'}, torch "
          f"{torch.__version__}, flashpp {flashpp.__version__}; B={a.B} H={a.H} N={a.N} "
          f"D={a.D} causal {dtype}")
    if dev == "cuda":
        print("kernel families:", flashpp._C.cuda_kernel_families(q.device.index or 0))
    print(f"host us per call: median (min-max) of {a.rounds} rounds of {a.calls} calls, "
          "rows interleaved")
    section = None
    med = {}
    for sec, name, fn, calls, _ in rows:
        if sec != section:
            print(f"-- {sec}")
            section = sec
        if fn is None:
            print(f"  {name:32} n/a ({calls})")
            continue
        t = times[name]
        med[name] = statistics.median(t)
        print(f"  {name:32} {med[name]:8.1f}   ({min(t):.1f}-{max(t):.1f})")

    def diff(x, y):
        return f"{med[x] - med[y]:6.1f}" if x in med and y in med else "   n/a"
    print("-- layer costs (differences of medians)")
    print(f"  functional.py (make_config, checks)  {diff('flashpp.attention', 'torch functional')}")
    print(f"  torch functional + _eager.attention  {diff('torch functional', '_eager.forward')}")
    print(f"  _eager.forward Python + allocations  {diff('_eager.forward', 'plan.run, o preallocated')}")
    print(f"  nanobind call + GIL                  {diff('plan.run, o preallocated', 'C++ forward (time_run)')}")
    print(f"  C++ forward incl. launch             {med.get('C++ forward (time_run)', float('nan')):6.1f}")

    probe = getattr(flashpp._C, "_host_probe", None)
    if probe is not None and dev == "cuda":
        print("-- CUDA runtime/driver steps alone (_C._host_probe, us per call)")
        for name, us in sorted(probe(20000).items()):
            print(f"  {name:32} {us:8.3f}")
    elif dev == "cuda":
        print("-- _C._host_probe: n/a in this build")

    if a.cprofile:
        import cProfile
        import pstats
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(2000):
            flashpp.attention(qg, kg, vg, causal=True)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(14)


if __name__ == "__main__":
    main()
