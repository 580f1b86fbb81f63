"""flashpp for PyTorch.

Importing this registers the operators torch.ops.flashpp.attention_fwd / attention_bwd
(autograd, torch.compile, CUDA graphs) and provides drop-in replacements:

    from flashpp.torch import scaled_dot_product_attention   # torch's signature, [B, H, N, D]
    from flashpp.torch import flash_attn_func                # flash-attn's signature, [B, N, H, D]
    from flashpp.torch import flash_attn_varlen_func         # packed sequences (flash-attn's)
    from flashpp.torch import flash_attn_with_kvcache        # KV-cache decoding (flash-attn's)
    from flashpp.torch import MultiheadAttention             # an nn.Module
"""
from . import inference, ops
from .dropins import (flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache,
                      scaled_dot_product_attention)
from .modules import MultiheadAttention

__all__ = ["inference", "ops", "flash_attn_func", "flash_attn_varlen_func",
           "flash_attn_with_kvcache", "scaled_dot_product_attention", "MultiheadAttention"]
