"""The lean eager path of flashpp.attention for torch tensors.

The torch.library operators of ops.py are what torch.compile, FakeTensor, functorch and
dispatch modes need to see. Outside those, running a custom op through torch's dispatcher and
handing each tensor to C++ as a DLPack capsule cost tens of microseconds per call, several times
a small call's GPU time. Here, when nothing is tracing (usable() below), the same C++ library is
called directly:
  - launch plans (src/python/launch_plans.cpp): the tensor views without data pointers, the
    options and the workspace size, built once per (shapes, strides, dtype, device, options)
    and cached; a call passes only data pointers, the dropout seed/offset and the stream;
  - a torch.autograd.Function (lighter than the custom op's autograd registration) when a
    gradient is needed, nothing when not;
  - outputs and the workspace allocated by torch as in ops.py, so CUDA graph capture works.
Both paths give bit-identical results (tests/python/test_torch_eager_path.py).
FLASHPP_TORCH_EAGER=0 in the environment (read at import) sends every call through the operators.
"""
from __future__ import annotations

import os

import torch

from .. import _C, _rng
from .._options import AttentionConfig, to_options

_DTYPE_CODES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2, torch.float64: 3}

_is_compiling = getattr(torch.compiler, "is_compiling", lambda: False)
_dispatch_stack_len = getattr(torch._C, "_len_torch_dispatch_stack", lambda: 0)
_function_mode_on = getattr(torch._C, "_is_torch_function_mode_enabled", lambda: False)
_functorch = getattr(torch._C, "_functorch", None)
_is_wrapped = getattr(_functorch, "is_functorch_wrapped_tensor", lambda t: False)
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)


_ENABLED = os.environ.get("FLASHPP_TORCH_EAGER", "1") != "0"


def usable(q, k, v) -> bool:
    """True for plain eager calls: plain torch.Tensor inputs (not FakeTensor or other
    subclasses), not inside torch.compile tracing, no dispatch or function modes, no functorch
    transforms. Everything else takes the torch.library operators."""
    if not _ENABLED or type(q) is not torch.Tensor or type(k) is not torch.Tensor \
            or type(v) is not torch.Tensor:
        return False
    if q.is_meta or _is_compiling() or _dispatch_stack_len() or _function_mode_on() \
            or _functorch_active():
        return False
    # Dtypes the library does not take: the operators' path raises the usual TypeError.
    if q.dtype not in _DTYPE_CODES or k.dtype not in _DTYPE_CODES or v.dtype not in _DTYPE_CODES:
        return False
    return not (_is_wrapped(q) or _is_wrapped(k) or _is_wrapped(v))


def _meta(t: torch.Tensor):
    dev = t.device
    return (_DTYPE_CODES.get(t.dtype, -1), 1 if dev.type == "cuda" else 0, dev.index or 0,
            list(t.shape), list(t.stride()))


def _stream(t: torch.Tensor) -> int:
    if not t.is_cuda:
        return 0
    if _raw_stream is not None:
        return _raw_stream(t.get_device())
    return torch.cuda.current_stream(t.device).cuda_stream


def _readable(t: torch.Tensor) -> torch.Tensor:
    """As ops._last_dim_contiguous: a copy only where the kernels cannot read t in place."""
    if t.size(-1) > 1 and t.stride(-1) != 1:
        return t.contiguous()
    if t.is_cuda and (t.data_ptr() % 16 or any(st % 8 for sz, st in zip(t.shape[:-1], t.stride()[:-1]) if sz > 1)):
        return t.clone(memory_format=torch.contiguous_format)
    return t


def _like(t: torch.Tensor) -> torch.Tensor:
    """As ops._output_like."""
    if t.size(-1) <= 1 or t.stride(-1) == 1:
        return torch.empty_like(t)
    return t.new_empty(t.shape)


_options_cache: dict = {}
_forward_plans: dict = {}
_backward_plans: dict = {}
_PLAN_LIMIT = 4096
_F32 = torch.float32
_U8 = torch.uint8


