// The CUDA backend's entry points, as seen by src/api. Built from src/cuda/*.cu when CUDA is
// enabled; src/cuda/cuda_stub.cpp stands in otherwise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "../api/inference_problem.hpp"

namespace flashpp::cuda {

bool compiled() noexcept;
bool available() noexcept;

// Empty when the CUDA backend can run this problem; otherwise why not (names the argument).
std::string unsupported_reason(const detail::Problem& problem, bool backward);

std::size_t forward_workspace_size(const detail::Problem& problem);
std::size_t backward_workspace_size(const detail::Problem& problem, bool deterministic);

// flashpp::cuda_kernel_families: the families the dispatchers pick on `device` now.
std::string kernel_families(int device);

// flashpp::cuda_release_scratch: the memory flashpp's scratch pools keep, back to the driver.
void release_scratch() noexcept;

void forward(const detail::ForwardArgs& args);
void backward(const detail::BackwardArgs& args);

// KV-cache decoding (src/cuda/sm80/decode/). `kvcache_unsupported_reason` is empty when the
// decode kernels can run these (already validated) arguments; the workspace holds the split-KV
// partial results.
std::string kvcache_unsupported_reason(const detail::KvCacheArgs& args);
std::size_t kvcache_workspace_size(const detail::KvCacheArgs& args);
void forward_kvcache(const detail::KvCacheArgs& args);

// Runs `count` independent pieces of work, piece i as run(i, stream_i), over a few streams forked
// from `stream` (they start after the work already queued on it, and it waits for all of them
// before anything queued after), so that the launches of small pieces overlap on the GPU. The
// pieces are started in the given order, round robin over the streams.
void run_forked(int device, void* stream, std::int64_t count,
                const std::function<void(std::int64_t, void*)>& run);

// Copies `bytes` from device memory on `device` to the host, ordered after the work already
// queued on `stream`, and waits for it (index tensors that must be checked on the host).
void copy_to_host(void* dst, const void* src, std::size_t bytes, int device, void* stream);

}  // namespace flashpp::cuda
