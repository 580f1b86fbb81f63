// Backward deterministic dQ kernel, head dim 64, bf16.
#include "../launch_impl.cuh"

namespace flashpp::cuda::sm80 {
template void launch_dq<__nv_bfloat16, 64>(const BackwardParams&, cudaStream_t);
}  // namespace flashpp::cuda::sm80
