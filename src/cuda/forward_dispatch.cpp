// The CUDA forward's dispatch: checks the layout the kernels' copies need, flattens the validated
// arguments into ForwardParams, and picks the kernel family (families.hpp):
//   sm90 on a compute capability 9.0 device when the library was built for sm_90a,
//   sm80 otherwise.
// FLASHPP_CUDA_FAMILY=sm80 or =sm90 in the environment forces one (for A/B runs and tests); a
// forced family that cannot run the call is an error, never a silent switch.
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/check_cuda.hpp"
#include "common/problem_fields.hpp"
#include "cuda_backend.hpp"
#include "forward.hpp"
#include "families.hpp"

#ifndef FLASHPP_HAS_SM90
#define FLASHPP_HAS_SM90 0
#endif

namespace flashpp::cuda {
namespace {

ForwardParams make_params(const detail::ForwardArgs& a) {
  const detail::Problem& p = a.problem;
  ForwardParams f;
  fill_qkvo(f, a);
  fill_problem_fields(f, p);
  f.lse = a.write_lse ? static_cast<float*>(a.lse.data) : nullptr;
  if (f.lse != nullptr) {
    f.lse_stride_batch = a.lse.strides[0];
    f.lse_stride_head = a.lse.strides[1];
    f.lse_stride_row = a.lse.strides[2];
  }
  auto descale = [](const TensorView& d, const float*& ptr, std::int64_t (&strides)[2]) {
    ptr = static_cast<const float*>(d.data);
    strides[0] = d.data != nullptr ? d.strides[0] : 0;
    strides[1] = d.data != nullptr ? d.strides[1] : 0;
  };
  descale(a.q_descale, f.q_descale, f.q_descale_strides);
  descale(a.k_descale, f.k_descale, f.k_descale_strides);
  descale(a.v_descale, f.v_descale, f.v_descale_strides);
  return f;
}

// A tensor the kernels copy or store with 16-byte vectors (or the copy engine reads) must be
// 16-byte aligned with strides that are multiples of 16 bytes (8 elements of 16 bits, 16 of
// e4m3; dimensions of size 1 are never stepped over).
std::string alignment_problem(const char* name, const TensorView& t) {
  if (t.data == nullptr) return {};
  if (reinterpret_cast<std::uintptr_t>(t.data) % 16 != 0) {
    return std::string(name) + ": the CUDA backend needs a 16-byte aligned data pointer";
  }
  const std::int64_t multiple = 16 / static_cast<std::int64_t>(element_size(t.dtype));
  for (int d = 0; d < 3; ++d) {
    if (t.sizes[d] > 1 && t.strides[d] % multiple != 0) {
      return std::string(name) + ": the CUDA backend needs strides (but the last) that are " +
             "multiples of " + std::to_string(multiple) + " elements, got stride " +
             std::to_string(t.strides[d]) + " in dimension " + std::to_string(d);
    }
  }
  return {};
}

// Compute capability major*10 + minor of `device`, asked once per device.
int compute_capability(int device) {
  static std::array<int, 64> cache{};  // 0 = not asked yet
  const bool cached = device >= 0 && device < static_cast<int>(cache.size());
  if (cached && cache[device] != 0) return cache[device];
  int major = 0, minor = 0;
  check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
             "cudaDeviceGetAttribute (compute capability)");
  check_cuda(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device),
             "cudaDeviceGetAttribute (compute capability)");
  if (cached) cache[device] = major * 10 + minor;
  return major * 10 + minor;
}

}  // namespace

std::string sm90_unavailable_reason(int device) {
  if (!FLASHPP_HAS_SM90) return "this build has no sm_90a kernels (FLASHPP_CUDA_ARCHS lacks 90a)";
  const int cc = compute_capability(device);
  if (cc != 90) {
    return "the device has compute capability " + std::to_string(cc / 10) + "." +
           std::to_string(cc % 10) + " (sm_90a kernels run on 9.0 only)";
  }
  return {};
}

std::string requested_family() {
  const char* env = std::getenv("FLASHPP_CUDA_FAMILY");
  const std::string requested = env != nullptr ? env : "";
  if (!requested.empty() && requested != "auto" && requested != "sm80" && requested != "sm90") {
    throw Error(ErrorCode::invalid_argument,
                "FLASHPP_CUDA_FAMILY: expected auto, sm80 or sm90, got '" + requested + "'");
  }
  return requested == "auto" ? std::string() : requested;
}

std::string forward_layout_unsupported_reason(const detail::ForwardArgs& args) {
  for (const auto& [name, t] : {std::pair<const char*, const TensorView*>{"q", &args.q},
                                {"k", &args.k}, {"v", &args.v}, {"o", &args.o}}) {
    std::string reason = alignment_problem(name, *t);
    if (!reason.empty()) return reason;
  }
  return {};
}

ForwardFamilyChoice choose_forward_family(const detail::ForwardArgs& args) {
  const std::string requested = requested_family();
  if (requested == "sm80") return {ForwardFamily::sm80, "forced by FLASHPP_CUDA_FAMILY=sm80"};
  const std::string reason = sm90_unavailable_reason(args.problem.device.index);
  if (requested == "sm90" && !reason.empty()) {
    throw Error(ErrorCode::unsupported, "FLASHPP_CUDA_FAMILY=sm90: " + reason);
  }
  if (reason.empty()) return {ForwardFamily::sm90, {}};
  return {ForwardFamily::sm80, reason};
}

std::string kernel_families(int device) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || device < 0 || device >= count) {
    cudaGetLastError();
    return "none: CUDA device " + std::to_string(device) + " is not available";
  }
  const std::string requested = requested_family();
  const std::string why_not = sm90_unavailable_reason(device);
  std::string forward;
  if (requested == "sm80") {
    forward = "sm80 (mma.sync; forced by FLASHPP_CUDA_FAMILY=sm80)";
  } else if (why_not.empty()) {
    forward = "sm90 (wgmma, TMA, warp-specialised)";
  } else {
    forward = "sm80 (mma.sync; sm90 unavailable: " + why_not + ")";
  }
  const char* opt = std::getenv("FLASHPP_SM90_BACKWARD");
  const std::string backward_opt = opt != nullptr ? opt : "";
  std::string backward;
  if (requested == "sm80" || !why_not.empty() || backward_opt == "0") {
    backward = "sm80 (mma.sync" + std::string(requested == "sm80" ? "; forced by FLASHPP_CUDA_FAMILY=sm80)"
                                   : !why_not.empty() ? "; sm90 unavailable)"
                                                      : "; FLASHPP_SM90_BACKWARD=0)");
  } else {
    backward = "sm90 without softcap (deterministic mode at kernel head dims up to 128), else sm80";
  }
  return "forward: " + forward + "; backward: " + backward;
}

void run_forward(const detail::ForwardArgs& args) {
  const ForwardParams params = make_params(args);
  const auto stream = static_cast<cudaStream_t>(args.stream);
  if (args.problem.dtype == DType::e4m3) {  // unsupported_reason checked that sm90 can run it
    sm90::run_forward_fp8(params, args, stream);
  } else if (choose_forward_family(args).family == ForwardFamily::sm90) {
    sm90::run_forward(params, args, stream);
  } else {
    sm80::run_forward(params, args.problem, stream);
  }
}

}  // namespace flashpp::cuda
