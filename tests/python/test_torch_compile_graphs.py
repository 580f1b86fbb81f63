"""torch integration beyond eager: torch.library.opcheck, torch.compile(fullgraph=True),
CUDA graph capture and the current-stream contract."""
import pytest

torch = pytest.importorskip("torch")

import flashpp  # noqa: E402
import flashpp.torch  # noqa: E402
from torch_reference import rel_err  # noqa: E402

HAS_CUDA = torch.cuda.is_available() and flashpp.cuda_available()
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a GPU and flashpp built with CUDA")
DEVICES = ["cpu", pytest.param("cuda", marks=needs_cuda)]


def dtype_for(device):
    return torch.float32 if device == "cpu" else torch.bfloat16


def qkv(device, B=2, N=48, Hq=4, Hkv=2, D=64, requires_grad=True):
    dt = dtype_for(device)
    return [torch.randn(B, N, h, D, device=device, dtype=dt, requires_grad=requires_grad)
            for h in (Hq, Hkv, Hkv)]


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    q, k, v = qkv(device, requires_grad=False)
    cfg = (0.0, True, False, -1, -1, 0.0)
    torch.library.opcheck(torch.ops.flashpp.attention_fwd.default,
                          (q, k, v, *cfg, 0.0, 0, 0, False, "auto"))
    # bhnd strides and dropout with a fixed seed
    t = lambda x: x.transpose(1, 2).contiguous().transpose(1, 2)  # noqa: E731
    torch.library.opcheck(torch.ops.flashpp.attention_fwd.default,
                          (t(q), t(k), t(v), *cfg, 0.1, 3, 4, False, "auto"))
    o, lse, rng = torch.ops.flashpp.attention_fwd(q, k, v, *cfg, 0.0, 0, 0, False, "auto")
    torch.library.opcheck(torch.ops.flashpp.attention_bwd.default,
                          (torch.randn_like(o), q, k, v, o, lse, rng, *cfg, 0.0, False, "auto"))


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_forward_and_backward(device):
    torch.manual_seed(0)
    q, k, v = qkv(device)
    w = torch.randn(64, 64, device=device, dtype=q.dtype)

    def step(q, k, v):
        o = flashpp.attention(q @ w, k, v, causal=True, window=(20, 0))
        return (o.float() ** 2).mean()

    compiled = torch.compile(step, fullgraph=True)  # raises on any graph break
    loss = compiled(q, k, v)
    g = torch.autograd.grad(loss, (q, k, v))
    loss_eager = step(q, k, v)
    g_eager = torch.autograd.grad(loss_eager, (q, k, v))
    assert rel_err(loss, loss_eager) < 1e-2
    for a, b in zip(g, g_eager):
        assert rel_err(a, b) < 2e-2


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_dropins_and_dropout(device):
    torch.manual_seed(1)
    q, k, v = qkv(device)
    sdpa = torch.compile(flashpp.torch.scaled_dot_product_attention, fullgraph=True)
    out = sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True,
               enable_gqa=True)
    ref = flashpp.torch.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True, enable_gqa=True)
    assert rel_err(out, ref) < 1e-6
    fa = torch.compile(lambda q, k, v: flashpp.torch.flash_attn_func(q, k, v, dropout_p=0.25),
                       fullgraph=True)
    a, b = fa(q, k, v), fa(q, k, v)
    assert not torch.equal(a, b)  # a fresh mask each call, drawn inside the op
    a.float().sum().backward()


@needs_cuda
def test_cuda_graph_capture_forward_backward():
    torch.manual_seed(2)
    q, k, v = qkv("cuda", N=256, D=128)
    dout = torch.randn_like(q)
    static = [x.detach().clone().requires_grad_() for x in (q, k, v)]

    def run():
        o = flashpp.attention(*static, causal=True)
        return (o,) + torch.autograd.grad(o, static, dout)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):  # warm-up outside capture, as torch's CUDA graph docs do
            run()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = run()
    for trial in range(2):
        fresh = [torch.randn_like(x) for x in (q, k, v)]
        with torch.no_grad():
            for s, f in zip(static, fresh):
                s.copy_(f)
        graph.replay()
        torch.cuda.synchronize()
        fresh = [f.requires_grad_() for f in fresh]
        o = flashpp.attention(*fresh, causal=True)
        want = (o,) + torch.autograd.grad(o, fresh, dout)
        for got, w in zip(outputs, want):
            assert torch.equal(got, w), f"replay {trial} differs from eager"


@needs_cuda
def test_runs_on_the_current_stream_and_two_streams_concurrently():
    torch.manual_seed(3)
    inputs = [qkv("cuda", B=4, N=1024, D=128, requires_grad=False) for _ in range(2)]
    expected = [flashpp.attention(*x, causal=True) for x in inputs]
    torch.cuda.synchronize()
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    results = [None, None]
    for i, s in enumerate(streams):
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            # q is produced on stream s: flashpp must run on s to see it finished
            q = inputs[i][0] * 1.0
            if i == 0:
                torch.cuda._sleep(20_000_000)  # delay stream 0: a wrong stream would race
            q = q + 0.0
            results[i] = flashpp.attention(q, *inputs[i][1:], causal=True)
    for s in streams:
        torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    for got, want in zip(results, expected):
        assert torch.equal(got, want)


@needs_cuda
def test_backward_in_two_streams():
    torch.manual_seed(4)
    q, k, v = qkv("cuda", N=512, D=64)
    o = flashpp.attention(q, k, v)
    dout = torch.randn_like(o)
    want = torch.autograd.grad(o, (q, k, v), dout, retain_graph=True)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        got = torch.autograd.grad(o, (q, k, v), dout)
    torch.cuda.current_stream().wait_stream(s)
    for a, b in zip(got, want):
        assert torch.equal(a, b) or rel_err(a, b) < 1e-3  # atomics may reorder sums
