// The sm80 forward for head dim 32 (and the multiples of 8 rounded up to it), bf16.
#include "../launch.cuh"

namespace flashpp::cuda::sm80 {
template void launch_forward<__nv_bfloat16, 32>(const ForwardParams&, std::int64_t, cudaStream_t);
}  // namespace flashpp::cuda::sm80
