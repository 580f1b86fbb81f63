"""flashpp.attention on torch tensors (CPU and CUDA): forward and backward against attention
written out in torch (float32/float64), GQA, both causal alignments, windows, softcap, dropout,
strided inputs, the drop-ins and the module. Skipped where torch is absent (CI); the CUDA cases
run where flashpp has its CUDA backend and a GPU (the lent GPU machine)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import flashpp  # noqa: E402
import flashpp.torch  # noqa: E402
from flashpp.torch import MultiheadAttention, flash_attn_func, scaled_dot_product_attention  # noqa: E402
from torch_reference import attention as reference  # noqa: E402
from torch_reference import rel_err  # noqa: E402

HAS_CUDA = torch.cuda.is_available() and flashpp.cuda_available()
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not HAS_CUDA, reason="needs a GPU and flashpp built with CUDA"))]
DTYPES = {"cpu": [torch.float32, torch.float16, torch.bfloat16],
          "cuda": [torch.float16, torch.bfloat16]}
# Floors of the FlashAttention criterion (forward; gradients get twice): below these an error
# is fine whatever the naive baseline achieved.
FLOOR = {torch.float32: 2e-6, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def device_dtypes():
    for dev in DEVICES:
        name = dev if isinstance(dev, str) else dev.values[0]
        marks = () if isinstance(dev, str) else dev.marks
        for dt in DTYPES[name]:
            yield pytest.param(name, dt, marks=marks, id=f"{name}-{str(dt)[6:]}")


def ref_dtype(device):
    return torch.float64 if device == "cpu" else torch.float32


def check_close(ours, naive, ref, dtype, factor=1.0):
    """The FlashAttention criterion: our error against the high-precision reference is at most
    about twice that of the same computation done naively in the storage dtype (or under a
    floor)."""
    err = rel_err(ours, ref)
    limit = max(2.0 * rel_err(naive, ref), factor * FLOOR[dtype])
    assert err <= limit, f"error {err:.3g} above {limit:.3g}"


CASES = [
    dict(),
    dict(causal=True),
    dict(causal=True, causal_alignment="bottom_right"),
    dict(window=(16, 8)),
    dict(window=(24, None), causal=True, causal_alignment="bottom_right"),
    dict(softcap=3.0, causal=True),
]


def ref_kwargs(kw):
    window = kw.get("window") or (-1, -1)
    return dict(causal=kw.get("causal", False),
                bottom_right=kw.get("causal_alignment") == "bottom_right",
                window=tuple(-1 if w is None else w for w in window),
                scale=kw.get("softmax_scale"), softcap=kw.get("softcap", 0.0))


def randn(shape, device, dtype, requires_grad=True):
    return torch.randn(shape, device=device, dtype=dtype).requires_grad_(requires_grad)


def make_qkv(device, dtype, B=2, Nq=67, Nk=93, Hq=6, Hkv=2, D=64):
    return (randn((B, Nq, Hq, D), device, dtype), randn((B, Nk, Hkv, D), device, dtype),
            randn((B, Nk, Hkv, D), device, dtype))


def grads(out, inputs, dout):
    return torch.autograd.grad(out, inputs, dout)


@pytest.mark.parametrize("device, dtype", list(device_dtypes()))
@pytest.mark.parametrize("kw", CASES, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()) or "plain")
def test_forward_backward_against_reference(device, dtype, kw):
    torch.manual_seed(0)
    q, k, v = make_qkv(device, dtype)
    o, lse = flashpp.attention(q, k, v, return_lse=True, **kw)
    ref_o, ref_lse = reference(q, k, v, compute_dtype=ref_dtype(device), **ref_kwargs(kw))
    naive_o, _ = reference(q, k, v, compute_dtype=dtype, **ref_kwargs(kw))
    assert o.dtype == dtype and o.shape == q.shape and lse.dtype == torch.float32
    check_close(o, naive_o, ref_o, dtype)
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    # GPU kernels may evaluate tanh (softcap) with a fast approximation.
    assert rel_err(lse[finite], ref_lse[finite]) < (2e-3 if kw.get("softcap") else 2e-4)
    dout = torch.randn_like(o)
    ours = grads(o, (q, k, v), dout)
    want = grads(ref_o, (q, k, v), dout.to(ref_o.dtype))
    naive = grads(naive_o, (q, k, v), dout)
    for name, a, n, r in zip("qkv", ours, naive, want):
        assert a.dtype == dtype, name
        check_close(a, n, r, dtype, factor=2.0)


@pytest.mark.parametrize("device, dtype", list(device_dtypes()))
@pytest.mark.parametrize("D", [96, 192, 200, 256])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_wide_head_dims_forward_backward(device, dtype, D, causal):
    """The head dims whose CUDA backward runs the sm90 family's wide kernel (192, 256; 200 rounds
    up to 256) or its own tile (96) on Hopper: gradients through autograd against the reference,
    GQA and lengths that are not tile multiples."""
    torch.manual_seed(5)
    q, k, v = make_qkv(device, dtype, B=2, Nq=150, Nk=211, Hq=4, Hkv=2, D=D)
    o = flashpp.attention(q, k, v, causal=causal)
    ref_o, _ = reference(q, k, v, compute_dtype=ref_dtype(device), causal=causal)
    naive_o, _ = reference(q, k, v, compute_dtype=dtype, causal=causal)
    check_close(o, naive_o, ref_o, dtype)
    dout = torch.randn_like(o)
    for name, a, n, r in zip("qkv", grads(o, (q, k, v), dout), grads(naive_o, (q, k, v), dout),
                             grads(ref_o, (q, k, v), dout.to(ref_o.dtype))):
        assert a.dtype == dtype and a.shape == (q, k, v)["qkv".index(name)].shape, name
        check_close(a, n, r, dtype, factor=2.0)


@pytest.mark.parametrize("device, dtype", list(device_dtypes()))
@pytest.mark.parametrize("D", [32, 128])
def test_against_torch_math_sdpa(device, dtype, D):
    """The cross-check the issue asks for: torch's own math SDPA on float32 inputs."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(1)
    q, k, v = (randn((2, 4, 100, D), device, dtype) for _ in range(3))  # [B, H, N, D]
    k, v = k[:, :2], v[:, :2]  # GQA 4:2
    o = scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    with sdpa_kernel(SDPBackend.MATH):
        ref = torch.nn.functional.scaled_dot_product_attention(
            q.float(), k.float(), v.float(), is_causal=True, enable_gqa=True)
        naive = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=True)
    check_close(o, naive, ref, dtype)
    dout = torch.randn_like(o)
    for a, n, r in zip(grads(o, (q, k, v), dout), grads(naive, (q, k, v), dout),
                       grads(ref, (q, k, v), dout.float())):
        check_close(a, n, r, dtype, factor=2.0)


