"""flashpp's PyTorch operators: flashpp::attention_fwd and flashpp::attention_bwd.

Registered through torch.library.custom_op, so that
  - autograd works: the forward saves q, k, v, o, lse (and the dropout seed/offset) and the
    backward calls flashpp's backward (register_autograd);
  - torch.compile(fullgraph=True) traces through them without a graph break: each op is one
    opaque node whose output shapes and strides come from register_fake;
  - CUDA graph capture works: every buffer (outputs and flashpp's workspace) is allocated by
    torch, so it comes from the capture's memory pool, and kernels go to torch's current stream.

Tensors cross into C++ by DLPack (no copies): this module never needs flashpp to be rebuilt for
a torch version. Inputs are [B, N, H, D] views with a contiguous last dimension (any other
strides); outputs are allocated like their inputs (torch.empty_like keeps a dense layout, so a
[B, H, N, D] caller gets a [B, H, N, D] result).
"""
from __future__ import annotations

import contextlib
import functools

import torch
from torch import Tensor
from torch.utils.dlpack import to_dlpack

from .. import _C, _rng
from .._options import AttentionConfig, to_options


# Per-call Python work is what a small attention call costs on top of its kernels, so the
# pieces that depend only on the configuration (and the shapes) are computed once.
@functools.lru_cache(maxsize=1024)
def _options(softmax_scale, causal, bottom_right, window_left, window_right, softcap, dropout_p,
             deterministic, backend, seed, offset):
    cfg = AttentionConfig(softmax_scale, causal, bottom_right, window_left, window_right,
                          softcap, dropout_p, deterministic, backend)
    return to_options(cfg, seed, offset)


_workspace_sizes: dict = {}


def _workspace_bytes(query, q: Tensor, k: Tensor, v: Tensor, opt, key) -> int:
    """flashpp's workspace size, asked once per (direction, shapes, dtype, device, options):
    it depends on nothing else."""
    key = (query, q.shape, k.shape, q.dtype, q.device, key)
    size = _workspace_sizes.get(key)
    if size is None:
        size = query(_dl(q), _dl(k), _dl(v), opt)
        if len(_workspace_sizes) > 4096:
            _workspace_sizes.clear()
        _workspace_sizes[key] = size
    return size


def _dl(t: Tensor):
    # A DLPack capsule straight from torch (public torch.utils.dlpack.to_dlpack): several times
    # cheaper per tensor than the __dlpack__ protocol method, and nanobind accepts capsules.
    return to_dlpack(t)


def _stream(t: Tensor) -> int:
    return torch.cuda.current_stream(t.device).cuda_stream if t.is_cuda else 0


def _on_device(t: Tensor):
    return torch.cuda.device(t.device) if t.is_cuda else contextlib.nullcontext()


def _last_dim_contiguous(t: Tensor) -> Tensor:
    """The tensor as the kernels can read it, copied only when they cannot: the C++ API needs a
    contiguous last dimension (a gradient from .sum() arrives expanded, stride 0), and the CUDA
    kernels' 16-byte copies need 16-byte aligned data and strides that are multiples of 8."""
    if t.size(-1) > 1 and t.stride(-1) != 1:
        return t.contiguous()
    if t.is_cuda and t.numel() > 0:
        misaligned = t.data_ptr() % 16 != 0 or any(
            st % 8 != 0 for sz, st in zip(t.shape[:-1], t.stride()[:-1]) if sz > 1)
        if misaligned:  # (clone: contiguous() would return a contiguous-but-misaligned t as is)
            return t.clone(memory_format=torch.contiguous_format)
    return t


def _output_like(t: Tensor) -> Tensor:
    """An output shaped like t: t's dense layout if its last dimension is contiguous, else
    contiguous. Used by the real and the fake kernels alike, so their strides agree."""
    if t.size(-1) <= 1 or t.stride(-1) == 1:
        return torch.empty_like(t)
    return t.new_empty(t.shape)


def _workspace(nbytes: int, like: Tensor):
    # Allocated by torch, so CUDA graph capture takes it from the graph's pool.
    return torch.empty(nbytes, dtype=torch.uint8, device=like.device) if nbytes > 0 else None


def _resolve_rng(dropout_p: float, seed: int, offset: int) -> tuple[int, int]:
    """seed/offset < 0 mean "draw one": from torch's CPU generator, and the next call count."""
    if dropout_p <= 0.0:
        return max(seed, 0), max(offset, 0)
    return (_rng.draw_torch_seed() if seed < 0 else seed,
            _rng.next_offset() if offset < 0 else offset)