def _options(cfg: AttentionConfig, write_lse: bool = True):
    key = (cfg, write_lse)
    opt = _options_cache.get(key)
    if opt is None:
        opt = _options_cache[key] = to_options(cfg, write_lse=write_lse)
    return opt


def _remember(cache: dict, key, value):
    if len(cache) >= _PLAN_LIMIT:
        cache.clear()
    cache[key] = value
    return value


def _workspace(nbytes: int, like: torch.Tensor):
    return torch.empty(nbytes, dtype=_U8, device=like.device) if nbytes else None


def _rng_pair(cfg: AttentionConfig, seed, offset):
    """As the operators' seed/offset handling (functional.attention, ops._resolve_rng)."""
    if seed is not None or offset is not None:
        _rng.check_seed(seed or 0, offset or 0)
    if cfg.dropout_p <= 0.0:
        return (0 if seed is None else int(seed)), (0 if offset is None else int(offset))
    return (_rng.draw_torch_seed() if seed is None else int(seed),
            _rng.next_offset() if offset is None else int(offset))


def _copy_needed(t: torch.Tensor) -> bool:
    """Whether the kernels cannot read t in place because of its strides (the data pointer's
    alignment is checked per call): as ops._last_dim_contiguous."""
    if t.size(-1) > 1 and t.stride(-1) != 1:
        return True
    return t.is_cuda and any(st % 8 for sz, st in zip(t.shape[:-1], t.stride()[:-1]) if sz > 1)


def forward(q, k, v, cfg: AttentionConfig, seed: int, offset: int, write_lse: bool = True):
    """o, lse for [B, N, H, D] views q, k, v (no autograd); lse is None when not write_lse (the
    kernels then store none, and nothing is allocated for it). Per call, for a known
    configuration: one dictionary lookup, the data pointers' alignment, the allocations of o
    (and lse) and the launch."""
    key = (q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), q.dtype, k.dtype,
           v.dtype, q.device, k.device, v.device, cfg, write_lse)
    plan = _forward_plans.get(key)
    if plan is None:
        if _copy_needed(q) or _copy_needed(k) or _copy_needed(v):
            _forward_plans[key] = False  # this layout always takes the copying path
            return _forward_copying(q, k, v, cfg, seed, offset, write_lse)
        plan = _new_forward_plan(key, q, k, v, cfg, write_lse)
    elif plan is False:
        return _forward_copying(q, k, v, cfg, seed, offset, write_lse)
    run, lse_shape, workspace_bytes = plan
    qp, kp, vp = q.data_ptr(), k.data_ptr(), v.data_ptr()
    if q.is_cuda and (qp | kp | vp) % 16:
        return _forward_copying(q, k, v, cfg, seed, offset, write_lse)
    # The plan's layouts have a contiguous last dimension, so _like(q) is empty_like(q): its
    # strides are a function of q's, so the plan's hold.
    o = torch.empty_like(q)
    lse = q.new_empty(lse_shape, dtype=_F32) if write_lse else None
    ws = _workspace(workspace_bytes, q)
    run(qp, kp, vp, o.data_ptr(), 0 if lse is None else lse.data_ptr(), seed, offset, _stream(q),
        0 if ws is None else ws.data_ptr())
    return o, lse


def _new_forward_plan(key, q, k, v, cfg, write_lse):
    o = _like(q)
    B, Nq, Hq, _ = q.shape
    lse = torch.empty((B, Hq, Nq), dtype=torch.float32, device=q.device)
    plan = _C.ForwardPlan(_meta(q), _meta(k), _meta(v), _meta(o), _meta(lse),
                          _options(cfg, write_lse), q.data_ptr(), k.data_ptr(), v.data_ptr())
    # (the bound run method, lse's shape, the workspace size): no attribute lookups per call.
    return _remember(_forward_plans, key, (plan.run, (B, Hq, Nq), plan.workspace_bytes))