@pytest.mark.parametrize("device, dtype", list(device_dtypes()))
def test_strided_inputs_and_layouts(device, dtype):
    torch.manual_seed(2)
    base_q = randn((2, 80, 8, 80), device, dtype, requires_grad=False)
    base_kv = randn((2, 50, 2, 5, 64), device, dtype, requires_grad=False)
    q = base_q[:, 3:70:2, 1:5, 8:72].requires_grad_()     # strided everywhere, last dim dense
    k, v = base_kv[:, :, 0, 1:3], base_kv[:, :, 1, 2:4]  # [B, N, 2, 64] views of one buffer
    k.requires_grad_(), v.requires_grad_()
    o = flashpp.attention(q, k, v, causal=True)
    ref, _ = reference(q, k, v, causal=True, compute_dtype=ref_dtype(device))
    naive, _ = reference(q, k, v, causal=True, compute_dtype=dtype)
    check_close(o, naive, ref, dtype)
    dout = torch.randn_like(o)
    for a, n, r in zip(grads(o, (q, k, v), dout), grads(naive, (q, k, v), dout),
                       grads(ref, (q, k, v), dout.to(ref.dtype))):
        check_close(a, n, r, dtype, factor=2.0)
    # bhnd: the same numbers from [B, H, N, D] views, and an output in that layout
    o2 = flashpp.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True,
                           layout="bhnd")
    assert o2.shape == (2, 4, 34, 64)
    torch.testing.assert_close(o2.transpose(1, 2), o, rtol=0, atol=0)


