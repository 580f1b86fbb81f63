// The sm90 forward for head dim 96 (and the multiples of 8 rounded up to it), bf16.
#include "../launch.cuh"

namespace flashpp::cuda::sm90 {
template void launch_forward<__nv_bfloat16, 96>(const ForwardParams&, const detail::ForwardArgs&, cudaStream_t);
}  // namespace flashpp::cuda::sm90
