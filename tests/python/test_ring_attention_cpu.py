"""Ring attention's schedule, zigzag split, lse merge and the whole ring (simulated: every rank
in one process, K/V passed on by list rotation) on the CPU with numpy — the same step and merge
code that flashpp.distributed runs over NCCL (python/flashpp/_ring_core.py)."""
import numpy as np
import pytest

import flashpp
from flashpp import _ring_core as core
from flashpp import _ring_schedule as sched


@pytest.mark.parametrize("world", [1, 2, 3, 4, 5, 8])
def test_zigzag_positions_are_a_permutation(world):
    n = 2 * world * 3
    order = sched.zigzag_order(n, world)
    assert sorted(order) == list(range(n))
    for r in range(world):
        pos = sched.zigzag_positions(n, world, r)
        assert len(pos) == n // world
        assert pos[:3] == [3 * r, 3 * r + 1, 3 * r + 2]
        assert pos[3:] == [3 * (2 * world - 1 - r) + i for i in range(3)]
    with pytest.raises(ValueError):
        sched.zigzag_positions(2 * world + 1, world, 0)


@pytest.mark.parametrize("world", [1, 2, 3, 4, 7, 8])
@pytest.mark.parametrize("causal", [False, True])
def test_schedule_covers_each_visible_pair_once(world, causal):
    c = 3
    n_local, seq = 2 * c, 2 * c * world
    pos = [sched.zigzag_positions(seq, world, r) for r in range(world)]
    for r in range(world):
        seen = np.zeros((n_local, seq), dtype=int)
        work = []
        for s in range(world):
            src = sched.source_rank(world, r, s)
            p = sched.piece(world, r, s, n_local, causal)
            pairs = 0
            for i in range(p.q0, p.q1):
                for j in range(p.k0, p.k1):
                    # within a causal piece the local order is the global order: top-left
                    if p.causal and (j - p.k0) > (i - p.q0):
                        continue
                    seen[i, pos[src][j]] += 1
                    pairs += 1
            work.append(pairs)
        want = np.array([[1 if (not causal or qp >= kp) else 0 for kp in range(seq)]
                         for qp in pos[r]])
        np.testing.assert_array_equal(seen, want)
        if causal and world > 1:
            # equal work: n*c pairs per step (the causal own block: n*c plus its diagonal half)
            assert all(w == n_local * c for w in work[1:])
            assert work[0] == n_local * (n_local + 1) // 2


def test_causal_needs_even_local_length():
    with pytest.raises(ValueError):
        core.RingForward(core.NumpyOps(), 2, 0, np.zeros((1, 5, 1, 8), np.float32), True)


def _attn(q, k, v, causal=False):
    return flashpp.attention(q, k, v, causal=causal, return_lse=True, backend="cpu_reference")


def test_merge_equals_attention_over_all_keys(rng):
    B, N, H, D, Nk = 2, 7, 3, 16, 19
    q, k, v = (rng.standard_normal((B, n, H, D)).astype(np.float32) for n in (N, Nk, Nk))
    o_all, lse_all = _attn(q, k, v)
    ops = core.NumpyOps()
    o1, l1 = _attn(q, k[:, :8], v[:, :8])
    o2, l2 = _attn(q, k[:, 8:], v[:, 8:])
    acc, lacc = ops.f32(o1), l1.copy()
    core.merge_into(ops, acc, lacc, o2, l2)
    np.testing.assert_allclose(acc, o_all, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(lacc, lse_all, rtol=1e-5, atol=1e-5)


def test_merge_with_empty_rows_gives_no_nan(rng):
    ops = core.NumpyOps()
    B, N, H, D = 1, 4, 2, 8
    o_acc = np.zeros((B, N, H, D), np.float32)
    lse_acc = np.full((B, H, N), -np.inf, np.float32)
    o_blk = rng.standard_normal((B, N, H, D)).astype(np.float32)
    lse_blk = rng.standard_normal((B, H, N)).astype(np.float32)
    lse_blk[:, :, 0] = -np.inf
    o_blk[:, 0] = 0.0
    with np.errstate(all="raise"):  # no invalid operation anywhere (-inf - -inf would raise)
        core.merge_into(ops, o_acc, lse_acc, o_blk, lse_blk)
    assert np.all(np.isneginf(lse_acc[:, :, 0])) and np.all(o_acc[:, 0] == 0)
    np.testing.assert_allclose(o_acc[:, 1:], o_blk[:, 1:], rtol=1e-6)
    np.testing.assert_allclose(lse_acc[:, :, 1:], lse_blk[:, :, 1:], rtol=1e-6)
    # merging into a view writes through
    o_acc2, lse_acc2 = o_blk.copy(), lse_blk.copy()
    core.merge_into(ops, o_acc2[:, 2:], lse_acc2[:, :, 2:], o_blk[:, 2:], lse_blk[:, :, 2:])
    np.testing.assert_allclose(lse_acc2[:, :, 2:], lse_blk[:, :, 2:] + np.log(2.0), rtol=1e-6)
    np.testing.assert_allclose(o_acc2[:, 2:], o_blk[:, 2:], rtol=1e-6, atol=1e-6)


def _rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30)