@pytest.mark.parametrize("device, dtype", list(device_dtypes()))
def test_gradient_of_sum_has_expanded_dout(device, dtype):
    q, k, v = make_qkv(device, dtype, Nq=20, Nk=20)
    flashpp.attention(q, k, v).sum().backward()  # dout arrives with stride 0 everywhere
    ref, _ = reference(q, k, v, compute_dtype=ref_dtype(device))
    naive, _ = reference(q, k, v, compute_dtype=dtype)
    want = grads(ref.sum(), (q, k, v), None)
    naive_grads = grads(naive.float().sum(), (q, k, v), None)
    for got, n, r in zip((q.grad, k.grad, v.grad), naive_grads, want):
        check_close(got, n, r, dtype, factor=2.0)


# ---- dropout ----------------------------------------------------------------------------------

def keep_mask(p, seed, offset, B, H, Nq, Nk, device):
    return torch.from_numpy(flashpp.dropout_keep_mask(p, seed, offset, B, H, Nq, Nk)).to(device)


@pytest.mark.parametrize("device, dtype", list(device_dtypes()))
def test_dropout_uses_the_published_mask_forward_and_backward(device, dtype):
    torch.manual_seed(3)
    q, k, v = make_qkv(device, dtype, Nq=40, Nk=72)
    p = 0.2
    o, lse, (seed, offset) = flashpp.attention(q, k, v, causal=True, dropout_p=p,
                                               return_lse=True, return_rng_state=True)
    keep = keep_mask(p, seed, offset, 2, 6, 40, 72, device)
    ref, ref_lse = reference(q, k, v, causal=True, dropout_p=p, keep=keep,
                             compute_dtype=ref_dtype(device))
    naive, _ = reference(q, k, v, causal=True, dropout_p=p, keep=keep, compute_dtype=dtype)
    check_close(o, naive, ref, dtype)
    assert rel_err(lse, ref_lse) < 1e-4  # lse is computed without dropout
    dout = torch.randn_like(o)
    # autograd regenerates the forward's mask from the (seed, offset) it saved
    for a, n, r in zip(grads(o, (q, k, v), dout), grads(naive, (q, k, v), dout),
                       grads(ref, (q, k, v), dout.to(ref.dtype))):
        check_close(a, n, r, dtype, factor=2.0)


@pytest.mark.parametrize("device", DEVICES)
def test_dropout_statistics(device):
    """With v = identity, o = P̃ itself: the kept fraction is 1 − p (within 5σ), the zeros are
    exactly the published mask, and each kept probability is scaled by 1/(1 − p) for p rounded
    to a multiple of 1/256."""
    dtype = torch.float32 if device == "cpu" else torch.float16
    N, H, p = 128, 4, 0.3
    q = torch.randn(1, N, H, N, device=device, dtype=dtype) * 0.1
    k = torch.randn(1, N, H, N, device=device, dtype=dtype) * 0.1
    v = torch.eye(N, device=device, dtype=dtype)[None, :, None, :].expand(1, N, H, N)
    o, (seed, offset) = flashpp.attention(q, k, v, dropout_p=p, return_rng_state=True)
    p_tilde = o.float().permute(0, 2, 1, 3)  # [1, H, N, N]
    kept = p_tilde != 0
    keep = keep_mask(p, seed, offset, 1, H, N, N, device).bool()
    assert torch.equal(kept, keep)
    frac = kept.float().mean().item()
    n = kept.numel()
    p_used = round(p * 256) / 256  # the mask's resolution (README: dropout)
    assert abs(frac - (1 - p_used)) < 5 * np.sqrt(p_used * (1 - p_used) / n)
    plain = flashpp.attention(q, k, v).float().permute(0, 2, 1, 3)
    torch.testing.assert_close(p_tilde[kept], plain[kept] / (1 - p_used), rtol=2e-2, atol=1e-5)
    # unbiased: averaged over many masks, P̃ approaches P
    total = torch.zeros_like(plain)
    for _ in range(50):
        total += flashpp.attention(q, k, v, dropout_p=p).float().permute(0, 2, 1, 3)
    assert rel_err(total / 50, plain) < 0.15


