// Backward main kernel, head dim 64, f16.
#include "../launch_impl.cuh"

namespace flashpp::cuda::sm80 {
template void launch_main<__half, 64>(const BackwardParams&, bool, cudaStream_t);
template BackwardParams prepare_main<__half, 64>(const BackwardParams&, bool);
}  // namespace flashpp::cuda::sm80
