"""End to end: a 2-layer GPT trained for 200 steps with flashpp attention and with torch's SDPA,
from the same initialisation on the same batches. The loss curves must agree:

  - step 0 (same weights, same batch): |Δloss| < 0.01;
  - every 10-step moving average: |Δ| < 0.1 (bf16 kernels round differently, and training
    amplifies differences a little; a wrong gradient drifts by far more);
  - the mean loss of the last 20 steps: within 3% of each other;
  - and both actually learned (final loss < 85% of the initial ln(vocab)).

The data needs attention: token t is a fixed random function of token t-2 (10% noise), so the
model must learn to look two positions back.
"""
import copy
import math

import pytest

torch = pytest.importorskip("torch")

import flashpp  # noqa: E402
from flashpp.torch import scaled_dot_product_attention as flashpp_sdpa  # noqa: E402

pytestmark = pytest.mark.skipif(not (torch.cuda.is_available() and flashpp.cuda_available()),
                                reason="needs a GPU and flashpp built with CUDA")

VOCAB, SEQ, BATCH, WIDTH, HEADS, LAYERS, STEPS = 64, 128, 32, 128, 4, 2, 200


class Block(torch.nn.Module):
    def __init__(self, attention_fn):
        super().__init__()
        self.attention_fn = attention_fn
        self.ln1, self.ln2 = torch.nn.LayerNorm(WIDTH), torch.nn.LayerNorm(WIDTH)
        self.qkv = torch.nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = torch.nn.Linear(WIDTH, WIDTH)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(WIDTH, 4 * WIDTH), torch.nn.GELU(),
                                       torch.nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, x):
        B, N, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, N, 3, HEADS, WIDTH // HEADS).permute(2, 0, 3, 1, 4)
        o = self.attention_fn(q, k, v, is_causal=True)  # [B, H, N, D]
        x = x + self.proj(o.transpose(1, 2).reshape(B, N, WIDTH))
        return x + self.mlp(self.ln2(x))


class TinyGPT(torch.nn.Module):
    def __init__(self, attention_fn):
        super().__init__()
        self.tok = torch.nn.Embedding(VOCAB, WIDTH)
        self.pos = torch.nn.Parameter(torch.randn(SEQ, WIDTH) * 0.02)
        self.blocks = torch.nn.ModuleList(Block(attention_fn) for _ in range(LAYERS))
        self.ln = torch.nn.LayerNorm(WIDTH)
        self.head = torch.nn.Linear(WIDTH, VOCAB)

    def set_attention(self, fn):
        for b in self.blocks:
            b.attention_fn = fn

    def forward(self, tokens):
        x = self.tok(tokens) + self.pos[: tokens.shape[1]]
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def make_batches(device):
    g = torch.Generator().manual_seed(0)
    table = torch.randint(0, VOCAB, (VOCAB,), generator=g)
    data = torch.randint(0, VOCAB, (STEPS, BATCH, SEQ + 1), generator=g)
    noise = torch.rand(STEPS, BATCH, SEQ + 1, generator=g) < 0.1
    for t in range(2, SEQ + 1):
        det = table[data[..., t - 2]]
        data[..., t] = torch.where(noise[..., t], data[..., t], det)
    return data.to(device)


def train(model, batches):
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20))
    losses = []
    for step in range(STEPS):
        tokens = batches[step]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, VOCAB),
                                                 tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    return losses


def moving_average(xs, n=10):
    return [sum(xs[i:i + n]) / n for i in range(len(xs) - n + 1)]


def test_tiny_gpt_loss_curves_agree_with_sdpa():
    torch.manual_seed(0)
    batches = make_batches("cuda")
    model_sdpa = TinyGPT(torch.nn.functional.scaled_dot_product_attention).cuda()
    model_flash = copy.deepcopy(model_sdpa)
    model_flash.set_attention(flashpp_sdpa)
    sdpa_losses = train(model_sdpa, batches)
    flash_losses = train(model_flash, batches)
    print("\nstep  sdpa    flashpp")
    for s in range(0, STEPS, 20):
        print(f"{s:4d}  {sdpa_losses[s]:.4f}  {flash_losses[s]:.4f}")
    print(f"last  {sdpa_losses[-1]:.4f}  {flash_losses[-1]:.4f}")
    assert abs(sdpa_losses[0] - flash_losses[0]) < 0.01
    gap = max(abs(a - b) for a, b in zip(moving_average(sdpa_losses), moving_average(flash_losses)))
    assert gap < 0.1, f"10-step moving averages differ by {gap:.3f}"
    tail_s, tail_f = sum(sdpa_losses[-20:]) / 20, sum(flash_losses[-20:]) / 20
    assert abs(tail_s - tail_f) / tail_s < 0.03, (tail_s, tail_f)
    assert tail_f < 0.85 * math.log(VOCAB), f"did not learn: {tail_f:.3f}"