@pytest.mark.parametrize("world", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads", [(4, 4), (4, 2), (3, 1)])
def test_simulated_ring_equals_whole_sequence(rng, world, causal, heads):
    Hq, Hkv = heads
    B, D, c = 2, 32, 5
    N = 2 * c * world
    q = rng.standard_normal((B, N, Hq, D)).astype(np.float32)
    k = rng.standard_normal((B, N, Hkv, D)).astype(np.float32)
    v = rng.standard_normal((B, N, Hkv, D)).astype(np.float32)
    dout = rng.standard_normal((B, N, Hq, D)).astype(np.float32)
    o, lse = flashpp.attention(q, k, v, causal=causal, return_lse=True)
    dq, dk, dv = flashpp.attention_backward(q, k, v, o, lse, dout, causal=causal)

    pos = [np.array(sched.zigzag_positions(N, world, r)) for r in range(world)]
    split = lambda x: [np.ascontiguousarray(x[:, p]) for p in pos]  # noqa: E731
    ops = core.NumpyOps()
    fwd = core.simulate_forward(ops, split(q), split(k), split(v), causal)
    bwd = core.simulate_backward(ops, split(q), split(k), split(v), [f[0] for f in fwd],
                                 [f[1] for f in fwd], split(dout), causal)
    for r in range(world):
        p = pos[r]
        assert fwd[r][0].dtype == np.float32
        assert _rel(fwd[r][0], o[:, p]) < 2e-6
        assert _rel(fwd[r][1], lse[:, :, p]) < 2e-6
        assert _rel(bwd[r][0], dq[:, p]) < 1e-5
        assert _rel(bwd[r][1], dk[:, p]) < 1e-5
        assert _rel(bwd[r][2], dv[:, p]) < 1e-5


@pytest.mark.parametrize("causal", [False, True])
def test_simulated_ring_bf16(rng, causal):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf16 = ml_dtypes.bfloat16
    world, B, Hq, Hkv, D, c = 4, 1, 4, 2, 64, 16
    N = 2 * c * world
    q, dout = (rng.standard_normal((B, N, Hq, D)).astype(bf16) for _ in range(2))
    k, v = (rng.standard_normal((B, N, Hkv, D)).astype(bf16) for _ in range(2))
    o, lse = flashpp.attention(q, k, v, causal=causal, return_lse=True)
    dq, dk, dv = flashpp.attention_backward(q, k, v, o, lse, dout, causal=causal)
    pos = [np.array(sched.zigzag_positions(N, world, r)) for r in range(world)]
    split = lambda x: [np.ascontiguousarray(x[:, p]) for p in pos]  # noqa: E731
    ops = core.NumpyOps()
    fwd = core.simulate_forward(ops, split(q), split(k), split(v), causal)
    bwd = core.simulate_backward(ops, split(q), split(k), split(v), [f[0] for f in fwd],
                                 [f[1] for f in fwd], split(dout), causal)
    for r in range(world):
        p = pos[r]
        assert fwd[r][0].dtype == bf16 and bwd[r][1].dtype == bf16
        # bf16 storage: one rounding of o (2^-8 relative) either way; grads summed in float32
        assert _rel(fwd[r][0], o[:, p]) < 1e-2
        assert _rel(fwd[r][1], lse[:, :, p]) < 1e-5
        for got, want in zip(bwd[r], (dq, dk, dv)):
            assert _rel(got, want[:, p]) < 2e-2
