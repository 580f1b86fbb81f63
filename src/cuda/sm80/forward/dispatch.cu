// The CUDA forward's dispatch: checks the layout the 16-byte copies need, flattens the
// validated arguments into ForwardParams, and picks the instantiation for (dtype, head dim),
// rounding a head dim up to the next instantiated one (the extra columns are zero-filled in
// shared memory and never stored).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "../../forward.hpp"
#include "params.hpp"

namespace flashpp::cuda {
namespace sm80 {

template <typename Element, int kHeadDim>
void launch_forward(const ForwardParams& params, std::int64_t batch_heads, cudaStream_t stream);

namespace {

// The instantiated head dims, smallest first.
constexpr int kHeadDims[] = {32, 64, 96, 128, 192, 256};

int instantiated_head_dim(std::int64_t D) {
  for (int d : kHeadDims)
    if (D <= d) return d;
  return 0;
}

template <typename Element>
void launch_for_head_dim(int head_dim, const ForwardParams& params, std::int64_t batch_heads,
                         cudaStream_t stream) {
  switch (head_dim) {
    case 32: return launch_forward<Element, 32>(params, batch_heads, stream);
    case 64: return launch_forward<Element, 64>(params, batch_heads, stream);
    case 96: return launch_forward<Element, 96>(params, batch_heads, stream);
    case 128: return launch_forward<Element, 128>(params, batch_heads, stream);
    case 192: return launch_forward<Element, 192>(params, batch_heads, stream);
    case 256: return launch_forward<Element, 256>(params, batch_heads, stream);
    default: throw Error(ErrorCode::internal, "sm80 forward: no instantiation for this head dim");
  }
}

ForwardParams make_params(const detail::ForwardArgs& a) {
  const detail::Problem& p = a.problem;
  ForwardParams f;
  f.q = a.q.data;
  f.k = a.k.data;
  f.v = a.v.data;
  f.o = a.o.data;
  f.lse = a.write_lse ? static_cast<float*>(a.lse.data) : nullptr;
  f.q_batch_stride = a.q.strides[0], f.q_row_stride = a.q.strides[1], f.q_head_stride = a.q.strides[2];
  f.k_batch_stride = a.k.strides[0], f.k_row_stride = a.k.strides[1], f.k_head_stride = a.k.strides[2];
  f.v_batch_stride = a.v.strides[0], f.v_row_stride = a.v.strides[1], f.v_head_stride = a.v.strides[2];
  f.o_batch_stride = a.o.strides[0], f.o_row_stride = a.o.strides[1], f.o_head_stride = a.o.strides[2];
  if (f.lse != nullptr) {
    f.lse_batch_stride = a.lse.strides[0];
    f.lse_head_stride = a.lse.strides[1];
    f.lse_row_stride = a.lse.strides[2];
  }
  f.Nq = p.Nq;
  f.Nk = p.Nk;
  f.Hq = p.Hq;
  f.heads_per_kv = p.Hkv > 0 ? p.heads_per_kv() : 1;
  f.head_dim = static_cast<int>(p.D);
  f.scale = p.scale;
  f.scale_log2 = static_cast<float>(static_cast<double>(p.scale) * 1.4426950408889634);
  f.softcap = p.softcap;
  f.mask = p.mask;
  f.dropout = p.dropout;
  return f;
}

// A tensor the kernels copy or store with 16-byte vectors must be 16-byte aligned with strides
// that are multiples of 8 elements (dimensions of size 1 are never stepped over).
std::string alignment_problem(const char* name, const TensorView& t) {
  if (t.data == nullptr) return {};
  if (reinterpret_cast<std::uintptr_t>(t.data) % 16 != 0) {
    return std::string(name) + ": the CUDA backend needs a 16-byte aligned data pointer";
  }
  for (int d = 0; d < 3; ++d) {
    if (t.sizes[d] > 1 && t.strides[d] % 8 != 0) {
      return std::string(name) + ": the CUDA backend needs strides (but the last) that are " +
             "multiples of 8 elements, got stride " + std::to_string(t.strides[d]) +
             " in dimension " + std::to_string(d);
    }
  }
  return {};
}

}  // namespace
}  // namespace sm80

std::string forward_layout_unsupported_reason(const detail::ForwardArgs& args) {
  for (const auto& [name, t] : {std::pair<const char*, const TensorView*>{"q", &args.q},
                                {"k", &args.k}, {"v", &args.v}, {"o", &args.o}}) {
    std::string reason = sm80::alignment_problem(name, *t);
    if (!reason.empty()) return reason;
  }
  return {};
}

void run_forward(const detail::ForwardArgs& args) {
  const detail::Problem& p = args.problem;
  const int head_dim = sm80::instantiated_head_dim(p.D);
  const sm80::ForwardParams params = sm80::make_params(args);
  const auto stream = static_cast<cudaStream_t>(args.stream);
  const std::int64_t batch_heads = p.B * p.Hq;
  if (p.dtype == DType::f16) {
    sm80::launch_for_head_dim<__half>(head_dim, params, batch_heads, stream);
  } else {
    sm80::launch_for_head_dim<__nv_bfloat16>(head_dim, params, batch_heads, stream);
  }
}

}  // namespace flashpp::cuda
