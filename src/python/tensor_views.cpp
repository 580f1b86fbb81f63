#include "tensor_views.hpp"

#include <string>

namespace flashpp::python {
namespace {

// DLPack device kinds we understand (dlpack.h: kDLCPU = 1, kDLCUDA = 2).
constexpr int kDLPackCpu = 1;
constexpr int kDLPackCuda = 2;

std::string describe_dtype(nb::dlpack::dtype t) {
  static const char* codes[] = {"int", "uint", "float", "opaque", "bfloat", "complex", "bool"};
  const char* code = t.code < 7 ? codes[t.code] : "code";
  return std::string(code) + std::to_string(t.bits) +
         (t.lanes != 1 ? "x" + std::to_string(t.lanes) : "");
}

// Maps a DLPack dtype to flashpp's; throws Error(unsupported) naming the argument otherwise
// (translated to TypeError in Python).
DType to_dtype(nb::dlpack::dtype t, const char* name, const ViewRules& rules) {
  using Code = nb::dlpack::dtype_code;
  if (t.lanes == 1) {
    if (t.code == static_cast<std::uint8_t>(Code::Float)) {
      if (t.bits == 16) return DType::f16;
      if (t.bits == 32) return DType::f32;
      if (t.bits == 64) return DType::f64;
    }
    if (t.code == static_cast<std::uint8_t>(Code::Bfloat) && t.bits == 16) return DType::bf16;
    // Index tensors (cu_seqlens, cache_seqlens, block_table); validation keeps them out of q/k/v.
    if (t.code == static_cast<std::uint8_t>(Code::Int) && t.bits == 32) return DType::i32;
    if (rules.uint16_is_bf16 && t.code == static_cast<std::uint8_t>(Code::UInt) && t.bits == 16) {
      return DType::bf16;
    }
    if (rules.uint8_is_e4m3 && t.code == static_cast<std::uint8_t>(Code::UInt) && t.bits == 8) {
      return DType::e4m3;
    }
  }
  throw Error(ErrorCode::unsupported, std::string("flashpp: ") + name +
                                          ": expected dtype float16, bfloat16, float32, "
                                          "float8_e4m3fn (or float64 for the reference "
                                          "backend; int32 for index tensors), got " +
                                          describe_dtype(t));
}

Device to_device(int device_type, int device_id, const char* name) {
  if (device_type == kDLPackCpu) return Device{DeviceType::cpu, 0};
  if (device_type == kDLPackCuda) return Device{DeviceType::cuda, device_id};
  throw Error(ErrorCode::invalid_argument,
              std::string("flashpp: ") + name +
                  ": expected a tensor in CPU or CUDA device memory, got DLPack device type " +
                  std::to_string(device_type));
}

template <typename Array>
TensorView make_view(const Array& a, const char* name, const ViewRules& rules) {
  TensorView t;
  if (a.ndim() > TensorView::kMaxRank) {
    throw Error(ErrorCode::invalid_argument,
                std::string("flashpp: ") + name + ": expected at most 4 dimensions, got " +
                    std::to_string(a.ndim()));
  }
  t.data = const_cast<void*>(static_cast<const void*>(a.data()));
  t.dtype = to_dtype(a.dtype(), name, rules);
  t.device = to_device(a.device_type(), a.device_id(), name);
  t.rank = static_cast<int>(a.ndim());
  for (int i = 0; i < t.rank; ++i) {
    t.sizes[i] = static_cast<std::int64_t>(a.shape(i));
    t.strides[i] = a.stride(i);
  }
  // An empty tensor addresses nothing, and exporters give it arbitrary strides (numpy: all 0):
  // describe it as contiguous so the stride rules (last stride 1) hold trivially.
  if (a.size() == 0) {
    std::int64_t stride = 1;
    for (int i = t.rank - 1; i >= 0; --i) {
      t.strides[i] = stride;
      stride *= t.sizes[i] > 0 ? t.sizes[i] : 1;
    }
  }
  return t;
}

}  // namespace

TensorView to_view(const InputArray& array, const char* name, const ViewRules& rules) {
  return make_view(array, name, rules);
}

TensorView to_view(const OutputArray& array, const char* name, const ViewRules& rules) {
  return make_view(array, name, rules);
}

Workspace to_workspace(const OutputArray* buffer) {
  if (buffer == nullptr) return {};
  return Workspace{buffer->data(), buffer->nbytes()};
}

}  // namespace flashpp::python
