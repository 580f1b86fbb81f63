// Public entry points: validate every argument, then dispatch to a backend.
#include <cmath>

#include "../cpu/cpu_backend.hpp"
#include "../cpu/cpu_features.hpp"
#include "../cuda/cuda_backend.hpp"
#include "flashpp/flashpp.hpp"
#include "validate.hpp"

namespace flashpp {

using detail::Direction;

const char* to_string(DType dtype) noexcept {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::f64: return "f64";
    case DType::e4m3: return "e4m3";
    case DType::i32: return "i32";
  }
  return "unknown";
}

const char* to_string(DeviceType type) noexcept {
  return type == DeviceType::cpu ? "cpu" : type == DeviceType::cuda ? "cuda" : "unknown";
}

std::size_t element_size(DType dtype) noexcept {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::f64: return 8;
    case DType::e4m3: return 1;
    case DType::i32: return 4;
  }
  return 0;
}

std::int64_t TensorView::numel() const {
  std::int64_t n = rank > 0 ? 1 : 0;
  for (int i = 0; i < rank; ++i) n *= sizes[i];
  return n;
}

namespace {
TensorView make_view4(void* data, DType dtype, Device device, const std::int64_t (&sizes)[4],
                      const std::int64_t (&strides)[4]) {
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.rank = 4;
  for (int i = 0; i < 4; ++i) {
    t.sizes[i] = sizes[i];
    t.strides[i] = strides[i];
  }
  return t;
}
}  // namespace

TensorView make_bnhd(void* data, DType dtype, std::int64_t B, std::int64_t N, std::int64_t H,
                     std::int64_t D, Device device) {
  return make_view4(data, dtype, device, {B, N, H, D}, {N * H * D, H * D, D, 1});
}

TensorView make_bhnd(void* data, DType dtype, std::int64_t B, std::int64_t N, std::int64_t H,
                     std::int64_t D, Device device) {
  return make_view4(data, dtype, device, {B, N, H, D}, {H * N * D, D, N * D, 1});
}

TensorView make_lse(float* data, std::int64_t B, std::int64_t H, std::int64_t N, Device device) {
  TensorView t;
  t.data = data;
  t.dtype = DType::f32;
  t.device = device;
  t.rank = 3;
  t.sizes[0] = B;
  t.sizes[1] = H;
  t.sizes[2] = N;
  t.strides[0] = H * N;
  t.strides[1] = N;
  t.strides[2] = 1;
  return t;
}

bool cuda_compiled() noexcept { return flashpp::cuda::compiled(); }
bool cuda_available() noexcept { return flashpp::cuda::available(); }
std::string cuda_kernel_families(int device) { return flashpp::cuda::kernel_families(device); }
void cuda_release_scratch() noexcept { flashpp::cuda::release_scratch(); }

std::string cpu_kernel(DType dtype, bool backward) {
  return flashpp::cpu::kernel_name(dtype, backward) + "; cpu: " + flashpp::cpu::cpu_feature_summary();
}
const char* version() noexcept { return "0.1.0"; }

namespace {

bool nothing_to_compute(const detail::Problem& p) { return p.B == 0 || p.Hq == 0 || p.Nq == 0; }

std::size_t forward_scratch(const detail::Problem& p, Backend backend) {
  return backend == Backend::cuda ? flashpp::cuda::forward_workspace_size(p) : 0;
}

std::size_t backward_scratch(const detail::Problem& p, Backend backend, bool deterministic) {
  switch (backend) {
    case Backend::cuda: return flashpp::cuda::backward_workspace_size(p, deterministic);
    case Backend::cpu: return flashpp::cpu::backward_workspace_size(p);
    default: return 0;
  }
}

}  // namespace

std::size_t forward_workspace_size(const TensorView& q, const TensorView& k, const TensorView& v,
                                   const Options& options) {
  constexpr const char* call = "flashpp::forward_workspace_size";
  const auto p = detail::validate_inputs(call, q, k, v, options);
  return forward_scratch(p, detail::choose_backend(call, p, options, Direction::forward));
}

