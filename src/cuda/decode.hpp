// KV-cache decoding on CUDA (src/cuda/sm80/decode/), as seen by backend.cpp.
#pragma once

#include <cstddef>
#include <string>

#include "../api/inference_problem.hpp"

namespace flashpp::cuda {

// Empty when the decode kernels can run these arguments; else why not.
std::string decode_unsupported_reason(const detail::KvCacheArgs& args);
// Bytes of float32 split-KV partials (0 when one split suffices).
std::size_t decode_workspace_bytes(const detail::KvCacheArgs& args);
// Appends (when k_new is given), then decodes; the device is current, the workspace given.
void run_decode(const detail::KvCacheArgs& args);

}  // namespace flashpp::cuda
