"""y = (x * w).sum(-1) as a PyTorch operator: the smallest complete example of the path flashpp
uses for attention (see python/flashpp/torch/ops.py).

  1. C++/CUDA kernels (weighted_sum_cpu.cpp, weighted_sum_cuda.cu) behind a nanobind module that
     takes DLPack tensors in place and a CUDA stream as an int (bindings.cpp).
  2. torch.library.custom_op for the forward and the backward, each with register_fake (shapes
     for torch.compile), and register_autograd tying them together.

    import torch
    from flashpp.examples.weighted_sum import weighted_sum
    y = weighted_sum(x, w)          # x: [..., D] float32, w: [D]; differentiable; CPU or CUDA
"""
from __future__ import annotations

import torch
from torch import Tensor

from . import _weighted_sum as _kernels

ROWS_PER_BLOCK = _kernels.ROWS_PER_BLOCK


def _stream(t: Tensor) -> int:
    return torch.cuda.current_stream(t.device).cuda_stream if t.is_cuda else 0


def _rows(x: Tensor) -> Tensor:
    """x as [R, D] rows ("... d -> (...) d"); a view when possible, the kernels need only a
    contiguous last dimension."""
    x = x.reshape(-1, x.shape[-1])
    return x if x.stride(-1) == 1 else x.contiguous()


@torch.library.custom_op("flashpp_examples::weighted_sum_fwd", mutates_args=())
def weighted_sum_fwd(x: Tensor, w: Tensor) -> Tensor:
    rows = _rows(x.detach())
    y = torch.empty(rows.shape[0], dtype=x.dtype, device=x.device)
    _kernels.forward(rows, w.detach().contiguous(), y, _stream(x))
    return y.view(x.shape[:-1])


@weighted_sum_fwd.register_fake
def _(x, w):
    return x.new_empty(x.shape[:-1])


@torch.library.custom_op("flashpp_examples::weighted_sum_bwd", mutates_args=())
def weighted_sum_bwd(grad_y: Tensor, x: Tensor, w: Tensor) -> tuple[Tensor, Tensor]:
    rows = _rows(x.detach())
    R, D = rows.shape
    grad_x = torch.empty_like(rows, memory_format=torch.contiguous_format)
    # One partial grad_w per block of ROWS_PER_BLOCK rows, summed here at the end.
    partial = torch.empty(((R + ROWS_PER_BLOCK - 1) // ROWS_PER_BLOCK, D), dtype=x.dtype,
                          device=x.device)
    _kernels.backward(rows, w.detach().contiguous(), grad_y.detach().reshape(-1).contiguous(),
                      grad_x, partial, _stream(x))
    return grad_x.view(x.shape), partial.sum(0)


@weighted_sum_bwd.register_fake
def _(grad_y, x, w):
    return x.new_empty(x.shape), w.new_empty(w.shape)


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward(ctx, grad_y):
    x, w = ctx.saved_tensors
    return weighted_sum_bwd(grad_y, x, w)


weighted_sum_fwd.register_autograd(_backward, setup_context=_setup_context)


def weighted_sum(x: Tensor, w: Tensor) -> Tensor:
    """(x * w).sum(-1) over the last dimension; x: float32 [..., D], w: float32 [D]."""
    if w.dim() != 1 or x.shape[-1] != w.shape[0]:
        raise ValueError(f"weighted_sum: expected w of shape [{x.shape[-1]}], got {tuple(w.shape)}")
    return weighted_sum_fwd(x, w)