std::size_t backward_workspace_size(const TensorView& q, const TensorView& k,
                                    const TensorView& v, const Options& options) {
  constexpr const char* call = "flashpp::backward_workspace_size";
  const auto p = detail::validate_inputs(call, q, k, v, options);
  return backward_scratch(p, detail::choose_backend(call, p, options, Direction::backward),
                          options.deterministic);
}

void forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
             const TensorView& lse, const Options& options, void* stream,
             const Workspace& workspace) {
  constexpr const char* call = "flashpp::forward";
  detail::ForwardArgs a;
  a.problem = detail::validate_inputs(call, q, k, v, options);
  const Backend backend = detail::choose_backend(call, a.problem, options, Direction::forward);
  if (a.problem.dtype == DType::e4m3) {
    detail::validate_fp8_output(call, o, q, a.problem);
  } else {
    detail::validate_like(call, "o", o, q, a.problem, detail::Role::output);
  }
  a.write_lse = options.write_lse;
  if (a.write_lse) {
    detail::validate_lse(call, lse, a.problem, backend);
    a.lse = lse;
  }
  detail::validate_workspace(call, workspace, forward_scratch(a.problem, backend));
  if (nothing_to_compute(a.problem)) return;
  a.q = q;
  a.k = k;
  a.v = v;
  a.o = o;
  a.q_descale = options.q_descale;
  a.k_descale = options.k_descale;
  a.v_descale = options.v_descale;
  a.stream = stream;
  a.workspace = workspace;
  if (a.problem.dtype == DType::e4m3 && backend != Backend::cuda) {
    // The CPU backends read e4m3 into float32 (times the descales) and run their float32 path.
    flashpp::cpu::dequantised_forward(a, backend == Backend::cpu_reference);
    return;
  }
  switch (backend) {
    case Backend::cpu_reference: flashpp::cpu::reference_forward(a); break;
    case Backend::cpu: flashpp::cpu::flash_forward(a); break;
    case Backend::cuda: flashpp::cuda::forward(a); break;
    default: throw Error(ErrorCode::internal, "flashpp::forward: unresolved backend");
  }
}

void backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
              const TensorView& lse, const TensorView& dout, const TensorView& dq,
              const TensorView& dk, const TensorView& dv, const Options& options, void* stream,
              const Workspace& workspace) {
  constexpr const char* call = "flashpp::backward";
  detail::BackwardArgs a;
  a.problem = detail::validate_inputs(call, q, k, v, options);
  const Backend backend = detail::choose_backend(call, a.problem, options, Direction::backward);
  detail::validate_like(call, "o", o, q, a.problem, detail::Role::input);
  detail::validate_like(call, "dout", dout, q, a.problem, detail::Role::input);
  detail::validate_like(call, "dq", dq, q, a.problem, detail::Role::output);
  detail::validate_like(call, "dk", dk, k, a.problem, detail::Role::output);
  detail::validate_like(call, "dv", dv, v, a.problem, detail::Role::output);
  detail::validate_lse(call, lse, a.problem, backend);
  detail::validate_workspace(call, workspace,
                             backward_scratch(a.problem, backend, options.deterministic));
  if (a.problem.B == 0 || a.problem.Hq == 0) return;
  a.q = q;
  a.k = k;
  a.v = v;
  a.o = o;
  a.lse = lse;
  a.dout = dout;
  a.dq = dq;
  a.dk = dk;
  a.dv = dv;
  a.deterministic = options.deterministic;
  a.stream = stream;
  a.workspace = workspace;
  switch (backend) {
    case Backend::cpu_reference: flashpp::cpu::reference_backward(a); break;
    case Backend::cpu: flashpp::cpu::flash_backward(a); break;
    case Backend::cuda: flashpp::cuda::backward(a); break;
    default: throw Error(ErrorCode::internal, "flashpp::backward: unresolved backend");
  }
}

}  // namespace flashpp
