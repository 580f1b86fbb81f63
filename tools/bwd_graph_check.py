"""The backward's dependent launches (sm90: the main kernel and the postprocess may start beside
the kernel before them) checked on the lent GPU: dQ, dK, dV against an fp32 torch reference with
FLASHPP_SM90_BWD_PDL=0 once, then with the default launches 20 times eagerly and 10 times as
CUDA-graph replays, the outputs filled with NaN before each; a main kernel that read lse, delta or
the accumulator before the preprocess finished would show as a larger error or NaN.

    python3 tools/bwd_graph_check.py path/to/libflashpp.so
"""
import math, os, sys
import torch
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_compare
fp = gpu_compare.Flashpp(sys.argv[1])

def ref_grads(q, k, v, do, causal):
    qf, kf, vf = (t.float().transpose(1, 2).detach().requires_grad_() for t in (q, k, v))
    Hq, Hkv = qf.shape[1], kf.shape[1]
    ke, ve = kf.repeat_interleave(Hq // Hkv, 1), vf.repeat_interleave(Hq // Hkv, 1)
    o = torch.nn.functional.scaled_dot_product_attention(qf, ke, ve, is_causal=causal)
    o.backward(do.float().transpose(1, 2))
    return [t.grad.transpose(1, 2) for t in (qf, kf, vf)]

def err(x, r):
    return ((x.float() - r).abs().max() / r.abs().max()).item()

worst = 0.0
for B, Hq, Hkv, N, D, causal in [(1, 2, 2, 300, 64, True), (4, 32, 32, 1024, 64, False), (4, 32, 32, 1024, 128, True),
                                  (4, 32, 8, 1024, 128, False), (2, 8, 8, 4096, 128, False), (1, 16, 16, 1024, 96, True), (4, 32, 32, 4096, 128, False)]:
    torch.manual_seed(N + D)
    q = torch.randn(B, N, Hq, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, N, Hkv, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    do = torch.randn_like(q)
    o = torch.empty_like(q); lse = torch.empty(B, Hq, N, device="cuda", dtype=torch.float32)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    opts = fp.options(causal)
    fp.forward(q, k, v, o, lse, opts)
    ref = ref_grads(q, k, v, do, causal)
    def run():
        fp.backward(q, k, v, o, lse, do, dq, dk, dv, opts)
    def errors():
        return max(err(x, r) for x, r in zip((dq, dk, dv), ref))
    os.environ["FLASHPP_SM90_BWD_PDL"] = "0"
    run(); torch.cuda.synchronize(); base = errors()
    del os.environ["FLASHPP_SM90_BWD_PDL"]
    eager = 0.0
    for _ in range(20):
        for t in (dq, dk, dv): t.fill_(float("nan"))
        run()
        torch.cuda.synchronize()
        eager = max(eager, errors())
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        run()
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        run()
    graph = 0.0
    for _ in range(10):
        for t in (dq, dk, dv): t.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        graph = max(graph, errors())
    bad = not (eager <= 2 * base + 1e-3 and graph <= 2 * base + 1e-3) or math.isnan(eager) or math.isnan(graph)
    print(f"B={B} H={Hq}:{Hkv} N={N} D={D} causal={causal}: rel err PDL off {base:.2e}, eager x20 {eager:.2e}, graph x10 {graph:.2e} {'BAD' if bad else 'ok'}", flush=True)
    worst = max(worst, 1.0 if bad else 0.0)
print("graph_check:", "FAILED" if worst else "passed")
