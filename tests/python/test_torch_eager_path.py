"""The lean eager path (python/flashpp/torch/_eager.py): taken for plain eager calls, never under
tracing, and bit-identical to the torch.library operators it stands in for, forward, backward
and dropout. Skipped where torch is absent (CI); CUDA cases run on the lent GPU machine."""
import pytest

torch = pytest.importorskip("torch")

import flashpp  # noqa: E402
import flashpp.torch  # noqa: E402
from flashpp.torch import _eager, ops  # noqa: E402

HAS_CUDA = torch.cuda.is_available() and flashpp.cuda_available()
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not HAS_CUDA, reason="needs a GPU and flashpp built with CUDA"))]


def inputs(device, dtype, B=2, Nq=70, Nk=90, Hq=4, Hkv=2, D=64, grad=False):
    g = torch.Generator(device="cpu").manual_seed(7)
    q = torch.randn(B, Nq, Hq, D, generator=g).to(device, dtype)
    k = torch.randn(B, Nk, Hkv, D, generator=g).to(device, dtype)
    v = torch.randn(B, Nk, Hkv, D, generator=g).to(device, dtype)
    return [t.requires_grad_(grad) for t in (q, k, v)]


def op_path(q, k, v, causal=False, dropout_p=0.0, seed=0, offset=0):
    """The torch.library operator path, called directly."""
    o, lse, _ = ops.attention_fwd(q, k, v, 0.0, causal, False, -1, -1, 0.0, dropout_p, seed,
                                  offset, False, "auto")
    return o, lse


class CountOps:
    """Counts calls of the operator path while active."""

    def __enter__(self):
        self.calls = 0
        self.original = ops.attention_fwd

        def counting(*args, **kwargs):
            self.calls += 1
            return self.original(*args, **kwargs)
        ops.attention_fwd = counting
        return self

    def __exit__(self, *exc):
        ops.attention_fwd = self.original


@pytest.mark.parametrize("device", DEVICES)
def test_plain_calls_take_the_eager_path(device):
    q, k, v = inputs(device, torch.float16 if device == "cuda" else torch.float32)
    with CountOps() as count:
        flashpp.attention(q, k, v, causal=True)
        flashpp.attention(q.requires_grad_(), k, v)
    assert count.calls == 0


def test_tracing_takes_the_operators():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        q, k, v = (mode.from_tensor(t) for t in inputs("cpu", torch.float32))
        assert not _eager.usable(q, k, v)
        o = flashpp.attention(q, k, v, causal=True)
        assert o.shape == q.shape


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal", [False, True])
def test_bit_identical_to_the_operators(device, causal):
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    q, k, v = inputs(device, dtype)
    o, lse = flashpp.attention(q, k, v, causal=causal, return_lse=True)
    o_ref, lse_ref = op_path(q, k, v, causal=causal)
    assert torch.equal(o, o_ref) and torch.equal(lse, lse_ref)

    qg, kg, vg = inputs(device, dtype, grad=True)
    do = torch.randn_like(o)
    flashpp.attention(qg, kg, vg, causal=causal).backward(do)
    eager_grads = [t.grad.clone() for t in (qg, kg, vg)]
    for t in (qg, kg, vg):
        t.grad = None
    op_path(qg, kg, vg, causal=causal)[0].backward(do)
    for ours, ref in zip(eager_grads, (qg.grad, kg.grad, vg.grad)):
        assert torch.equal(ours, ref)


@pytest.mark.parametrize("device", DEVICES)
def test_dropout_same_mask_and_rng_state(device):
    dtype = torch.float16 if device == "cuda" else torch.float32
    q, k, v = inputs(device, dtype)
    o, (seed, offset) = flashpp.attention(q, k, v, dropout_p=0.2, seed=11, offset=5,
                                          return_rng_state=True)
    assert (seed, offset) == (11, 5)
    assert torch.equal(o, op_path(q, k, v, dropout_p=0.2, seed=11, offset=5)[0])
    # Drawn seeds: two calls differ, and each reports what it used.
    o1, rng1 = flashpp.attention(q, k, v, dropout_p=0.2, return_rng_state=True)
    o2, rng2 = flashpp.attention(q, k, v, dropout_p=0.2, return_rng_state=True)
    assert rng1 != rng2 and not torch.equal(o1, o2)
    assert torch.equal(o1, op_path(q, k, v, dropout_p=0.2, seed=rng1[0], offset=rng1[1])[0])
    # The backward regenerates the forward's mask.
    qg, kg, vg = inputs(device, dtype, grad=True)
    do = torch.randn_like(o)
    flashpp.attention(qg, kg, vg, dropout_p=0.2, seed=3, offset=4).backward(do)
    eager_dq = qg.grad.clone()
    qg.grad = None
    op_path(qg, kg, vg, dropout_p=0.2, seed=3, offset=4)[0].backward(do)
    assert torch.equal(eager_dq, qg.grad)


@pytest.mark.parametrize("device", DEVICES)
def test_strided_and_bhnd_inputs(device):
    dtype = torch.float16 if device == "cuda" else torch.float32
    q, k, v = inputs(device, dtype)
    # [B, H, N, D] memory, and a non-contiguous last dimension (copied by both paths).
    qb, kb, vb = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    o = flashpp.attention(qb, kb, vb, layout="bhnd")
    assert o.shape == qb.shape
    assert torch.equal(o.transpose(1, 2), op_path(q, k, v)[0])
    qs = torch.randn(q.shape[:-1] + (2 * q.shape[-1],), device=device, dtype=dtype)[..., ::2]
    assert torch.equal(flashpp.attention(qs, k, v), op_path(qs.contiguous(), k, v)[0])


@pytest.mark.parametrize("device", DEVICES)
def test_errors_name_the_argument(device):
    q, k, v = inputs(device, torch.float32 if device == "cpu" else torch.float16)
    with pytest.raises(ValueError, match="k"):
        flashpp.attention(q, k[..., :32], v)


@pytest.mark.parametrize("device", DEVICES)
def test_no_grad_call_without_lse_skips_it_and_agrees(device):
    # A call whose lse nobody gets (no autograd, return_lse=False) neither allocates nor stores
    # it; o is the operators' o all the same, and return_lse=True still returns it.
    dtype = torch.float16 if device == "cuda" else torch.float32
    q, k, v = inputs(device, dtype)
    cfg = flashpp._options.make_config(causal=True)
    o, lse = _eager.forward(q, k, v, cfg, 0, 0, write_lse=False)
    assert lse is None
    o_ref, lse_ref = op_path(q, k, v, causal=True)
    assert torch.equal(o, o_ref)
    assert torch.equal(flashpp.attention(q, k, v, causal=True), o_ref)
    o2, lse2 = flashpp.attention(q, k, v, causal=True, return_lse=True)
    assert torch.equal(o2, o_ref) and torch.equal(lse2, lse_ref)
    with torch.no_grad():
        qg, kg, vg = inputs(device, dtype, grad=True)
        assert torch.equal(flashpp.attention(qg, kg, vg, causal=True), o_ref)


def test_functorch_transforms_take_the_operators():
    # Under an active functorch transform even plain tensors go through the operators (the
    # eager path's autograd.Function has no setup_context for functorch).
    q, k, v = inputs("cpu", torch.float32)
    seen = []

    def f(x):
        seen.append(_eager.usable(q, k, v))
        return x * 2

    torch.func.vmap(f)(torch.ones(3))
    assert seen == [False]
    assert _eager.usable(q, k, v)
