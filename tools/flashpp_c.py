"""The C API's structs (include/flashpp/flashpp.h) for ctypes, in one place.

The tools that call libflashpp.so through ctypes (gpu_compare.py, bench_do_bench.py,
decode_bench.py, flashpp_capi.py) import these instead of keeping their own copies: a struct that
is shorter than the C one lets flashpp_options_default() write past it. tests/python/
test_c_struct_layouts.py compares every size and field offset here with the C compiler's.
"""
import ctypes

# flashpp_dtype
F32, F16, BF16, F64, E4M3, I32 = 0, 1, 2, 3, 4, 5
# flashpp_device_type
CPU, CUDA = 0, 1


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int32), ("device_type", ctypes.c_int32),
                ("device_index", ctypes.c_int32), ("rank", ctypes.c_int32),
                ("sizes", ctypes.c_int64 * 4), ("strides", ctypes.c_int64 * 4)]


class Options(ctypes.Structure):
    _fields_ = [("softmax_scale", ctypes.c_float), ("causal", ctypes.c_int32), ("alignment", ctypes.c_int32),
                ("window_left", ctypes.c_int64), ("window_right", ctypes.c_int64),
                ("softcap", ctypes.c_float), ("dropout_p", ctypes.c_float),
                ("seed", ctypes.c_uint64), ("offset", ctypes.c_uint64),
                ("deterministic", ctypes.c_int32), ("write_lse", ctypes.c_int32), ("backend", ctypes.c_int32),
                ("q_descale", ctypes.POINTER(Tensor)), ("k_descale", ctypes.POINTER(Tensor)),
                ("v_descale", ctypes.POINTER(Tensor))]


class KvCache(ctypes.Structure):
    _fields_ = [("k_cache", ctypes.POINTER(Tensor)), ("v_cache", ctypes.POINTER(Tensor)),
                ("cache_seqlens", ctypes.POINTER(Tensor)), ("block_table", ctypes.POINTER(Tensor)),
                ("k_new", ctypes.POINTER(Tensor)), ("v_new", ctypes.POINTER(Tensor)),
                ("validate_indices", ctypes.c_int32)]


class PackedBatch(ctypes.Structure):
    _fields_ = [("cu_seqlens_q", ctypes.POINTER(Tensor)), ("cu_seqlens_k", ctypes.POINTER(Tensor)),
                ("max_seqlen_q", ctypes.c_int64), ("max_seqlen_k", ctypes.c_int64)]


def tensor_view(t, dtype_code, device_type=CUDA):
    """A Tensor describing torch tensor t (any strides; its data stays where it is)."""
    v = Tensor()
    v.data = t.data_ptr()
    v.dtype = dtype_code
    v.device_type = device_type
    v.device_index = (t.device.index or 0) if device_type == CUDA else 0
    v.rank = t.dim()
    for i in range(t.dim()):
        v.sizes[i] = t.shape[i]
        v.strides[i] = t.stride(i)
    return v


# C struct name -> ctypes class, for the layout test.
STRUCTS = {"flashpp_tensor": Tensor, "flashpp_options": Options, "flashpp_kv_cache": KvCache,
           "flashpp_packed_batch": PackedBatch}
