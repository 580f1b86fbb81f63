// Builds without sm_90a (FLASHPP_CUDA_ARCHS lacks 90a) have no sm90 kernels; the dispatcher never
// picks the family there (FLASHPP_HAS_SM90 = 0), and this definition only satisfies the linker.
#include "../families.hpp"

namespace flashpp::cuda::sm90 {

void run_forward(const ForwardParams&, const detail::ForwardArgs&, cudaStream_t) {
  throw Error(ErrorCode::internal, "the sm90 forward was called in a build without sm_90a");
}

void run_forward_fp8(const ForwardParams&, const detail::ForwardArgs&, cudaStream_t) {
  throw Error(ErrorCode::internal, "the sm90 FP8 forward was called in a build without sm_90a");
}

std::size_t forward_fp8_workspace_bytes(const detail::Problem&) { return 0; }

std::size_t forward_split_workspace_bytes(const detail::Problem&) { return 0; }

void run_backward(const BackwardParams&, const detail::BackwardArgs&, cudaStream_t) {
  throw Error(ErrorCode::internal, "the sm90 backward was called in a build without sm_90a");
}

}  // namespace flashpp::cuda::sm90
