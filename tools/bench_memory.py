#!/usr/bin/env python3
"""Peak extra device memory of one forward + backward, each provider in its own process.

"Extra" = the peak of torch's allocator during forward + backward, minus what the inputs (q, k, v,
dO) and the outputs (o, dq, dk, dv) occupy: saved tensors (lse), workspaces and temporaries.
flashpp allocates its workspace through torch (python/flashpp/torch/ops.py), so torch's counter
sees it. Shape of issue 12: B=1, H=16, N=32768, D=128, bf16, causal.

  python3 tools/bench_memory.py [--B 1 --H 16 --N 32768 --D 128 --dtype bf16 --causal 1]
"""
import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, sys, torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
provider, B, H, N, D, dtype, causal = sys.argv[1], *map(int, sys.argv[2:6]), sys.argv[6], bool(int(sys.argv[7]))
dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
torch.manual_seed(0)
q, k, v, do = (torch.randn(B, H, N, D, device="cuda", dtype=dt) for _ in range(4))
for t in (q, k, v):
    t.requires_grad_(True)
def run():
    if provider == "flashpp":
        import flashpp
        o = flashpp.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=causal).transpose(1, 2)
    else:
        backend = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[provider]
        with sdpa_kernel(backend):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    o.backward(do)
    return o
o = run()  # warm-up (workspace caches, handles)
q.grad = k.grad = v.grad = None
del o
torch.cuda.synchronize()
torch.cuda.empty_cache()
torch.cuda.reset_peak_memory_stats()
base = torch.cuda.memory_allocated()
o = run()
torch.cuda.synchronize()
peak = torch.cuda.max_memory_allocated()
io = o.numel() * o.element_size() + sum(t.grad.numel() * t.grad.element_size() for t in (q, k, v))
print(json.dumps({"provider": provider, "extra_mib": (peak - base - io) / 2**20,
                  "inputs_mib": base / 2**20, "outputs_mib": io / 2**20}))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--B", type=int, default=1)
    ap.add_argument("--H", type=int, default=16)
    ap.add_argument("--N", type=int, default=32768)
    ap.add_argument("--D", type=int, default=128)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--causal", type=int, default=1)
    ap.add_argument("--providers", default="flashpp,flash,cudnn")
    args = ap.parse_args()
    rows = []
    for provider in args.providers.split(","):
        cmd = [sys.executable, "-c", CHILD, provider, str(args.B), str(args.H), str(args.N), str(args.D),
               args.dtype, str(args.causal)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            rows.append(f"{provider:8} failed: {r.stderr.strip().splitlines()[-1] if r.stderr else r.returncode}")
            continue
        d = json.loads(r.stdout.strip().splitlines()[-1])
        rows.append(f"{provider:8} extra {d['extra_mib']:9.1f} MiB   (inputs {d['inputs_mib']:.0f} MiB, "
                    f"outputs {d['outputs_mib']:.0f} MiB)")
    print(f"peak extra device memory of forward + backward, B={args.B} H={args.H} N={args.N} D={args.D} "
          f"{args.dtype} causal={bool(args.causal)}, each provider in its own process:")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
