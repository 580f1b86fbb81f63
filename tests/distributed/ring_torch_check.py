"""flashpp.distributed.ring_attention on GPUs over NCCL, against single-GPU flashpp on the whole
sequence: outputs and gradients, causal and not, GQA, fp16 and bf16, with and without head
chunks. Run with torchrun (one process per GPU):

    torchrun --nproc-per-node 2 tests/distributed/ring_torch_check.py

Each case also measures both results against a float32 torch reference (materialised scores)
and applies the FlashAttention criterion: err(ring) <= 2 * err(single GPU) + slack. The last
case runs the ring without overlap (the diagnostic FLASHPP_RING_OVERLAP=0) and also requires its
results bit for bit equal to the plain ring's (both with the deterministic backward). Rank 0
prints one line per case and, last, "ring_torch: N passed, M failed"; the exit code is 1 on any
failure.
"""
import os
import sys

import torch
import torch.distributed as dist

import flashpp
import flashpp.distributed as fd


def reference(q, k, v, dout, causal):
    """float32 attention on [B, N, H, D], materialised, with its gradients."""
    q32, k32, v32 = (t.float().detach().requires_grad_() for t in (q, k, v))
    rep = q.shape[2] // k.shape[2]
    qt = q32.transpose(1, 2)
    kt = k32.repeat_interleave(rep, dim=2).transpose(1, 2)
    vt = v32.repeat_interleave(rep, dim=2).transpose(1, 2)
    s = (qt @ kt.transpose(-1, -2)) * q.shape[-1] ** -0.5
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    o = (s.softmax(-1) @ vt).transpose(1, 2)
    o.backward(dout.float())
    return o.detach(), q32.grad, k32.grad, v32.grad


def rel(a, b):
    a, b = a.float(), b.float()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def ring_run(q, k, v, dout, world, rank, causal, chunks, env=None, deterministic=False, group=None):
    """ring_attention forward + backward on this rank's zigzag slices, with the environment
    variables env set for the call (the ring's diagnostic knobs)."""
    env = env or {}
    os.environ.update(env)
    try:
        loc = [fd.zigzag_split(t, world, rank).requires_grad_() for t in (q, k, v)]
        o = fd.ring_attention(*loc, group=group, causal=causal, head_chunks=chunks,
                              deterministic=deterministic)
        o.backward(fd.zigzag_split(dout, world, rank))
    finally:
        for key in env:
            del os.environ[key]
    return o.detach(), loc[0].grad, loc[1].grad, loc[2].grad


