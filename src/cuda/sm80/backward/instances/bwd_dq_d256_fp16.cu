// Backward deterministic dQ kernel, head dim 256, f16.
#include "../launch_impl.cuh"

namespace flashpp::cuda::sm80 {
template void launch_dq<__half, 256>(const BackwardParams&, cudaStream_t);
}  // namespace flashpp::cuda::sm80
