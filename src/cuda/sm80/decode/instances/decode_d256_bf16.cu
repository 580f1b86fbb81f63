// Decode kernels for head dim 256, bf16 (one instantiation per file: parallel builds).
#include "../launch.cuh"

namespace flashpp::cuda::decode {
template void launch_decode<__nv_bfloat16, 256>(const DecodeParams&, cudaStream_t);
}  // namespace flashpp::cuda::decode
