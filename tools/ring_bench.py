"""Ring attention scaling and overlap on the GPUs of one machine (run by tools/ring_gpu_check.sh):

    torchrun --nproc-per-node 2 tools/ring_bench.py --seqs 131072 524288
    torchrun --nproc-per-node 2 tools/ring_bench.py --seqs --million 1048576

For each total length N (causal, B=1, H=32, D=128, bf16, forward + backward):
  t1          every rank runs single-GPU flashpp on the whole sequence at once (the same
              conditions on each GPU; the slower GPU's time is reported);
  then the same call, fd.ring_attention(...) forward + backward over all ranks, in variants
  that differ only by the ring's diagnostic knobs (flashpp.distributed._Knobs, environment
  variables read at each call) or the sm90 forward's grid:
  ring        the ring as it is (tW; eff = t1 / (W * tW));
  serial      FLASHPP_RING_OVERLAP=0: each transfer waited for right after it is issued (the
              ring without overlap; expected about compute + comm);
  compute     FLASHPP_RING_TRANSFERS=skip: no transfers, everything else as in the ring (the same
              buffers allocated, block calls, merges, casts): the lower bound of the ring;
  comm        FLASHPP_RING_COMPUTE=skip: the same transfers, no block calls, merges or sums;
  ring_p0, compute_p0   ring and compute with FLASHPP_SM90_FWD_PERSISTENT=0 (the sm90 forward
              with one block per item instead of its persistent grid; read by the library at
              each launch, src/cuda/sm90/forward/launch.cuh).
  ring_cC, comm_cC   (--ctas C ...) ring and comm over a group made by fd.ring_group(max_ctas=C):
              NCCL capped at C thread blocks per transfer (the default group's NCCL picks its
              own count: on NVLink many blocks, which hold SMs while a transfer waits for its
              peer).
  Derived: exposed = ring - compute (the transfer time not hidden, plus whatever the transfers
  cost the compute), hidden = 1 - exposed / comm clipped to [0, 1].
  The variants are timed round-robin (ring, compute, serial, comm, ring_p0, compute_p0, then
  again) so that a drift of the clocks over the run spreads over all of them.
  Then one more ring run under torch.profiler (--no-profile: none): from the GPU kernels of that
  run, the share of the NCCL kernels' busy time during which a compute kernel ran too
  (profile_hidden), the NCCL busy time and the time with no compute kernel running
  (compute_idle, within the run's first to last kernel).
--million: then total lengths (default 1M) on the ring alone: time, peak memory per GPU.
--prewarm N0: first one untimed single-GPU call and one ring call per group at N0 tokens, so that
the timed lengths can run without warm-ups of their own (--warmup 0): at 1M tokens one warm-up of
the single-GPU call alone costs about a minute.
CUDA events; per variant --warmup and --reps (defaults: N >= 512k 1 warmup of ring and comm
and 2 reps; shorter 1 warmup each and 5 reps). Every rep's time and the caching allocator's
counters (alloc retries: device-synchronising frees) are in the JSON.
Prints "RESULT ..." lines (rank 0) and writes ring_bench.json to --out (rewritten after each
phase, so a run cut short keeps what finished).
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist

import flashpp
import flashpp.distributed as fd


DEV = "cuda"  # "cpu" with --cpu: a dry run of this script's logic on gloo (tiny sizes)

VARIANTS = [  # name, environment for the call
    ("ring", {}),
    ("compute", {"FLASHPP_RING_TRANSFERS": "skip"}),
    ("serial", {"FLASHPP_RING_OVERLAP": "0"}),
    ("comm", {"FLASHPP_RING_COMPUTE": "skip"}),
    ("ring_p0", {"FLASHPP_SM90_FWD_PERSISTENT": "0"}),
    ("compute_p0", {"FLASHPP_RING_TRANSFERS": "skip", "FLASHPP_SM90_FWD_PERSISTENT": "0"}),
]
KNOB_VARS = sorted({k for _, env in VARIANTS for k in env})


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


class env_set:
    """Sets environment variables for a with-block, restoring them after (os.environ writes
    through to the C library's environment, which flashpp's getenv reads)."""

    def __init__(self, env):
        self.env, self.saved = env, {}

    def __enter__(self):
        for k, v in self.env.items():
            self.saved[k] = os.environ.get(k)
            os.environ[k] = v

    def __exit__(self, *exc):
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


ALLOC_KEYS = ("num_alloc_retries", "num_device_alloc", "num_device_free")


def alloc_counters():
    if DEV != "cuda":
        return [0, 0, 0]
    st = torch.cuda.memory_stats()
    return [int(st.get(k, 0)) for k in ALLOC_KEYS]


def run_once(fn):
    """One run of fn(mark) (mark() is called between forward and backward), ranks aligned by a
    barrier; returns this rank's (total, forward) seconds."""
    dist.barrier()
    sync()
    if DEV == "cuda":
        start, mid, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        start.record()
        fn(mid.record)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3, start.elapsed_time(mid) / 1e3
    t = [time.perf_counter(), None]

    def mark():
        t[1] = time.perf_counter()
    fn(mark)
    t1 = time.perf_counter()
    return t1 - t[0], (t[1] or t1) - t[0]


