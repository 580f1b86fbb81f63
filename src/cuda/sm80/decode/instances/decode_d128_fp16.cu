// Decode kernels for head dim 128, fp16 (one instantiation per file: parallel builds).
#include "../launch.cuh"

namespace flashpp::cuda::decode {
template void launch_decode<__half, 128>(const DecodeParams&, cudaStream_t);
}  // namespace flashpp::cuda::decode
