// Decode kernels for head dim 64, bf16 (one instantiation per file: parallel builds).
#include "../launch.cuh"

namespace flashpp::cuda::decode {
template void launch_decode<__nv_bfloat16, 64>(const DecodeParams&, cudaStream_t);
}  // namespace flashpp::cuda::decode
