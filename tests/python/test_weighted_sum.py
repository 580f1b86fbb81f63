"""The weighted-sum example (examples/weighted_sum) against torch autograd of (x * w).sum(-1)."""
import pytest

torch = pytest.importorskip("torch")

import flashpp  # noqa: E402
from flashpp.examples.weighted_sum import ROWS_PER_BLOCK, weighted_sum  # noqa: E402

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not (torch.cuda.is_available() and flashpp.cuda_compiled()),
    reason="needs a GPU and the CUDA kernel"))]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(1, 1), (5, 37, 33), (ROWS_PER_BLOCK * 3 + 1, 256), (0, 8)])
def test_matches_torch_autograd(device, shape):
    torch.manual_seed(0)
    x = torch.randn(shape, device=device, requires_grad=True)
    w = torch.randn(shape[-1], device=device, requires_grad=True)
    y = weighted_sum(x, w)
    ref = (x * w).sum(-1)
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)
    g = torch.randn_like(y)
    gx, gw = torch.autograd.grad(y, (x, w), g)
    rx, rw = torch.autograd.grad(ref, (x, w), g)
    torch.testing.assert_close(gx, rx)
    torch.testing.assert_close(gw, rw, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_strided_rows_and_compile(device):
    x = torch.randn(64, 48, device=device)[:, 8:40].requires_grad_()  # row stride 48
    w = torch.randn(32, device=device, requires_grad=True)
    compiled = torch.compile(weighted_sum, fullgraph=True)
    y = compiled(x, w)
    y.sum().backward()
    torch.testing.assert_close(y, (x * w).sum(-1))
    torch.testing.assert_close(w.grad, x.sum(0).detach(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(x.grad, w.detach().expand(64, 32))


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    x, w = torch.randn(20, 16, device=device), torch.randn(16, device=device)
    torch.library.opcheck(torch.ops.flashpp_examples.weighted_sum_fwd.default, (x, w))
    torch.library.opcheck(torch.ops.flashpp_examples.weighted_sum_bwd.default,
                          (torch.randn(20, device=device), x, w))


def test_errors():
    with pytest.raises(ValueError, match="expected w of shape"):
        weighted_sum(torch.randn(3, 4), torch.randn(5))
    with pytest.raises(TypeError, match="float32"):
        weighted_sum(torch.randn(3, 4, dtype=torch.float64), torch.randn(4, dtype=torch.float64))
