"""flashpp.attention_kvcache and flashpp.attention_varlen on numpy arrays (CPU; what CI runs),
against the float64 reference on each sequence's dense arrays; the torch drop-ins
(flash_attn_with_kvcache, flash_attn_varlen_func) and autograd where torch is installed."""
import numpy as np
import pytest

import flashpp
from attention_reference import backward as ref_backward
from attention_reference import forward as ref_forward
from attention_reference import rel_err


def randn(rng, shape, dtype="float32"):
    return rng.standard_normal(shape).astype(dtype)


def make_cache(rng, B=3, Nq=2, Hq=4, Hkv=2, D=16, seqlens=(9, 0, 33), Nnew=0, page=None,
               capacity=40):
    q = randn(rng, (B, Nq, Hq, D))
    if page is None:
        k_cache = randn(rng, (B, capacity, Hkv, D))
        table = None
    else:
        max_pages = -(-capacity // page)
        num_pages = B * max_pages + 1
        perm = rng.permutation(num_pages).astype(np.int32)
        table = np.full((B, max_pages), -1, dtype=np.int32)
        n = 0
        for b in range(B):
            used = -(-(seqlens[b] + Nnew) // page)
            table[b, :used] = perm[n:n + used]
            n += used
        k_cache = randn(rng, (num_pages, page, Hkv, D))
    v_cache = randn(rng, k_cache.shape)
    k_new = randn(rng, (B, Nnew, Hkv, D)) if Nnew else None
    v_new = randn(rng, (B, Nnew, Hkv, D)) if Nnew else None
    return q, k_cache, v_cache, np.array(seqlens, dtype=np.int32), table, k_new, v_new


def dense_keys(cache, seqlens, table, new, b):
    """Sequence b's keys as a dense [L + Nnew, Hkv, D] array (cache before the call + new)."""
    L = int(seqlens[b])
    if table is None:
        rows = cache[b, :L]
    else:
        page = cache.shape[1]
        rows = np.stack([cache[table[b, j // page], j % page] for j in range(L)]) if L else \
            np.zeros((0,) + cache.shape[2:], cache.dtype)
    return rows if new is None else np.concatenate([rows, new[b]], axis=0)


@pytest.mark.parametrize("page", [None, 1, 16])
@pytest.mark.parametrize("kw", [dict(), dict(causal=True), dict(causal=True, window=3, softcap=5.0)])
@pytest.mark.parametrize("Nnew", [0, 2])
def test_kvcache_matches_dense_reference(rng, page, kw, Nnew):
    q, kc, vc, sl, table, kn, vn = make_cache(rng, page=page, Nnew=Nnew)
    kc0, vc0 = kc.copy(), vc.copy()
    o, lse = flashpp.attention_kvcache(q, kc, vc, sl, block_table=table, k_new=kn, v_new=vn,
                                       return_lse=True, **kw)
    window = kw.get("window")
    win = (-1, -1) if window is None else (window, 0)
    for b in range(q.shape[0]):
        k = dense_keys(kc0, sl, table, kn, b)[None]
        v = dense_keys(vc0, sl, table, vn, b)[None]
        ro, rl, _ = ref_forward(q[b:b + 1], k, v, causal=kw.get("causal", False),
                                bottom_right=True, window=win, softcap=kw.get("softcap", 0.0))
        assert rel_err(o[b:b + 1], ro) < 1e-5
        finite = np.isfinite(rl)
        assert np.array_equal(np.isfinite(lse[b:b + 1]), finite)
        assert np.allclose(lse[b:b + 1][finite], rl[finite], atol=1e-4)
    if Nnew:  # the new rows landed in the cache, nothing else changed
        for b in range(q.shape[0]):
            got = dense_keys(kc, sl + Nnew, table, None, b)
            want = dense_keys(kc0, sl, table, kn, b)
            assert np.array_equal(got, want)


def test_kvcache_empty_sequence_is_zero_not_nan(rng):
    q, kc, vc, sl, table, _, _ = make_cache(rng, seqlens=(0, 5, 1))
    o, lse = flashpp.attention_kvcache(q, kc, vc, sl, return_lse=True, causal=True)
    assert np.all(o[0] == 0) and np.all(np.isneginf(lse[0]))
    assert not np.isnan(o).any()


def test_kvcache_bad_indices_raise(rng):
    q, kc, vc, sl, table, _, _ = make_cache(rng, page=16)
    bad = table.copy()
    bad[0, 0] = 10_000
    with pytest.raises(ValueError, match=r"block_table\[0\]\[0\]"):
        flashpp.attention_kvcache(q, kc, vc, sl, block_table=bad)
    with pytest.raises(ValueError, match=r"cache_seqlens\[1\]"):
        flashpp.attention_kvcache(q, kc, vc, np.array([9, -1, 33], np.int32), block_table=table)
    with pytest.raises(TypeError, match="cache_seqlens"):
        flashpp.attention_kvcache(q, kc, vc, sl.astype(np.int64), block_table=table)


def packed(rng, lens_q, lens_k, Hq=4, Hkv=2, D=16, dtype="float32"):
    cu_q = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
    q = randn(rng, (cu_q[-1], Hq, D), dtype)
    k = randn(rng, (cu_k[-1], Hkv, D), dtype)
    v = randn(rng, (cu_k[-1], Hkv, D), dtype)
    return q, k, v, cu_q, cu_k


@pytest.mark.parametrize("kw", [dict(), dict(causal=True), dict(causal=True, causal_alignment="bottom_right"),
                                dict(window=(3, 1), softcap=4.0)])
def test_varlen_matches_per_sequence_reference(rng, kw):
    lens_q, lens_k = [7, 0, 1, 20], [7, 4, 1, 13]
    q, k, v, cu_q, cu_k = packed(rng, lens_q, lens_k)
    o, lse = flashpp.attention_varlen(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k),
                                      return_lse=True, **kw)
    dout = randn(rng, q.shape)
    dq, dk, dv = flashpp.attention_varlen_backward(q, k, v, o, lse, dout, cu_q, cu_k,
                                                   max(lens_q), max(lens_k), **kw)
    ref_kw = dict(causal=kw.get("causal", False),
                  bottom_right=kw.get("causal_alignment") == "bottom_right",
                  window=kw.get("window", (-1, -1)), softcap=kw.get("softcap", 0.0))
    for b in range(len(lens_q)):
        sq, sk = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        ro, rl, cache = ref_forward(q[None, sq], k[None, sk], v[None, sk], **ref_kw)
        rdq, rdk, rdv = ref_backward(dout[None, sq], cache)
        assert rel_err(o[sq], ro[0]) < 1e-5
        assert rel_err(dq[sq], rdq[0]) < 1e-4
        assert rel_err(dk[sk], rdk[0]) < 1e-4
        assert rel_err(dv[sk], rdv[0]) < 1e-4


def test_varlen_bad_offsets_raise(rng):
    q, k, v, cu_q, cu_k = packed(rng, [3, 4], [3, 4])
    with pytest.raises(ValueError, match=r"cu_seqlens_q\[2\]"):
        flashpp.attention_varlen(q, k, v, np.array([0, 5, 4], np.int32), cu_k, 5, 4)
    with pytest.raises(ValueError, match=r"cu_seqlens_k\[2\]"):
        flashpp.attention_varlen(q, k, v, cu_q, np.array([0, 3, 9], np.int32), 4, 6)
    with pytest.raises(ValueError, match="cu_seqlens_k"):
        flashpp.attention_varlen(q, k, v, cu_q, np.array([0, 3], np.int32), 4, 4)
    with pytest.raises(ValueError, match="max_seqlen_q"):
        flashpp.attention_varlen(q, k, v, cu_q, cu_k, 2, 4)


# ---- torch ------------------------------------------------------------------------------------
def _torch():
    return pytest.importorskip("torch")


def torch_devices():
    torch = pytest.importorskip("torch")
    devs = ["cpu"]
    if torch.cuda.is_available() and flashpp.cuda_available():
        devs.append("cuda")
    return devs


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_torch_flash_attn_with_kvcache(rng, device):
    torch = _torch()
    if device == "cuda" and device not in torch_devices():
        pytest.skip("needs a GPU and flashpp built with CUDA")
    from flashpp.torch import flash_attn_with_kvcache

    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    q, kc, vc, sl, table, kn, vn = make_cache(rng, D=64, Nnew=1, page=16, seqlens=(9, 0, 30))
    T = lambda x: torch.from_numpy(x).to(device=device, dtype=dtype)  # noqa: E731
    kc_t, vc_t = T(kc), T(vc)
    kc_ref, vc_ref = kc_t.float().cpu().numpy(), vc_t.float().cpu().numpy()
    out, lse = flash_attn_with_kvcache(
        T(q), kc_t, vc_t, T(kn), T(vn), cache_seqlens=torch.from_numpy(sl).to(device),
        block_table=torch.from_numpy(table).to(device), causal=True, return_softmax_lse=True)
    qf = T(q).float().cpu().numpy()
    knf, vnf = T(kn).float().cpu().numpy(), T(vn).float().cpu().numpy()
    for b in range(q.shape[0]):
        k = dense_keys(kc_ref, sl, table, knf, b)[None]
        v = dense_keys(vc_ref, sl, table, vnf, b)[None]
        ro, _, _ = ref_forward(qf[b:b + 1], k, v, causal=True, bottom_right=True)
        assert rel_err(out[b:b + 1].float().cpu().numpy(), ro) < (1e-5 if device == "cpu" else 2e-2)
    assert lse.shape == (3, 4, 2)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_torch_flash_attn_varlen_func_autograd(rng, device):
    torch = _torch()
    if device == "cuda" and device not in torch_devices():
        pytest.skip("needs a GPU and flashpp built with CUDA")
    from flashpp.torch import flash_attn_varlen_func

    dtype = torch.float64 if device == "cpu" else torch.bfloat16
    lens = [5, 1, 12]
    q, k, v, cu_q, cu_k = packed(rng, lens, lens, D=64)
    qt, kt, vt = (torch.from_numpy(x).to(device=device, dtype=dtype if device == "cuda" else torch.float32)
                  .requires_grad_() for x in (q, k, v))
    cq, ck = torch.from_numpy(cu_q).to(device), torch.from_numpy(cu_k).to(device)
    out = flash_attn_varlen_func(qt, kt, vt, cq, ck, max(lens), max(lens), causal=True)
    out.float().square().sum().backward()
    for b in range(len(lens)):
        s = slice(cu_q[b], cu_q[b + 1])
        ro, _, cache = ref_forward(qt.detach()[None, s].float().cpu().numpy(),
                                   kt.detach()[None, s].float().cpu().numpy(),
                                   vt.detach()[None, s].float().cpu().numpy(),
                                   causal=True, bottom_right=True)
        tol = 1e-4 if device == "cpu" else 3e-2
        assert rel_err(out.detach()[s].float().cpu().numpy(), ro[0]) < tol
        rdq, _, _ = ref_backward(2 * out.detach()[None, s].float().cpu().numpy(), cache)
        assert rel_err(qt.grad[s].float().cpu().numpy(), rdq[0]) < (1e-3 if device == "cpu" else 5e-2)


def test_torch_ops_have_fake_kernels():
    torch = _torch()
    import flashpp.torch  # noqa: F401

    for name in ("attention_kvcache", "varlen_fwd", "varlen_bwd"):
        assert hasattr(torch.ops.flashpp, name)
    q = torch.empty(2, 1, 4, 64, device="meta")
    kc = torch.empty(2, 32, 2, 64, device="meta")
    sl = torch.empty(2, dtype=torch.int32, device="meta")
    # Meta tensors run the fake kernels: shapes without data (what torch.compile traces).
    o, lse = torch.ops.flashpp.attention_kvcache(q, kc, kc.clone(), sl, None, None, None, 0.0,
                                                 False, -1, -1, 0.0, False, "auto")
    assert tuple(o.shape) == (2, 1, 4, 64) and tuple(lse.shape) == (2, 4, 1)
