"""flashpp: exact attention, softmax(Q Kᵀ · scale) V, computed the FlashAttention way.

    import flashpp
    o = flashpp.attention(q, k, v, causal=True)          # numpy or torch, [B, N, H, D]

PyTorch: flashpp.attention is differentiable and works under torch.compile(fullgraph=True) and
CUDA graphs; flashpp.torch has drop-in replacements for torch's scaled_dot_product_attention
and flash-attn's flash_attn_func, and an nn.Module.
"""
from . import _C
from ._C import Options, cuda_available, cuda_compiled, cuda_release_scratch, dropout_keep_mask
from ._fp8 import quantize_fp8
from .functional import attention, attention_backward
from .inference import attention_kvcache, attention_varlen, attention_varlen_backward

__version__ = _C.version()

__all__ = [
    "attention",
    "attention_backward",
    "attention_kvcache",
    "attention_varlen",
    "attention_varlen_backward",
    "cuda_available",
    "cuda_compiled",
    "cuda_release_scratch",
    "dropout_keep_mask",
    "Options",
    "quantize_fp8",
    "__version__",
]
