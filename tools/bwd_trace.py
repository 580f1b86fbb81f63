#!/usr/bin/env python3
"""Where the sm90 backward's main-kernel time goes, per block: reads the stamps of a traced build.

Build with -DFLASHPP_SM90_BWD_TRACE=1 (src/cuda/sm90/backward/trace.cuh; `tools/object_variant.sh
BUILD OUT "-DFLASHPP_SM90_BWD_TRACE=1" 'sm90_bwd_'` rebuilds every sm90 backward object, as the
parameters they share require), run a backward call with FLASHPP_SM90_BWD_TRACE_FILE=PATH (the
last launch's stamps are kept; --run does that for one shape through the C API), then

    python3 tools/bwd_trace.py PATH [PATH...]
    python3 tools/bwd_trace.py --run --lib LIB --out PATH B,H,N,D[,causal]

Per file: median SM cycles of each phase of a block (consumer 0's stamps):
to K/V (start -> K and V in shared memory), first step, steps (the rest; per step in brackets),
dQ drain (the last reduce-adds complete), dK/dV stores; the block's fixed cost (its cycles minus
its steps at the steady per-step time); and from the global timer: the kernel's span, the SMs'
busy share of it, the gap on an SM between one block's end and the next one's start, and how many
blocks start within 2 us of the kernel's first.
"""
import os
import statistics
import struct
import sys

EVENTS = ["block_start_ns", "producer_start", "kv_issued", "loads_issued", "consumer_start",
          "kv_ready", "step0_done", "loop_done", "dq_done", "stored", "end_ns", "sm", "steps"]
E = {name: i for i, name in enumerate(EVENTS)}


def load(path):
    if not os.path.exists(path):
        sys.exit(f"bwd_trace: no trace at {path}: was every sm90 backward object of the library built "
                 "with -DFLASHPP_SM90_BWD_TRACE=1, and did a backward call on the sm90 family run?")
    with open(path, "rb") as f:
        blocks, events, launched = struct.unpack("<3Q", f.read(24))
        words = struct.unpack(f"<{blocks * events}Q", f.read(8 * blocks * events))
    rows = [words[b * events:(b + 1) * events] for b in range(min(blocks, launched))]
    return [r for r in rows if r[E["steps"]] > 0 and r[E["stored"]] > 0], launched


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def report(path):
    rows, launched = load(path)
    print(f"{path}: {len(rows)} blocks with steps traced of {launched} launched")
    if not rows:
        return

    def phase(a, b):
        return [r[E[b]] - r[E[a]] for r in rows]

    steps = [r[E["steps"]] for r in rows]
    later = [(r[E["loop_done"]] - r[E["step0_done"]]) / (r[E["steps"]] - 1) for r in rows if r[E["steps"]] > 1]
    per_step = med(later)
    total = phase("consumer_start", "stored")
    fixed = [t - s * per_step for t, s in zip(total, steps)]
    print(f"  steps a block: median {med(steps)}, min {min(steps)}, max {max(steps)}")
    for name, a, b in (("to K/V", "consumer_start", "kv_ready"), ("first step", "kv_ready", "step0_done"),
                       ("steps after the first", "step0_done", "loop_done"), ("dQ drain", "loop_done", "dq_done"),
                       ("dK/dV stores", "dq_done", "stored"), ("producer: K/V issue", "producer_start", "kv_issued"),
                       ("producer: all loads", "producer_start", "loads_issued")):
        print(f"  {name:24s} {med(phase(a, b)):10.0f} cycles")
    print(f"  {'steady step':24s} {per_step:10.0f} cycles")
    print(f"  {'block (consumer 0)':24s} {med(total):10.0f} cycles, fixed beyond its steps {med(fixed):.0f}"
          f" ({med(fixed) / per_step:.1f} steps)")
    # Global timer: span, busy share, gaps between blocks on one SM.
    starts = [r[E["block_start_ns"]] for r in rows]
    ends = [r[E["end_ns"]] for r in rows]
    t0, t1 = min(starts), max(ends)
    span = t1 - t0
    sms = {}
    for r in rows:
        sms.setdefault(r[E["sm"]], []).append((r[E["block_start_ns"]], r[E["end_ns"]]))
    busy = sum(e - s for s, e in zip(starts, ends))
    gaps = []
    for lst in sms.values():
        lst.sort()
        gaps += [b[0] - a[1] for a, b in zip(lst, lst[1:])]
    ns_per_block = med([e - s for s, e in zip(starts, ends)])
    cyc_per_ns = med([t / max(1, e - s) for t, s, e in zip(total, starts, ends)])
    print(f"  kernel span {span / 1e3:.1f} us on {len(sms)} SMs; blocks busy {busy / (span * len(sms)):.1%} of it;"
          f" block {ns_per_block / 1e3:.2f} us (~{cyc_per_ns:.2f} cycles/ns)")
    print(f"  gap between blocks on an SM: median {med(gaps) / 1e3:.2f} us, max {max(gaps, default=0) / 1e3:.2f} us;"
          f" first wave: {sum(1 for s in starts if s - t0 < 2000)} blocks start within 2 us")
    last = sorted(ends)
    print(f"  tail: the last 10% of blocks end over the final {(t1 - last[int(0.9 * len(last))]) / 1e3:.1f} us")


def run(lib, out, shape):
    os.environ["FLASHPP_SM90_BWD_TRACE_FILE"] = out
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch
    from gpu_compare import Flashpp
    fp = Flashpp(lib)
    args = fp.backward_args(shape)
    for _ in range(3):  # warm; the last launch's stamps stay in the file
        fp.backward(*args)
    torch.cuda.synchronize()


if __name__ == "__main__":
    args = sys.argv[1:]
    if args and args[0] == "--run":
        lib = args[args.index("--lib") + 1]
        out = args[args.index("--out") + 1]
        run(lib, out, args[-1])
        report(out)
    else:
        for path in args:
            report(path)
