// Backward main kernel, head dim 96, bf16.
#include "../launch_impl.cuh"

namespace flashpp::cuda::sm80 {
template void launch_main<__nv_bfloat16, 96>(const BackwardParams&, bool, cudaStream_t);
template BackwardParams prepare_main<__nv_bfloat16, 96>(const BackwardParams&, bool);
}  // namespace flashpp::cuda::sm80