@pytest.mark.parametrize("device", DEVICES)
def test_dropout_seed_none_follows_torch_manual_seed(device):
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    q, k, v = make_qkv(device, dtype, Nq=16, Nk=16)
    torch.manual_seed(5)
    a, (s1, o1) = flashpp.attention(q, k, v, dropout_p=0.5, return_rng_state=True)
    b, (s2, o2) = flashpp.attention(q, k, v, dropout_p=0.5, return_rng_state=True)
    assert o2 == o1 + 1 and not torch.equal(a, b)
    torch.manual_seed(5)
    _, (s3, _) = flashpp.attention(q, k, v, dropout_p=0.5, return_rng_state=True)
    assert s3 == s1
    again = flashpp.attention(q, k, v, dropout_p=0.5, seed=s1, offset=o1)
    assert torch.equal(again, a)


# ---- drop-ins, module, errors -----------------------------------------------------------------

@pytest.mark.parametrize("device, dtype", list(device_dtypes()))
def test_flash_attn_func_is_bottom_right_with_windows(device, dtype):
    torch.manual_seed(6)
    q, k, v = make_qkv(device, dtype, Nq=30, Nk=70)
    o = flash_attn_func(q, k, v, causal=True, window_size=(10, -1), softcap=5.0)
    ref, _ = reference(q, k, v, causal=True, bottom_right=True, window=(10, -1), softcap=5.0,
                       compute_dtype=ref_dtype(device))
    naive, _ = reference(q, k, v, causal=True, bottom_right=True, window=(10, -1), softcap=5.0,
                         compute_dtype=dtype)
    check_close(o, naive, ref, dtype)
    with pytest.raises(NotImplementedError, match="return_attn_probs"):
        flash_attn_func(q, k, v, return_attn_probs=True)
    with pytest.raises(NotImplementedError, match="alibi"):
        flash_attn_func(q, k, v, alibi_slopes=torch.ones(6))


@pytest.mark.parametrize("device", DEVICES)
def test_sdpa_dropin_errors_are_clear(device):
    q = torch.randn(1, 4, 8, 32, device=device, dtype=torch.float16)
    k = torch.randn(1, 2, 8, 32, device=device, dtype=torch.float16)
    with pytest.raises(NotImplementedError, match="attn_mask"):
        scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(8, 8, dtype=torch.bool))
    with pytest.raises(ValueError, match="enable_gqa"):
        scaled_dot_product_attention(q, k, k)
    with pytest.raises(NotImplementedError, match="head dim"):
        scaled_dot_product_attention(q, q, q[..., :16])
    out = scaled_dot_product_attention(q[0], q[0], q[0])  # unbatched [H, N, D]
    assert out.shape == (4, 8, 32)


@pytest.mark.parametrize("device, dtype", list(device_dtypes()))
def test_multihead_attention_module(device, dtype):
    torch.manual_seed(7)
    m = MultiheadAttention(128, 4, 2, causal=True, device=device, dtype=dtype)
    x = torch.randn(2, 33, 128, device=device, dtype=dtype, requires_grad=True)
    y = m(x)
    y.float().square().mean().backward()
    assert y.shape == x.shape and x.grad is not None and m.q_proj.weight.grad is not None
    # the same module computed with torch's SDPA
    B, N, E = x.shape
    q = m.q_proj(x).view(B, N, 4, 32).transpose(1, 2)
    kv = m.kv_proj(x).view(B, N, 2, 2, 32)
    k, v = kv[:, :, 0].transpose(1, 2), kv[:, :, 1].transpose(1, 2)
    o = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                         is_causal=True, enable_gqa=True)
    want = m.out_proj(o.transpose(1, 2).reshape(B, N, E).to(dtype))
    assert rel_err(y, want) < 3 * FLOOR[dtype]


@pytest.mark.parametrize("device", DEVICES)
def test_errors_map_to_python_exceptions(device):
    q = torch.randn(1, 8, 4, 32, device=device, dtype=torch.float16)
    with pytest.raises(TypeError, match="dtype"):
        flashpp.attention(q.int(), q.int(), q.int())
    with pytest.raises(ValueError, match="k: expected dtype"):
        flashpp.attention(q, q.float(), q.float())
    with pytest.raises(ValueError, match="divides"):
        flashpp.attention(q, q[:, :, :3], q[:, :, :3])