def _forward_copying(q, k, v, cfg, seed, offset, write_lse=True):
    """Inputs the kernels cannot read in place: copied as the operators do, then the plan of
    the copies' layout."""
    return forward(_readable(q), _readable(k), _readable(v), cfg, seed, offset, write_lse)


def backward(dout, q, k, v, o, lse, cfg: AttentionConfig, seed: int, offset: int):
    """dq, dk, dv (no autograd). lse is the forward's own (float32, on q's device), and dq, dk,
    dv are allocated like q, k, v, so their layouts follow from the key's."""
    key = (q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), o.shape, o.stride(),
           dout.shape, dout.stride(), q.dtype, k.dtype, v.dtype, o.dtype, dout.dtype, q.device,
           k.device, v.device, o.device, dout.device, lse.shape, cfg)
    plan = _backward_plans.get(key)
    pointers = [q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr(),
                dout.data_ptr()]
    misaligned = q.is_cuda and (pointers[0] | pointers[1] | pointers[2] | pointers[3] |
                                pointers[4] | pointers[5]) % 16 != 0
    if plan is None or misaligned:
        if misaligned or any(_copy_needed(t) for t in (q, k, v, o, dout)):
            q, k, v, o, dout = (_readable(t) for t in (q, k, v, o, dout))
            return backward(dout, q, k, v, o, lse, cfg, seed, offset)
    if plan is None:
        dq, dk, dv = _like(q), _like(k), _like(v)
        data = pointers + [dq.data_ptr(), dk.data_ptr(), dv.data_ptr()]
        cplan = _C.BackwardPlan([_meta(t) for t in (q, k, v, o, lse, dout, dq, dk, dv)],
                                _options(cfg), data)
        plan = _remember(_backward_plans, key, (cplan.run, cplan.workspace_bytes))
    else:
        # A plan's layouts have contiguous last dimensions: _like is empty_like.
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        pointers += [dq.data_ptr(), dk.data_ptr(), dv.data_ptr()]
        data = pointers
    run, workspace_bytes = plan
    ws = _workspace(workspace_bytes, q)
    run(data, seed, offset, _stream(q), 0 if ws is None else ws.data_ptr())
    return dq, dk, dv


class _Attention(torch.autograd.Function):
    """Autograd for the eager path: saves q, k, v, o, lse and the dropout (seed, offset).
    (The configuration travels as one argument: apply's per-argument checks cost per call.)"""

    @staticmethod
    def forward(ctx, q, k, v, call):
        cfg, seed, offset = call
        o, lse = forward(q, k, v, cfg, seed, offset)
        # The caller's q, k, v: where the forward had to copy them (rare), the backward does too.
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.call = call
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, grad_o, _grad_lse):
        if grad_o is None:
            return None, None, None, None
        q, k, v, o, lse = ctx.saved_tensors
        cfg, seed, offset = ctx.call
        dq, dk, dv = backward(grad_o, q, k, v, o, lse, cfg, seed, offset)
        return dq, dk, dv, None


# autograd.Function.apply's Python wrapper only binds default arguments (for a setup_context,
# which _Attention has none of) and unwraps dead functorch wrappers (usable() admits no
# functorch tensors and no active transforms): about 3 us per call, skipped by calling the C
# apply it ends in. Where torch lacks it, the wrapper.
_c_apply = getattr(getattr(torch._C, "_FunctionBase", None), "__dict__", {}).get("apply")
_apply = _c_apply.__get__(None, _Attention) if _c_apply is not None else _Attention.apply


def attention(q, k, v, cfg: AttentionConfig, seed, offset, need_lse: bool = True):
    """(o, lse, (seed, offset)) for [B, N, H, D] views, with autograd when a gradient is needed.
    need_lse=False: the caller drops lse, so a call without autograd neither allocates nor
    stores it (lse is then None); with autograd the backward needs it either way."""
    seed, offset = _rng_pair(cfg, seed, offset)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        o, lse = _apply(q, k, v, (cfg, seed, offset))
    else:
        o, lse = forward(q, k, v, cfg, seed, offset, need_lse)
    return o, lse, (seed, offset)
