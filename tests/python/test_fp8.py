"""The FP8 (float8 e4m3) forward from Python: numpy (ml_dtypes) on the CPU, torch on the CPU and,
where a Hopper GPU is present, on CUDA. The oracle is the float64 reference on the dequantised
inputs (x8 * descale): the CPU path computes exactly that in float32 with a bf16/f16 output; the
GPU path is held to the rule of docs/fp8.md (ours <= 2 x naive FP8 + 2e-3)."""
import numpy as np
import pytest

import flashpp
from attention_reference import forward as reference_forward, rel_err

ml_dtypes = pytest.importorskip("ml_dtypes")
E4M3 = ml_dtypes.float8_e4m3fn


def dequantise(x8, descale, layout="bnhd"):
    x = np.asarray(x8).astype(np.float64)
    if layout == "bhnd":
        x = x.transpose(0, 2, 1, 3)
    H = x.shape[2]
    per_head = np.repeat(np.asarray(descale, np.float64), H // descale.shape[1], axis=1)
    return x * per_head[:, None, :, None]


def make_fp8(rng, B=2, Nq=37, Nk=53, Hq=4, Hkv=2, D=64, outliers=False):
    q, k, v = (rng.standard_normal((B, N, H, D)) * 2.0 for N, H in ((Nq, Hq), (Nk, Hkv), (Nk, Hkv)))
    if outliers:
        q[..., 3::16] *= 8.0
        k[..., 3::16] *= 8.0
    q8, qs = flashpp.quantize_fp8(q, kv_heads=Hkv)
    k8, ks = flashpp.quantize_fp8(k)
    v8, vs = flashpp.quantize_fp8(v)
    return (q8, k8, v8), (qs, ks, vs)


def test_quantize_fp8_numpy(rng):
    x = rng.standard_normal((2, 9, 3, 32)) * 5.0
    x8, descale = flashpp.quantize_fp8(x)
    assert x8.dtype == E4M3 and x8.shape == x.shape
    assert descale.dtype == np.float32 and descale.shape == (2, 3)
    np.testing.assert_allclose(np.abs(x).max(axis=(1, 3)) / 448.0, descale, rtol=1e-6)
    back = dequantise(x8, descale)
    assert np.max(np.abs(back - x) / np.abs(x).max(axis=(1, 3))[:, None, :, None]) <= 2.0**-4 + 1e-7
    xz, dz = flashpp.quantize_fp8(np.zeros((1, 2, 2, 16)))
    assert np.all(dz == 1.0) and np.all(xz.astype(np.float32) == 0.0)
    x8g, dg = flashpp.quantize_fp8(x[:, :, :2], kv_heads=1)
    assert dg.shape == (2, 1)


@pytest.mark.parametrize("kw", [{}, {"causal": True}, {"causal": True, "causal_alignment": "bottom_right"}])
@pytest.mark.parametrize("outliers", [False, True])
def test_numpy_fp8_forward_matches_dequantised_reference(rng, kw, outliers):
    (q8, k8, v8), (qs, ks, vs) = make_fp8(rng, outliers=outliers)
    o, lse = flashpp.attention(q8, k8, v8, q_descale=qs, k_descale=ks, v_descale=vs,
                               return_lse=True, **kw)
    assert o.dtype.name == "bfloat16" and o.shape == q8.shape
    ref_o, ref_lse, _ = reference_forward(
        dequantise(q8, qs), dequantise(k8, ks), dequantise(v8, vs),
        causal=kw.get("causal", False), bottom_right="causal_alignment" in kw)
    assert rel_err(o.astype(np.float64), ref_o) <= 4e-3
    finite = np.isfinite(ref_lse)
    np.testing.assert_array_equal(np.isfinite(lse), finite)
    assert np.max(np.abs(lse[finite] - ref_lse[finite]) / np.maximum(1, np.abs(ref_lse[finite]))) <= 2e-5


def test_numpy_fp8_float16_output_bhnd_and_no_descale(rng):
    q = rng.standard_normal((1, 3, 24, 32)).astype(E4M3)  # [B, H, N, D]
    k = rng.standard_normal((1, 3, 40, 32)).astype(E4M3)
    v = rng.standard_normal((1, 3, 40, 32)).astype(E4M3)
    o = flashpp.attention(q, k, v, layout="bhnd", out_dtype=np.float16)
    assert o.dtype == np.float16 and o.shape == q.shape
    ones = np.ones((1, 3), np.float32)
    ref_o, _, _ = reference_forward(*(dequantise(x, ones, "bhnd") for x in (q, k, v)))
    assert rel_err(o.transpose(0, 2, 1, 3).astype(np.float64), ref_o) <= 1e-3


def test_fp8_errors(rng):
    (q8, k8, v8), (qs, ks, vs) = make_fp8(rng)
    with pytest.raises(TypeError, match="out_dtype"):
        flashpp.attention(q8, k8, v8, out_dtype=np.float32)
    with pytest.raises(ValueError, match="k_descale"):
        flashpp.attention(q8, k8, v8, k_descale=np.ones((2, 4), np.float32))
    with pytest.raises(NotImplementedError, match="dropout_p"):
        flashpp.attention(q8, k8, v8, dropout_p=0.1, seed=1, offset=0)
    with pytest.raises(TypeError, match="k: expected float8_e4m3fn"):
        flashpp.attention(q8, k8.astype(np.float32), v8)
    with pytest.raises(TypeError, match="float8_e4m3fn inputs only"):
        flashpp.attention(q8.astype(np.float32), k8.astype(np.float32), v8.astype(np.float32),
                          q_descale=qs)


# ---- torch -------------------------------------------------------------------------------------

def _torch():
    return pytest.importorskip("torch")


def test_torch_fp8_cpu_matches_numpy(rng):
    torch = _torch()
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no float8_e4m3fn")
    x = rng.standard_normal((2, 33, 4, 64)) * 3.0
    y = rng.standard_normal((2, 41, 2, 64))
    q8, qs = flashpp.quantize_fp8(torch.from_numpy(x).to(torch.bfloat16), kv_heads=2)
    k8, ks = flashpp.quantize_fp8(torch.from_numpy(y))
    v8, vs = flashpp.quantize_fp8(torch.from_numpy(y[..., ::-1].copy()))
    assert q8.dtype == torch.float8_e4m3fn and qs.shape == (2, 2) and qs.dtype == torch.float32
    o, lse = flashpp.attention(q8, k8, v8, q_descale=qs, k_descale=ks, v_descale=vs, causal=True,
                               return_lse=True)
    assert o.dtype == torch.bfloat16
    deq = [dequantise(t.view(torch.uint8).numpy().view(E4M3), s.numpy()) for t, s in
           ((q8, qs), (k8, ks), (v8, vs))]
    ref_o, ref_lse, _ = reference_forward(*deq, causal=True)
    assert rel_err(o.float().numpy().astype(np.float64), ref_o) <= 4e-3
    assert np.max(np.abs(lse.numpy() - ref_lse)) <= 1e-4 * (1 + np.abs(ref_lse).max())


def test_torch_fp8_rejects_autograd():
    torch = _torch()
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no float8_e4m3fn")
    q = torch.randn(1, 8, 2, 32).to(torch.float8_e4m3fn)
    q.requires_grad_(True)
    with pytest.raises(RuntimeError, match="backward through an FP8"):
        flashpp.attention(q, q.detach(), q.detach())


def _naive_fp8(q, k, v, causal):
    """Quantised inputs (dequantised), float32 scores and softmax, P quantised to e4m3, float32
    P V: the naive FP8 attention the GPU kernel must not be worse than."""
    torch = _torch()
    B, Nq, Hq, D = q.shape
    Hkv = k.shape[2]
    k = k.repeat_interleave(Hq // Hkv, dim=2)
    v = v.repeat_interleave(Hq // Hkv, dim=2)
    s = torch.einsum("bihd,bjhd->bhij", q, k) / D**0.5
    if causal:
        s = s.masked_fill(torch.ones(Nq, k.shape[1], dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    p = torch.softmax(s, dim=-1).to(torch.float8_e4m3fn).float()
    return torch.einsum("bhij,bjhd->bihd", p, v)


@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_torch_fp8_cuda_vs_naive(D, causal):
    torch = _torch()
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the CUDA FP8 forward needs an sm_90 GPU")
    if "sm90" not in flashpp._C.cuda_kernel_families(torch.cuda.current_device()):
        pytest.skip("this build has no sm90 kernels")
    g = torch.Generator(device="cuda").manual_seed(D)
    q, k, v = (torch.randn(2, N, H, D, device="cuda", generator=g) for N, H in ((300, 4), (517, 2), (517, 2)))
    q8, qs = flashpp.quantize_fp8(q, kv_heads=2)
    k8, ks = flashpp.quantize_fp8(k)
    v8, vs = flashpp.quantize_fp8(v)
    o = flashpp.attention(q8, k8, v8, q_descale=qs, k_descale=ks, v_descale=vs, causal=causal)
    deq = [x8.float() * s.repeat_interleave(x8.shape[2] // s.shape[1], dim=1)[:, None, :, None]
           for x8, s in ((q8, qs), (k8, ks), (v8, vs))]
    ref_o, _, _ = reference_forward(*(x.double().cpu().numpy() for x in deq), causal=causal)
    naive = _naive_fp8(*deq, causal).double().cpu().numpy()
    ours = rel_err(o.double().cpu().numpy(), ref_o)
    assert ours <= 2 * rel_err(naive, ref_o) + 2e-3
