"""Ring attention scaling on the GPUs of one machine (run by tools/ring_gpu_check.sh):

    torchrun --nproc-per-node 2 tools/ring_bench.py --seqs 131072 524288 --million

For each total length N (causal, B=1, H=32, D=128, bf16, forward + backward):
  t1      every rank runs single-GPU flashpp on the whole sequence at once (the same
          conditions on each GPU; the slower GPU's time is reported);
  tW      ring_attention over all ranks (the slowest rank's time);
  compute the ring's block calls and merges alone (every step on the rank's own K/V, no
          transfers), comm the ring's transfers alone (K/V and the dK/dV accumulators, no compute);
  eff = t1 / (W * tW); comm_hidden = (compute + comm - tW) / comm, clipped to [0, 100%]: the
  share of the transfer time that the ring hid behind the compute.
--million: then 1M tokens (B=1, H=32, D=128 bf16) on the ring alone: time, peak memory per GPU.
CUDA events, --warmup and --reps per measurement (512k and longer: 1 warmup, 2 reps unless told).
Prints "RESULT ..." lines (rank 0) and writes ring_bench.json to --out.
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


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


def timed(fn, warmup, reps):
    """The mean of reps after warmup, CUDA events on the current stream, ranks aligned by a
    barrier before each run; returns the slowest rank's mean in seconds."""
    for _ in range(warmup):
        fn()
    sync()
    total = 0.0
    for _ in range(reps):
        dist.barrier()
        sync()
        if DEV == "cuda":
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            total += start.elapsed_time(end) / 1e3
        else:
            t0 = time.perf_counter()
            fn()
            total += time.perf_counter() - t0
    t = torch.tensor([total / max(reps, 1)], device=DEV, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def log(rank, *a):
    if rank == 0:
        print(*a, flush=True)


def bench_length(N, args, world, rank, results):
    H, D, dt = args.heads, args.dim, torch.bfloat16
    long_seq = N >= 524288
    warmup = args.warmup if args.warmup is not None else 1
    reps = args.reps if args.reps is not None else (2 if long_seq else 3)
    n = N // world
    row = {"N": N, "world": world, "warmup": warmup, "reps": reps}
    # single GPU, whole sequence (every rank at once, each on its own GPU)
    if not args.no_single:
        q, k, v, do = (torch.randn(1, N, H, D, device=DEV, dtype=dt) for _ in range(4))
        q.requires_grad_(); k.requires_grad_(); v.requires_grad_()

        def single():
            o = flashpp.attention(q, k, v, causal=True)
            o.backward(do)
            q.grad = k.grad = v.grad = None
        row["t1"] = timed(single, warmup, reps)
        log(rank, f"  N={N}: single GPU fwd+bwd {row['t1']:.3f} s")
        del q, k, v, do
        if DEV == "cuda":
            torch.cuda.empty_cache()
    # the ring
    q, k, v, do = (torch.randn(1, n, H, D, device=DEV, dtype=dt) for _ in range(4))
    q.requires_grad_(); k.requires_grad_(); v.requires_grad_()

    def ring_full():
        o = fd.ring_attention(q, k, v, causal=True, head_chunks=args.head_chunks)
        o.backward(do)
        q.grad = k.grad = v.grad = None
    row["tW"] = timed(ring_full, warmup, reps)
    log(rank, f"  N={N}: ring on {world} GPUs fwd+bwd {row['tW']:.3f} s")
    ring = fd._NcclRing(None)
    ops = fd.TorchOps()
    qd, kd, vd = q.detach(), k.detach(), v.detach()
    chunks = args.head_chunks or fd._auto_head_chunks(qd, kd, backward=True)
    with torch.no_grad():
        o, lse = fd._forward(ring, ops, qd, kd, vd, True, chunks)

        def compute_only():
            o2, lse2 = fd._forward(ring, ops, qd, kd, vd, True, chunks, mode="compute")
            fd._backward(ring, ops, qd, kd, vd, o, lse, do, True, chunks, mode="compute")

        def comm_only():
            fd._forward(ring, ops, qd, kd, vd, True, chunks, mode="comm")
            fd._backward(ring, ops, qd, kd, vd, o, lse, do, True, chunks, mode="comm")
        row["compute"] = timed(compute_only, 0 if long_seq else warmup, 1 if long_seq else reps)
        row["comm"] = timed(comm_only, 1, reps)
    del o, lse
    if "t1" in row:
        row["efficiency"] = row["t1"] / (world * row["tW"])
    row["overlap_hidden"] = (row["compute"] + row["comm"] - row["tW"]) / max(row["comm"], 1e-9)
    results.append(row)
    eff = f"{100 * row['efficiency']:.1f}%" if "efficiency" in row else "n/a"
    log(rank, f"RESULT N={N} W={world} t1={row.get('t1', float('nan')):.3f}s tW={row['tW']:.3f}s "
              f"eff={eff} compute={row['compute']:.3f}s comm={row['comm']:.3f}s "
              f"comm_hidden={100 * min(max(row['overlap_hidden'], 0), 1):.0f}%")
    del q, k, v, do
    if DEV == "cuda":
        torch.cuda.empty_cache()


def bench_million(args, world, rank, results, N):
    H, D, dt = args.heads, args.dim, torch.bfloat16
    n = N // world
    if DEV == "cuda":
        torch.cuda.reset_peak_memory_stats()
    q, k, v, do = (torch.randn(1, n, H, D, device=DEV, dtype=dt) for _ in range(4))
    q.requires_grad_(); k.requires_grad_(); v.requires_grad_()
    dist.barrier()
    sync()
    t0 = time.perf_counter()
    # 4 head chunks unless told: the temporaries stay well inside 80 GB whatever the estimate
    # of head_chunks=None would say (an out-of-memory on one rank would stall the other).
    chunks = args.head_chunks or 4
    o = fd.ring_attention(q, k, v, causal=True, head_chunks=chunks)
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
           "finite": bool(finite.item()), "gpu_gib": total_gib, "runs": 1, "warmup": 0}
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
    ap.add_argument("--million", type=int, nargs="*", default=None,
                    help="total lengths for the large run (default 1048576 when given bare)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--cpu", action="store_true", help="dry run on the CPU over gloo")
    args = ap.parse_args()
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
    results = []
    for N in args.seqs:
        bench_length(N, args, world, rank, results)
    if args.million is not None:
        for N in (args.million or [1 << 20]):
            try:
                bench_million(args, world, rank, results, N)
            except torch.OutOfMemoryError as e:
                log(rank, f"RESULT_LARGE N={N} W={world} out of memory: {str(e).splitlines()[0]}")
                break
    if rank == 0:
        with open(os.path.join(args.out, "ring_bench.json"), "w") as f:
            json.dump(results, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
