// launch_decode: the decode kernel (and, with splits, the combine kernel) for one (dtype, D).
#pragma once

#include <cuda_runtime.h>

#include "../../common/check_cuda.hpp"
#include "kernel.cuh"

namespace flashpp::cuda::decode {

template <typename Element, int D>
void launch_decode(const DecodeParams& params, cudaStream_t stream) {
  constexpr int smem = DecodeConfig<D>::kSmemBytes;
  // The attribute is per device: set it on whichever device is current (cheap, idempotent).
  check_cuda(cudaFuncSetAttribute(decode_kernel<Element, D>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
             "cudaFuncSetAttribute (decode kernel shared memory)");
  const dim3 grid(params.splits, params.Hkv * params.m_tiles, params.B);
  decode_kernel<Element, D><<<grid, kThreads, smem, stream>>>(params);
  check_launch("decode kernel launch");
  if (params.splits > 1) {
    const std::int64_t rows = static_cast<std::int64_t>(params.B) * params.Hq * params.Nq;
    const auto blocks = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
    decode_combine_kernel<Element, D><<<blocks, kThreads, 0, stream>>>(params);
    check_launch("decode combine kernel launch");
  }
}

}  // namespace flashpp::cuda::decode