def run_case(world, rank, dev, *, causal, Hq, Hkv, dtype, N, D=128, B=1, chunks=None, seed=0,
             env=None, group=None):
    gen = torch.Generator(device=dev).manual_seed(seed)  # the same tensors on every rank
    mk = lambda h: torch.randn(B, N, h, D, device=dev, dtype=dtype, generator=gen)  # noqa: E731
    q, k, v, dout = mk(Hq), mk(Hkv), mk(Hkv), mk(Hq)
    # single GPU, whole sequence
    qs, ks, vs = (t.clone().requires_grad_() for t in (q, k, v))
    o1 = flashpp.attention(qs, ks, vs, causal=causal)
    o1.backward(dout)
    single = (o1.detach(), qs.grad, ks.grad, vs.grad)
    ref = reference(q, k, v, dout, causal)
    # the ring
    # With env (a diagnostic knob that must not change the results): the deterministic backward
    # (the default one adds dQ with atomics), and bit for bit the results of the plain ring.
    ring = ring_run(q, k, v, dout, world, rank, causal, chunks, env, deterministic=bool(env),
                    group=group)
    same = True
    if env:
        plain = ring_run(q, k, v, dout, world, rank, causal, chunks, deterministic=True)
        same = all(torch.equal(a, b) for a, b in zip(ring, plain))
    errs = []
    for got, one, want in zip(ring, single, ref):
        one_l, want_l = fd.zigzag_split(one, world, rank), fd.zigzag_split(want, world, rank)
        errs += [rel(got, one_l), rel(got, want_l), rel(one_l, want_l)]
    t = torch.tensor(errs + [0.0 if same else 1.0], device=dev, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    errs, same = t.tolist()[:-1], t[-1].item() == 0
    tol = 2e-2 if dtype == torch.bfloat16 else 5e-3
    ok = True
    parts = []
    for i, name in enumerate(("o", "dq", "dk", "dv")):
        vs_single, vs_ref, single_ref = errs[3 * i:3 * i + 3]
        good = vs_single < tol and vs_ref <= 2 * single_ref + 1e-3
        ok &= good
        parts.append(f"{name} {vs_single:.1e}/{vs_ref:.1e}/{single_ref:.1e}{'' if good else '!'}")
    if env:
        ok &= same
        parts.append(f"bitwise-equal-to-ring={'yes' if same else 'NO!'}")
    label = (f"W={world} N={N} B={B} Hq={Hq} Hkv={Hkv} D={D} {str(dtype)[6:]} causal={int(causal)}"
             f" chunks={chunks or 'auto'}" + "".join(f" {name}={val}" for name, val in (env or {}).items()) +
             (" deterministic" if env else "") + (" (fd.ring_group(max_ctas=2))" if group is not None else ""))
    return ok, f"{label}: {' '.join(parts)} {'PASS' if ok else 'FAIL'}"


def main():
    local = int(os.environ.get("LOCAL_RANK", 0))
    cpu = "--cpu" in sys.argv  # a dry run of this script on the CPU over gloo, shorter sequences
    if cpu:
        dev = torch.device("cpu")
        dist.init_process_group("gloo")
        transport = "gloo (CPU dry run)"
    else:
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
        dist.init_process_group("nccl", pg_options=fd.nccl_options(), device_id=dev)
        transport = "NCCL " + ".".join(map(str, torch.cuda.nccl.version()))
    world, rank = dist.get_world_size(), dist.get_rank()
    if rank == 0:
        print(f"ring_torch: world {world}, torch {torch.__version__}, {transport}, "
              f"flashpp {flashpp.__version__}", flush=True)
        print("ring_torch: errors are ring-vs-single-GPU / ring-vs-fp32 / single-vs-fp32 "
              "(relative L2)", flush=True)
    bf16, fp16 = torch.bfloat16, torch.float16
    cases = [
        dict(causal=False, Hq=8, Hkv=8, dtype=bf16, N=4096),
        dict(causal=True, Hq=8, Hkv=8, dtype=bf16, N=4096),
        dict(causal=True, Hq=16, Hkv=4, dtype=bf16, N=4096),
        dict(causal=False, Hq=8, Hkv=2, dtype=fp16, N=4096),
        dict(causal=True, Hq=8, Hkv=8, dtype=fp16, N=4096),
        dict(causal=True, Hq=8, Hkv=2, dtype=fp16, N=2048, B=2, D=64),
        dict(causal=True, Hq=8, Hkv=4, dtype=bf16, N=4096, chunks=2),
        dict(causal=False, Hq=4, Hkv=4, dtype=bf16, N=2 * world * 100, chunks=4),  # odd tiles
        # the ring without overlap (the bench's "serial"): the same results, bit for bit
        dict(causal=True, Hq=8, Hkv=4, dtype=bf16, N=4096, chunks=2,
             env={"FLASHPP_RING_OVERLAP": "0"}),
        # over a group of its own with NCCL capped at 2 thread blocks (fd.ring_group)
        dict(causal=True, Hq=8, Hkv=4, dtype=bf16, N=4096, group="capped"),
    ]
    capped = fd.ring_group(max_ctas=2)  # collective: every rank, before any case
    for case in cases:
        if case.get("group") == "capped":
            case["group"] = capped
    if cpu:
        for case in cases:
            case["N"] = 2 * world * 48
    passed = failed = 0
    for i, case in enumerate(cases):
        try:
            ok, line = run_case(world, rank, dev, seed=i, **case)
        except Exception as e:  # noqa: BLE001 - report and go on
            ok, line = False, f"{case}: ERROR {type(e).__name__}: {e}"
        passed += ok
        failed += not ok
        if rank == 0:
            print("ring_torch " + line, flush=True)
    if rank == 0:
        print(f"ring_torch: {passed} passed, {failed} failed", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
