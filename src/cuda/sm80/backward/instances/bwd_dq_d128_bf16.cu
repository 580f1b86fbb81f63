// Backward deterministic dQ kernel, head dim 128, bf16.
#include "../launch_impl.cuh"

namespace flashpp::cuda::sm80 {
template void launch_dq<__nv_bfloat16, 128>(const BackwardParams&, cudaStream_t);
}  // namespace flashpp::cuda::sm80