def slowest(values):
    """The maximum over ranks of each value (a list of floats)."""
    t = torch.tensor(values, device=DEV, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def timed(fn, warmup, reps):
    """The mean of reps after warmup; the slowest rank's mean in seconds."""
    for _ in range(warmup):
        fn(lambda: None)
    sync()
    runs = [run_once(fn)[0] for _ in range(reps)]
    return slowest([sum(runs) / max(reps, 1)])[0]


def log(rank, *a):
    if rank == 0:
        print(*a, flush=True)


def write_json(args, rank, results):
    if rank == 0:
        with open(os.path.join(args.out, "ring_bench.json"), "w") as f:
            json.dump(results, f, indent=1)


def kernel_overlap(trace_path):
    """From a torch.profiler chrome trace: the GPU activity (kernels, memcpy, memset) split into
    NCCL kernels and the rest. Returns {nccl_busy, compute_busy, both, span, compute_idle,
    hidden} in seconds (hidden = both / nccl_busy), or None without GPU activity."""
    with open(trace_path) as f:
        events = json.load(f).get("traceEvents", [])
    nccl, other = [], []
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        iv = (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
        (nccl if "nccl" in e.get("name", "").lower() else other).append(iv)
    return overlap_of(nccl, other)


def _union(ivs):
    out = []
    for a, b in sorted(ivs):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def overlap_of(nccl, other):
    """nccl, other: lists of (start, end) in microseconds."""
    if not nccl and not other:
        return None
    un, uo = _union(nccl), _union(other)
    length = lambda u: sum(b - a for a, b in u)  # noqa: E731
    both, i, j = 0.0, 0, 0
    while i < len(un) and j < len(uo):
        lo, hi = max(un[i][0], uo[j][0]), min(un[i][1], uo[j][1])
        both += max(0.0, hi - lo)
        if un[i][1] < uo[j][1]:
            i += 1
        else:
            j += 1
    allv = nccl + other
    span = max(b for _, b in allv) - min(a for a, _ in allv)
    nb, ob = length(un), length(uo)
    return {"nccl_busy": nb / 1e6, "compute_busy": ob / 1e6, "both": both / 1e6,
            "span": span / 1e6, "compute_idle": (span - ob) / 1e6,
            "hidden": both / nb if nb > 0 else None, "nccl_kernels": len(nccl)}


def profile_ring(fn, args, rank, N):
    """One ring run under torch.profiler; the kernel overlap of each rank, reduced: hidden is
    the smaller of the ranks', the times the larger."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if DEV == "cuda" else [])
    dist.barrier()
    sync()
    with profile(activities=acts) as prof:
        fn(lambda: None)
        sync()
    path = os.path.join(args.out, f"ring_trace_{N}_rank{rank}.json")
    prof.export_chrome_trace(path)
    ov = kernel_overlap(path)
    have = torch.tensor([0.0 if ov is None else 1.0], device=DEV)
    dist.all_reduce(have, op=dist.ReduceOp.MIN)
    if have.item() == 0:
        return None
    # min of hidden via max of -hidden
    hid = ov["hidden"] if ov["hidden"] is not None else 1.0
    vals = slowest([-hid, ov["nccl_busy"], ov["compute_idle"], ov["span"], ov["both"]])
    return {"hidden": -vals[0], "nccl_busy": vals[1], "compute_idle": vals[2], "span": vals[3],
            "both": vals[4], "nccl_kernels_rank0": ov["nccl_kernels"]}


def variant_list(args, groups):
    """(name, environment, group) of every variant timed, in round-robin order."""
    out = [(name, env, None) for name, env in VARIANTS if name not in args.skip_variants]
    for c in args.ctas:
        out += [(f"ring_c{c}", {}, groups[c]), (f"comm_c{c}", {"FLASHPP_RING_COMPUTE": "skip"}, groups[c])]
    return out


def inputs(n, args):
    """q, k, v (requiring grad) and dO of one call: B=1, n tokens, args.heads x args.dim, bf16."""
    q, k, v, do = (torch.randn(1, n, args.heads, args.dim, device=DEV, dtype=torch.bfloat16)
                   for _ in range(4))
    return q.requires_grad_(), k.requires_grad_(), v.requires_grad_(), do


def bench_length(N, args, world, rank, results, groups):
    long_seq = N >= 524288
    reps = args.reps if args.reps is not None else (2 if long_seq else 5)
    n = N // world
    row = {"N": N, "world": world, "reps": reps, "knobs_checked": KNOB_VARS}
    results.append(row)
    # single GPU, whole sequence (every rank at once, each on its own GPU)
    if not args.no_single:
        warmup = args.warmup if args.warmup is not None else 1
        t1_reps = args.reps if args.reps is not None else (2 if long_seq else 3)
        q, k, v, do = inputs(N, args)

        def single(mark):
            o = flashpp.attention(q, k, v, causal=True)
            mark()
            o.backward(do)
            q.grad = k.grad = v.grad = None
        row["t1"] = timed(single, warmup, t1_reps)
        row["t1_reps"] = t1_reps
        log(rank, f"  N={N}: single GPU fwd+bwd {row['t1']:.3f} s")
        del q, k, v, do
        if DEV == "cuda":
            torch.cuda.empty_cache()
        write_json(args, rank, results)
    # the ring and its variants: the same call, different knobs
    q, k, v, do = inputs(n, args)
    chunks_seen = {}
    auto = fd._auto_head_chunks

    def recording_auto(q_, k_, backward):  # records the head chunks each variant's calls pick
        c = auto(q_, k_, backward)
        chunks_seen.setdefault(current[0], set()).add(("bwd" if backward else "fwd", c))
        return c
    current = ["ring"]
    fd._auto_head_chunks = recording_auto

    group = [None]

    def ring_call(mark):
        o = fd.ring_attention(q, k, v, group=group[0], causal=True, head_chunks=args.head_chunks)
        mark()
        o.backward(do)
        q.grad = k.grad = v.grad = None

    variants = variant_list(args, groups)
    times = {name: [] for name, _, _ in variants}
    fwd_times = {name: [] for name, _, _ in variants}
    allocs = {name: [0, 0, 0] for name, _, _ in variants}
    spans = {name: [] for name, _, _ in variants}
    try:
        for name, env, grp in variants:  # warm-up (a capped group's first call makes its communicator)
            w = args.warmup if args.warmup is not None else (
                (1 if name in ("ring", "comm") or grp is not None else 0) if long_seq else 1)
            current[0] = name
            group[0] = grp
            with env_set(env):
                for _ in range(w):
                    ring_call(lambda: None)
        sync()
        for rep in range(reps):
            for name, env, grp in variants:
                current[0] = name
                group[0] = grp
                before = alloc_counters()
                t_wall = time.time()
                with env_set(env):
                    total, fwd = run_once(ring_call)
                spans[name].append((t_wall, time.time()))  # to match clocks.csv (ring_gpu_check)
                after = alloc_counters()
                times[name].append(total)
                fwd_times[name].append(fwd)
                allocs[name] = [a + y - x for a, x, y in zip(allocs[name], before, after)]
            log(rank, f"  N={N}: rep {rep + 1}/{reps}: " +
                " ".join(f"{name} {times[name][-1]:.3f}" for name, _, _ in variants) + " (rank 0, s)")
    finally:
        fd._auto_head_chunks = auto
        group[0] = None
    names = [name for name, _, _ in variants]
    means = slowest([sum(times[x]) / len(times[x]) for x in names] +
                    [sum(fwd_times[x]) / len(fwd_times[x]) for x in names])
    counters = slowest([float(c) for x in names for c in allocs[x]])
    for i, x in enumerate(names):
        row[x] = means[i]
        row[x + "_fwd"] = means[len(names) + i]
        row[x + "_reps_rank0"] = times[x]
        row[x + "_alloc"] = dict(zip(ALLOC_KEYS, counters[3 * i:3 * i + 3]))
        row[x + "_spans_rank0"] = spans[x]
        row[x + "_chunks"] = "/".join(f"{d}{c}" for d, c in sorted(chunks_seen.get(x, ())))
    row["tW"] = row["ring"]
    if "t1" in row:
        row["efficiency"] = row["t1"] / (world * row["ring"])
        if "ring_p0" in row:
            row["efficiency_p0"] = row["t1"] / (world * row["ring_p0"])
    if "compute" in row and "comm" in row:
        row["exposed"] = row["ring"] - row["compute"]
        row["hidden"] = min(max(1 - row["exposed"] / max(row["comm"], 1e-9), 0.0), 1.0)
    log(rank, f"  N={N}: head chunks picked per variant (head_chunks={args.head_chunks}): " +
        ", ".join(f"{x} {row[x + '_chunks'] or '-'}" for x in names))
    log(rank, f"  N={N}: caching-allocator counters over the reps (retries/device allocs/frees): " +
        ", ".join(x + " " + "/".join(str(int(c)) for c in row[x + "_alloc"].values())
                  for x in names))
    write_json(args, rank, results)
    fmt = lambda x: f"{row[x]:.3f}s" if x in row else "n/a"  # noqa: E731
    eff = f"{100 * row['efficiency']:.1f}%" if "efficiency" in row else "n/a"
    eff0 = f"{100 * row['efficiency_p0']:.1f}%" if "efficiency_p0" in row else "n/a"
    hid = f"{100 * row['hidden']:.0f}%" if "hidden" in row else "n/a"
    exp = f"{row['exposed']:.3f}s" if "exposed" in row else "n/a"
    log(rank, f"RESULT N={N} W={world} t1={fmt('t1')} tW={fmt('ring')} eff={eff} "
              f"serial={fmt('serial')} compute={fmt('compute')} comm={fmt('comm')} "
              f"exposed={exp} hidden={hid} ring_p0={fmt('ring_p0')} eff_p0={eff0} "
              f"compute_p0={fmt('compute_p0')}")
    for c in args.ctas:
        r, m = row.get(f"ring_c{c}"), row.get(f"comm_c{c}")
        if r is not None and "compute" in row and m is not None:
            row[f"exposed_c{c}"] = r - row["compute"]
            row[f"hidden_c{c}"] = min(max(1 - (r - row["compute"]) / max(m, 1e-9), 0.0), 1.0)
            if "t1" in row:
                row[f"efficiency_c{c}"] = row["t1"] / (world * r)
            eff_c = f"{100 * row['efficiency_c' + str(c)]:.1f}%" if "t1" in row else "n/a"
            log(rank, f"RESULT_CTAS N={N} W={world} max_ctas={c} ring={r:.3f}s comm={m:.3f}s "
                      f"exposed={row['exposed_c' + str(c)]:.3f}s hidden={100 * row['hidden_c' + str(c)]:.0f}% "
                      f"eff={eff_c}")
    # the kernels' timeline of one ring run
    if not args.no_profile:
        current[0] = "profile"
        group[0] = groups[args.ring_ctas] if args.ring_ctas is not None else None
        if args.ring_ctas is not None:
            row["ring_ctas"] = args.ring_ctas
        try:
            prof = profile_ring(ring_call, args, rank, N)
        except Exception as e:  # noqa: BLE001 - the timings above stand without it
            prof = None
            log(rank, f"  N={N}: profile failed: {type(e).__name__}: {e}")
        if prof is not None:
            row["profile"] = prof
            write_json(args, rank, results)
            log(rank, f"OVERLAP N={N} W={world} profile_hidden={100 * prof['hidden']:.0f}% "
                      f"nccl_busy={prof['nccl_busy']:.3f}s "
                      f"compute_idle={prof['compute_idle']:.3f}s span={prof['span']:.3f}s")
        else:
            log(rank, f"OVERLAP N={N} W={world} profile: no GPU kernels recorded")
    del q, k, v, do
    if DEV == "cuda":
        torch.cuda.empty_cache()


def prewarm(N, args, world, groups):
    """One untimed forward + backward on one GPU at N tokens and one on the ring over each group:
    loads the kernels and makes the communicators before the timed lengths."""
    q, k, v, do = inputs(N, args)
    flashpp.attention(q, k, v, causal=True).backward(do)
    q, k, v, do = inputs(N // world, args)
    for g in [None, *groups.values()]:
        fd.ring_attention(q, k, v, group=g, causal=True, head_chunks=args.head_chunks).backward(do)
    del q, k, v, do
    sync()
    dist.barrier()


def bench_million(args, world, rank, results, N, group=None):
    H = args.heads
    n = N // world
    if DEV == "cuda":
        torch.cuda.reset_peak_memory_stats()
    q, k, v, do = inputs(n, args)
    dist.barrier()
    sync()
    t0 = time.perf_counter()
    # 4 head chunks unless told (or fewer where H is not a multiple of 4, as in the dry run):
    # the temporaries stay well inside 80 GB whatever the estimate
    # of head_chunks=None would say (an out-of-memory on one rank would stall the other).
    chunks = args.head_chunks or max(c for c in (4, 2, 1) if H % c == 0)
    o = fd.ring_attention(q, k, v, group=group, causal=True, head_chunks=chunks)
    o.backward(do)
    sync()
    t = torch.tensor([time.perf_counter() - t0], device=DEV, dtype=torch.float64)
    finite = torch.tensor([float(all(torch.isfinite(x).all().item()
                                     for x in (o, q.grad, k.grad, v.grad)))], device=DEV)
    peak = torch.tensor([torch.cuda.max_memory_allocated() / 2**30 if DEV == "cuda" else 0.0],
                        device=DEV)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    dist.all_reduce(finite, op=dist.ReduceOp.MIN)
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    total_gib = torch.cuda.get_device_properties(0).total_memory / 2**30 if DEV == "cuda" else 0
    row = {"N": N, "world": world, "head_chunks": chunks, "time_s": t.item(), "peak_gib": peak.item(),
           "finite": bool(finite.item()), "gpu_gib": total_gib, "runs": 1, "warmup": 0,
           "max_ctas": args.ring_ctas}
    results.append(row)
    log(rank, f"RESULT_LARGE N={N} W={world} time={t.item():.2f}s (1 run, no warmup, {chunks} head chunks) "
              f"peak={peak.item():.1f}/{total_gib:.0f}GiB per GPU finite={row['finite']}")
    del q, k, v, do, o
    if DEV == "cuda":
        torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqs", type=int, nargs="*", default=[131072, 524288])
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--warmup", type=int, default=None)
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--head-chunks", type=int, default=None)
    ap.add_argument("--no-single", action="store_true")
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--skip-variants", nargs="*", default=[],
                    help="variants not to time (of: " + " ".join(n for n, _ in VARIANTS[1:]) + ")")
    ap.add_argument("--ctas", type=int, nargs="*", default=[],
                    help="also time the ring and its transfers over groups from fd.ring_group(max_ctas=C)")
    ap.add_argument("--ring-ctas", type=int, default=None,
                    help="the profiled run and the --million runs use the group of this --ctas value instead of the default group")
    ap.add_argument("--million", type=int, nargs="*", default=None,
                    help="total lengths for the large run (default 1048576 when given bare)")
    ap.add_argument("--prewarm", type=int, default=None,
                    help="one untimed single-GPU and ring call at this many tokens before the timed lengths")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--cpu", action="store_true", help="dry run on the CPU over gloo")
    args = ap.parse_args()
    if "ring" in args.skip_variants:
        ap.error("the ring itself cannot be skipped")
    for var in KNOB_VARS:  # the variants set these per call; inherited values would skew them
        if var in os.environ:
            raise SystemExit(f"ring_bench: unset {var} (the variants set it per call)")
    global DEV
    local = int(os.environ.get("LOCAL_RANK", 0))
    if args.cpu:
        DEV = "cpu"
        dist.init_process_group("gloo")
        name = "CPU (dry run)"
    else:
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", pg_options=fd.nccl_options(), device_id=torch.device("cuda", local))
        name = f"{torch.cuda.get_device_name()}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}"
    world, rank = dist.get_world_size(), dist.get_rank()
    log(rank, f"ring_bench: world {world}, {name}, torch {torch.__version__}; causal, B=1, "
              f"H={args.heads}, D={args.dim}, bf16, fwd+bwd")
    groups = {c: fd.ring_group(max_ctas=c) for c in args.ctas}  # collective: every rank, same order
    if args.ring_ctas is not None and args.ring_ctas not in groups:
        ap.error("--ring-ctas must be one of --ctas")
    results = []
    if args.prewarm:
        prewarm(args.prewarm, args, world, groups)
        log(rank, f"ring_bench: prewarmed at N={args.prewarm}")
    for N in args.seqs:
        bench_length(N, args, world, rank, results, groups)
    if args.million is not None:
        for N in (args.million or [1 << 20]):
            try:
                bench_million(args, world, rank, results, N,
                              groups[args.ring_ctas] if args.ring_ctas is not None else None)
            except torch.OutOfMemoryError as e:
                log(rank, f"RESULT_LARGE N={N} W={world} out of memory: {str(e).splitlines()[0]}")
                break
            write_json(args, rank, results)
    write_json(args, rank, results)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
