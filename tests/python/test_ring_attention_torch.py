"""flashpp.distributed with torch: the zigzag helpers, the simulated ring (every rank in one
process; CPU float32, and CUDA fp16/bf16 where a GPU is present) and the real driver,
ring_attention with autograd, over torch.distributed's gloo backend on the CPU with 2-4
processes (the NCCL run on GPUs is tests/distributed/ring_torch_check.py)."""
import os
import tempfile

import pytest

torch = pytest.importorskip("torch")
import flashpp  # noqa: E402
import flashpp.distributed as fd  # noqa: E402


def _rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_zigzag_split_unsplit_roundtrip(world):
    x = torch.arange(2 * 3 * 2 * world * 5).reshape(2, 2 * world * 3, 1, 5)
    parts = [fd.zigzag_split(x, world, r) for r in range(world)]
    assert torch.equal(fd.zigzag_unsplit(parts), x)
    assert parts[0][0, 0, 0, 0].item() == 0
    assert parts[0][0, 3, 0, 0].item() == x[0, 3 * (2 * world - 1), 0, 0].item()
    with pytest.raises(ValueError):
        fd.zigzag_split(x[:, :-1], world, 0)


def _case(device, dtype, N, Hq, Hkv, D=64, B=1, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    mk = lambda h: torch.randn(B, N, h, D, generator=g).to(device=device, dtype=dtype)  # noqa: E731
    return mk(Hq), mk(Hkv), mk(Hkv), mk(Hq)


def _whole(q, k, v, dout, causal):
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    o = flashpp.attention(q, k, v, causal=causal)
    o.backward(dout)
    return o.detach(), q.grad, k.grad, v.grad


def _check_simulated(device, dtype, world, causal, Hq, Hkv, tol):
    N = 2 * world * 16
    q, k, v, dout = _case(device, dtype, N, Hq, Hkv)
    o, dq, dk, dv = _whole(q, k, v, dout, causal)
    split = lambda t: [fd.zigzag_split(t, world, r) for r in range(world)]  # noqa: E731
    fwd, bwd = fd.simulate_ring_attention(split(q), split(k), split(v), split(dout),
                                          causal=causal)
    assert _rel(fd.zigzag_unsplit([f[0] for f in fwd]), o) < tol
    for i, want in enumerate((dq, dk, dv)):
        assert _rel(fd.zigzag_unsplit([b[i] for b in bwd]), want) < tol, "dq dk dv"[3 * i:3 * i + 2]


@pytest.mark.parametrize("world", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("causal", [False, True])
def test_simulated_ring_cpu(world, causal):
    _check_simulated("cpu", torch.float32, world, causal, 4, 2, 1e-5)


@pytest.mark.skipif(not (torch.cuda.is_available() and flashpp.cuda_available()),
                    reason="needs a CUDA device and flashpp's CUDA backend")
@pytest.mark.parametrize("world", [2, 3, 4, 8])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_simulated_ring_cuda(world, causal, dtype):
    tol = 2e-2 if dtype == "bfloat16" else 4e-3
    _check_simulated("cuda", getattr(torch, dtype), world, causal, 8, 2, tol)


def _gloo_worker(rank, world, init_file, causal, Hq, Hkv, chunks, errors):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world)
    try:
        q, k, v, dout = _case("cpu", torch.float32, 2 * world * 8, Hq, Hkv, D=32, B=2)
        o, dq, dk, dv = _whole(q, k, v, dout, causal)
        loc = [fd.zigzag_split(t, world, rank).requires_grad_() for t in (q, k, v)]
        o_loc, lse = fd.ring_attention(*loc, causal=causal, head_chunks=chunks, return_lse=True)
        o_loc.backward(fd.zigzag_split(dout, world, rank))
        got = [fd.zigzag_gather(t.detach() if t.grad is None else t, dim=1)
               for t in (o_loc.detach(), loc[0].grad, loc[1].grad, loc[2].grad)]
        errors[rank] = [_rel(a, b) for a, b in zip(got, (o, dq, dk, dv))]
    finally:
        dist.destroy_process_group()


def _run_ranks(world, worker, extra_args):
    """Runs worker(rank, world, init_file, *extra_args(init_file), shared) in one spawned process
    per rank (gloo through a file store); returns what the workers put in the shared dict."""
    mp = torch.multiprocessing.get_context("spawn")
    shared = mp.Manager().dict()
    with tempfile.TemporaryDirectory() as tmp:
        init = os.path.join(tmp, "init")
        procs = [mp.Process(target=worker, args=(r, world, init, *extra_args(init), shared))
                 for r in range(world)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
        assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    return dict(shared)  # a plain copy: the manager process may end with this function


@pytest.mark.parametrize("world,causal,heads,chunks", [
    (2, True, (4, 2), None), (2, False, (4, 4), 2), (3, True, (6, 3), 3), (4, True, (4, 1), 1),
    (4, False, (2, 2), None)])
def test_ring_attention_gloo(world, causal, heads, chunks):
    errors = _run_ranks(world, _gloo_worker, lambda init: (causal, *heads, chunks))
    for r in range(world):
        assert max(errors[r]) < 1e-5, (r, errors[r])


def _gloo_knobs_worker(rank, world, init_file, results):
    """The diagnostic knobs (flashpp.distributed._Knobs) on the real driver: the ring without
    overlap gives the ring's results bit for bit; without transfers or without compute it runs
    through forward and backward with outputs of the right shapes, and without transfers the
    results differ from the ring's."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world)
    try:
        q, k, v, dout = _case("cpu", torch.float32, 2 * world * 8, 4, 2, D=32, B=2)
        loc0 = [fd.zigzag_split(t, world, rank) for t in (q, k, v)]
        dout_loc = fd.zigzag_split(dout, world, rank)
        out = {}
        for name, env in (("ring", {}), ("serial", {"FLASHPP_RING_OVERLAP": "0"}),
                          ("no_transfers", {"FLASHPP_RING_TRANSFERS": "skip"}),
                          ("no_compute", {"FLASHPP_RING_COMPUTE": "skip"})):
            os.environ.update(env)
            try:
                loc = [t.clone().requires_grad_() for t in loc0]
                o = fd.ring_attention(*loc, causal=True, head_chunks=2)
                o.backward(dout_loc)
            finally:
                for key in env:
                    del os.environ[key]
            out[name] = [o.detach()] + [t.grad for t in loc]
        same = all(torch.equal(a, b) for a, b in zip(out["ring"], out["serial"]))
        shapes = all(a.shape == b.shape for n in ("no_transfers", "no_compute")
                     for a, b in zip(out["ring"], out[n]))
        finite = all(torch.isfinite(t).all().item() for t in out["no_transfers"])
        # Without transfers each rank attends to its own K/V only: the knob must change results
        # (a build that ignored it would pass the checks above).
        changed = not all(torch.equal(a, b) for a, b in zip(out["ring"], out["no_transfers"]))
        results[rank] = (same, shapes, finite, changed)
    finally:
        dist.destroy_process_group()


def test_ring_attention_gloo_diagnostic_knobs():
    world = 2
    results = _run_ranks(world, _gloo_knobs_worker, lambda init: ())
    for r in range(world):
        assert results[r] == (True, True, True, True), (r, results[r])


def test_diagnostic_knobs_reject_unknown_values(monkeypatch):
    monkeypatch.setenv("FLASHPP_RING_OVERLAP", "off")
    with pytest.raises(ValueError):
        fd._Knobs.from_env()
    monkeypatch.setenv("FLASHPP_RING_OVERLAP", "0")
    monkeypatch.setenv("FLASHPP_RING_TRANSFERS", "skip")
    knobs = fd._Knobs.from_env()
    assert (knobs.transfers, knobs.compute, knobs.overlap) == (False, True, False)


def test_nccl_options_max_ctas():
    import torch.distributed as dist

    if not hasattr(dist, "ProcessGroupNCCL"):
        pytest.skip("this torch build has no NCCL process group")
    assert fd.nccl_options(max_ctas=3).config.max_ctas == 3
    assert fd.nccl_options().is_high_priority_stream
    with pytest.raises(ValueError):
        fd.nccl_options(max_ctas=0)


def _gloo_ring_group_worker(rank, world, init_file, results):
    """fd.ring_group on gloo is a plain new group: the ring over it gives the default group's
    results bit for bit."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world)
    try:
        group = fd.ring_group()
        q, k, v, _ = _case("cpu", torch.float32, 2 * world * 8, 4, 2, D=32, B=1)
        loc = [fd.zigzag_split(t, world, rank) for t in (q, k, v)]
        a = fd.ring_attention(*loc, causal=True)
        b = fd.ring_attention(*loc, group=group, causal=True)
        results[rank] = torch.equal(a, b) and dist.get_world_size(group) == world
    finally:
        dist.destroy_process_group()


def test_ring_group_gloo():
    results = _run_ranks(2, _gloo_ring_group_worker, lambda init: ())
    assert results == {0: True, 1: True}, results
