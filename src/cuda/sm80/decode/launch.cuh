// launch_decode: the decode kernel (and, with splits, the combine kernel) for one (dtype, D).
#pragma once

#include <cuda_runtime.h>

#include <atomic>

#include "../../common/check_cuda.hpp"
#include "../../common/launch_config.hpp"
#include "kernel.cuh"

namespace flashpp::cuda::decode {

inline constexpr int kMaxDevicesTracked = 64;

template <typename Element, int D>
void launch_decode(const DecodeParams& params, cudaStream_t stream) {
  constexpr int smem = DecodeConfig<D>::kSmemBytes;
  // Per device and instantiation, once (host calls per decode step are host time a decoding
  // loop need not spend): the shared-memory attribute, and whether the combine kernel's code for
  // this device was compiled for sm90+ (PTX version, so also right for a JIT-compiled or older
  // cubin): only then does it contain the grid dependency wait that a dependent launch needs.
  static std::atomic<int> device_state[kMaxDevicesTracked];  // 0 unknown, 1 no PDL, 2 PDL
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  const bool tracked = device >= 0 && device < kMaxDevicesTracked;
  int state = tracked ? device_state[device].load(std::memory_order_relaxed) : 0;
  if (state == 0) {
    check_cuda(cudaFuncSetAttribute(decode_kernel<Element, D>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
               "cudaFuncSetAttribute (decode kernel shared memory)");
    cudaFuncAttributes attributes = {};
    check_cuda(cudaFuncGetAttributes(&attributes, decode_combine_rows_kernel<Element, D>),
               "cudaFuncGetAttributes (decode combine kernel)");
    state = attributes.ptxVersion >= 90 ? 2 : 1;
    if (tracked) device_state[device].store(state, std::memory_order_relaxed);
  }
  const bool dependent_launch = params.dependent_launch && state == 2;
  const dim3 grid(params.splits, params.Hkv * params.m_tiles, params.B);
  decode_kernel<Element, D><<<grid, kThreads, smem, stream>>>(params);
  check_launch("decode kernel launch");
  if (params.splits <= 1) return;
  const std::int64_t rows = static_cast<std::int64_t>(params.B) * params.Hq * params.Nq;
  if (params.legacy_combine) {
    const auto blocks = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
    decode_combine_kernel<Element, D><<<blocks, kThreads, 0, stream>>>(params);
    check_launch("decode combine kernel launch");
    return;
  }
  LaunchShape shape{dim3(static_cast<unsigned>(rows)), dim3(kThreads)};
  shape.dependent = dependent_launch;
  launch_kernel(shape, stream, decode_combine_rows_kernel<Element, D>,
                "decode combine kernel launch", params);
  check_launch("decode combine kernel launch");
}

}  // namespace flashpp::cuda::decode