@torch.library.custom_op("flashpp::attention_fwd", mutates_args=())
def attention_fwd(
    q: Tensor, k: Tensor, v: Tensor,
    softmax_scale: float, causal: bool, bottom_right: bool, window_left: int, window_right: int,
    softcap: float, dropout_p: float, seed: int, offset: int, deterministic: bool, backend: str,
) -> tuple[Tensor, Tensor, Tensor]:
    """(o, lse, rng_state): o like q, lse float32 [B, Hq, Nq], rng_state int64 [2] on the CPU
    holding the (seed, offset) the dropout mask was made with (the backward regenerates it)."""
    config = (softmax_scale, causal, bottom_right, window_left, window_right, softcap, dropout_p,
              deterministic, backend)
    seed, offset = _resolve_rng(dropout_p, seed, offset)
    o = _output_like(q)
    q, k, v = (_last_dim_contiguous(t.detach()) for t in (q, k, v))
    B, Nq, Hq, _ = q.shape
    lse = torch.empty((B, Hq, Nq), dtype=torch.float32, device=q.device)
    opt = _options(*config, seed, offset)
    with _on_device(q):
        nbytes = _workspace_bytes(_C.forward_workspace_size, q, k, v, opt, config)
        workspace = _workspace(nbytes, q)
        _C.forward(_dl(q), _dl(k), _dl(v), _dl(o), _dl(lse), opt, _stream(q),
                   None if workspace is None else _dl(workspace))
    return o, lse, torch.tensor([seed, offset], dtype=torch.int64)


@attention_fwd.register_fake
def _attention_fwd_fake(q, k, v, softmax_scale, causal, bottom_right, window_left, window_right,
                        softcap, dropout_p, seed, offset, deterministic, backend):
    B, Nq, Hq, _ = q.shape
    return (_output_like(q), q.new_empty((B, Hq, Nq), dtype=torch.float32),
            torch.empty(2, dtype=torch.int64, device="cpu"))


@torch.library.custom_op("flashpp::attention_bwd", mutates_args=())
def attention_bwd(
    dout: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, rng_state: Tensor,
    softmax_scale: float, causal: bool, bottom_right: bool, window_left: int, window_right: int,
    softcap: float, dropout_p: float, deterministic: bool, backend: str,
) -> tuple[Tensor, Tensor, Tensor]:
    """(dq, dk, dv), each like its input; dk, dv sum over the query heads of a kv head."""
    config = (softmax_scale, causal, bottom_right, window_left, window_right, softcap, dropout_p,
              deterministic, backend)
    seed, offset = (int(x) for x in rng_state.tolist())  # a CPU tensor: no device sync
    dq, dk, dv = _output_like(q), _output_like(k), _output_like(v)
    q, k, v, o, dout = (_last_dim_contiguous(t.detach()) for t in (q, k, v, o, dout))
    opt = _options(*config, seed, offset)
    with _on_device(q):
        nbytes = _workspace_bytes(_C.backward_workspace_size, q, k, v, opt, config)
        workspace = _workspace(nbytes, q)
        _C.backward(_dl(q), _dl(k), _dl(v), _dl(o), _dl(lse.detach()), _dl(dout), _dl(dq),
                    _dl(dk), _dl(dv), opt, _stream(q), None if workspace is None else _dl(workspace))
    return dq, dk, dv


@attention_bwd.register_fake
def _attention_bwd_fake(dout, q, k, v, o, lse, rng_state, softmax_scale, causal, bottom_right,
                        window_left, window_right, softcap, dropout_p, deterministic, backend):
    return _output_like(q), _output_like(k), _output_like(v)


# ---- autograd ---------------------------------------------------------------------------------
_N_CONFIG_INPUTS = 11  # attention_fwd's inputs after q, k, v


def _setup_context(ctx, inputs, output):
    q, k, v, scale, causal, bottom_right, wl, wr, softcap, p, _seed, _offset, det, backend = inputs
    o, lse, rng_state = output
    ctx.save_for_backward(q, k, v, o, lse, rng_state)
    ctx.config = (scale, causal, bottom_right, wl, wr, softcap, p, det, backend)
    # lse is returned for inspection and KV-cache merging; gradients do not flow through it.
    ctx.mark_non_differentiable(lse, rng_state)


def _backward(ctx, grad_o, _grad_lse, _grad_rng):
    q, k, v, o, lse, rng_state = ctx.saved_tensors
    if grad_o is None:
        return (None,) * (3 + _N_CONFIG_INPUTS)
    dq, dk, dv = attention_bwd(grad_o, q, k, v, o, lse, rng_state, *ctx.config)
    return (dq, dk, dv) + (None,) * _N_CONFIG_INPUTS


attention_fwd.register_autograd(_backward, setup_context=_setup_context)
