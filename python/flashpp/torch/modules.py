"""nn.Module wrappers."""
from __future__ import annotations

import torch
from torch import nn

from ..functional import attention


class MultiheadAttention(nn.Module):
    """Multi-head attention (self- or cross-) with flashpp inside, batch-first.

    x: [B, N, embed_dim] -> [B, N, embed_dim]. num_kv_heads < num_heads gives grouped-query
    attention (it must divide num_heads). Dropout on the attention probabilities applies in
    training mode only. causal / causal_alignment / window / softcap as in flashpp.attention.
    """

    def __init__(self, embed_dim: int, num_heads: int, num_kv_heads: int | None = None, *,
                 bias: bool = True, dropout: float = 0.0, causal: bool = False,
                 causal_alignment: str = "top_left", window=None, softcap: float = 0.0,
                 device=None, dtype=None):
        super().__init__()
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if embed_dim % num_heads != 0:
            raise ValueError(f"MultiheadAttention: embed_dim {embed_dim} is not a multiple of "
                             f"num_heads {num_heads}")
        if num_heads % num_kv_heads != 0:
            raise ValueError(f"MultiheadAttention: num_kv_heads {num_kv_heads} does not divide "
                             f"num_heads {num_heads}")
        self.embed_dim, self.num_heads, self.num_kv_heads = embed_dim, num_heads, num_kv_heads
        self.head_dim = embed_dim // num_heads
        self.dropout, self.causal, self.causal_alignment = dropout, causal, causal_alignment
        self.window, self.softcap = window, softcap
        kw = dict(bias=bias, device=device, dtype=dtype)
        self.q_proj = nn.Linear(embed_dim, embed_dim, **kw)
        self.kv_proj = nn.Linear(embed_dim, 2 * num_kv_heads * self.head_dim, **kw)
        self.out_proj = nn.Linear(embed_dim, embed_dim, **kw)

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        """Self-attention over x, or cross-attention from x to context ([B, M, embed_dim])."""
        context = x if context is None else context
        B, N, _ = x.shape
        M = context.shape[1]
        q = self.q_proj(x).view(B, N, self.num_heads, self.head_dim)
        # k and v stay strided views of one projection: flashpp reads them in place.
        k, v = self.kv_proj(context).view(B, M, 2, self.num_kv_heads, self.head_dim).unbind(2)
        o = attention(q, k, v, causal=self.causal, causal_alignment=self.causal_alignment,
                      window=self.window, softcap=self.softcap,
                      dropout_p=self.dropout if self.training else 0.0)
        return self.out_proj(o.reshape(B, N, self.embed_dim))

    def extra_repr(self) -> str:
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
                f"num_kv_heads={self.num_kv_heads}, dropout={self.dropout}, causal={self.causal}")
