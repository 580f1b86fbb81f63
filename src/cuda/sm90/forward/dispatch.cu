// The sm90 family's forward entry: picks the instantiation for (dtype, head dim), rounding a head
// dim up to the next instantiated one (the copy engine zero-fills the extra columns; they are
// never stored).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>

#include "../../common/check_cuda.hpp"
#include "../../families.hpp"

namespace flashpp::cuda {
namespace sm90 {

template <typename Element, int kHeadDim>
void launch_forward(const ForwardParams& params, const detail::ForwardArgs& args,
                    cudaStream_t stream);

namespace {

template <typename Element>
void launch_for_head_dim(int head_dim, const ForwardParams& params,
                         const detail::ForwardArgs& args, cudaStream_t stream) {
  switch (head_dim) {
    case 64: return launch_forward<Element, 64>(params, args, stream);
    case 96: return launch_forward<Element, 96>(params, args, stream);
    case 128: return launch_forward<Element, 128>(params, args, stream);
    case 192: return launch_forward<Element, 192>(params, args, stream);
    case 256: return launch_forward<Element, 256>(params, args, stream);
    default: throw Error(ErrorCode::internal, "sm90 forward: no instantiation for this head dim");
  }
}

}  // namespace

// launch.cuh: one counter per (device, stream), 128 bytes apart, in a table allocated and zeroed
// once per device; a stream is known by cudaStreamGetId (unique in the process, so a destroyed
// stream's handle reused by a new stream, and the per-thread default streams, each get their own).
// The table never shrinks: past kCounters streams, the dynamic walk falls back.
unsigned long long* dynamic_walk_counter(cudaStream_t stream) {
  constexpr int kCounters = 1024, kStride = 16;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  if (capture != cudaStreamCaptureStatusNone) return nullptr;
  unsigned long long stream_id = 0;
  int device = 0;
  check_cuda(cudaStreamGetId(stream, &stream_id), "cudaStreamGetId");
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  struct Table {
    unsigned long long* counters = nullptr;
    std::map<unsigned long long, int> index;
  };
  static std::mutex mutex;
  static std::map<int, Table> tables;
  const std::lock_guard<std::mutex> lock(mutex);
  Table& table = tables[device];
  if (table.counters == nullptr) {
    void* counters = nullptr;
    const std::size_t bytes = sizeof(unsigned long long) * kCounters * kStride;
    check_cuda(cudaMalloc(&counters, bytes), "cudaMalloc (sm90 forward item counters)");
    // Zero before any launch on any stream can use it: waited for here, once per device.
    check_cuda(cudaMemsetAsync(counters, 0, bytes, stream), "cudaMemsetAsync (item counters)");
    check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize (item counters)");
    table.counters = static_cast<unsigned long long*>(counters);
  }
  auto it = table.index.find(stream_id);
  if (it == table.index.end()) {
    if (table.index.size() >= static_cast<std::size_t>(kCounters)) return nullptr;
    const int next = static_cast<int>(table.index.size());
    it = table.index.emplace(stream_id, next).first;
  }
  return table.counters + static_cast<std::size_t>(it->second) * kStride;
}

void run_forward(const ForwardParams& params, const detail::ForwardArgs& args,
                 cudaStream_t stream) {
  const int head_dim = instantiated_head_dim(kForwardHeadDims, args.problem.D);
  if (args.problem.dtype == DType::f16) {
    launch_for_head_dim<__half>(head_dim, params, args, stream);
  } else {
    launch_for_head_dim<__nv_bfloat16>(head_dim, params, args, stream);
  }
}

}  // namespace sm90
}  // namespace flashpp::cuda
