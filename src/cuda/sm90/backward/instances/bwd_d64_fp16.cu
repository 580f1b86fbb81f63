// The sm90 backward for head dim 64 (and the multiples of 8 rounded up to it), fp16.
#include "../launch.cuh"

namespace flashpp::cuda::sm90 {
template void run_backward_for<__half, 64>(const BackwardParams&, const detail::BackwardArgs&,
                                           cudaStream_t);
}  // namespace flashpp::cuda::sm90
