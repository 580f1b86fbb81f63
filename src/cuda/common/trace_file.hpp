// The host side of the timing traces (sm90/forward/trace.cuh, sm90/backward/trace.cuh): a device
// buffer of 64-bit stamps zeroed before every traced launch, and after it the buffer written to
// the file an environment variable names, behind a header of sizes. Timing builds only.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace flashpp::cuda {

// `buffer` (the caller's static, null at first) made with `words` words once, then zeroed on
// `stream`; null when the allocation fails (the launch then runs untraced).
inline std::uint64_t* zeroed_trace_buffer(std::uint64_t*& buffer, std::size_t words,
                                          cudaStream_t stream) {
  if (buffer == nullptr && cudaMalloc(&buffer, words * sizeof(std::uint64_t)) != cudaSuccess) {
    buffer = nullptr;
    return nullptr;
  }
  cudaMemsetAsync(buffer, 0, words * sizeof(std::uint64_t), stream);
  return buffer;
}

// The buffer's `words` words to the file that environment variable `env` names (nothing when it
// is unset), after `head_words` header words; synchronises `stream`.
inline void write_trace_file(const char* env, const std::uint64_t* head, std::size_t head_words,
                             const std::uint64_t* buffer, std::size_t words, cudaStream_t stream) {
  const char* path = std::getenv(env);
  if (buffer == nullptr || path == nullptr) return;
  std::vector<std::uint64_t> host(words);
  if (cudaMemcpyAsync(host.data(), buffer, words * sizeof(std::uint64_t), cudaMemcpyDeviceToHost,
                      stream) != cudaSuccess ||
      cudaStreamSynchronize(stream) != cudaSuccess) {
    return;
  }
  if (std::FILE* f = std::fopen(path, "wb")) {
    std::fwrite(head, sizeof(std::uint64_t), head_words, f);
    std::fwrite(host.data(), sizeof(std::uint64_t), host.size(), f);
    std::fclose(f);
  }
}

}  // namespace flashpp::cuda
