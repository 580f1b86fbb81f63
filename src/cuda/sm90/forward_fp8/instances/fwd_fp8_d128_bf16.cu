// The sm90 FP8 forward for head dim 128 (and the multiples of 16 rounded up to it), bf16 output.
#include "../launch.cuh"

namespace flashpp::cuda::sm90::fp8 {
template void launch_forward_fp8<__nv_bfloat16, 128>(const ForwardParams&, const detail::ForwardArgs&, cudaStream_t);
}  // namespace flashpp::cuda::sm90::fp8
