// The FP8 forward's entry: picks the instantiation for (output dtype, head dim), rounding a head
// dim up to the next one of Sm90Fp8ForwardHeadDims (instances.hpp: 64, 128, 256; the copy engine
// zero-fills the extra columns, they are never stored).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

#include "../../families.hpp"
#include "../../instances.hpp"
#include "fp8_layout.hpp"

namespace flashpp::cuda::sm90 {
namespace fp8 {

template <typename Out, int kHeadDim>
void launch_forward_fp8(const ForwardParams& params, const detail::ForwardArgs& args,
                        cudaStream_t stream);

bool fp8_v_transpose_pass() {
  static const bool pass = [] {
    const char* env = std::getenv("FLASHPP_FP8_V_TRANSPOSE");
    return env == nullptr || std::strcmp(env, "kernel") != 0;
  }();
  return pass;
}

namespace {

template <typename Out>
void launch_for_head_dim(int head_dim, const ForwardParams& params,
                         const detail::ForwardArgs& args, cudaStream_t stream) {
  const bool launched = Sm90Fp8ForwardHeadDims::dispatch(head_dim, [&](auto kHeadDim) {
    launch_forward_fp8<Out, decltype(kHeadDim)::value>(params, args, stream);
  });
  if (!launched) {
    throw Error(ErrorCode::internal, "sm90 FP8 forward: no instantiation for this head dim");
  }
}

}  // namespace
}  // namespace fp8

// Vt in the workspace: [B][Hkv][Dp][Nk16] bytes (launch.cuh), none with the in-kernel transposition.
std::size_t forward_fp8_workspace_bytes(const detail::Problem& p) {
  if (!fp8::fp8_v_transpose_pass() || p.Nk == 0 || p.B == 0 || p.Hq == 0 || p.Nq == 0) return 0;
  return static_cast<std::size_t>(
      fp8::vt_bytes(p.B, p.Hkv, Sm90Fp8ForwardHeadDims::round_up(p.D), p.Nk));
}

void run_forward_fp8(const ForwardParams& params, const detail::ForwardArgs& args,
                     cudaStream_t stream) {
  const int head_dim = Sm90Fp8ForwardHeadDims::round_up(args.problem.D);
  if (args.problem.out_dtype == DType::f16) {
    fp8::launch_for_head_dim<__half>(head_dim, params, args, stream);
  } else {
    fp8::launch_for_head_dim<__nv_bfloat16>(head_dim, params, args, stream);
  }
}

}  // namespace flashpp::cuda::sm90
