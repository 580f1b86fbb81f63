// KV-cache decoding on CUDA: entry points of cuda_backend.hpp (the kernels come next).
#include "cuda_backend.hpp"

namespace flashpp::cuda {

std::string kvcache_unsupported_reason(const detail::KvCacheArgs&) {
  return "forward_kvcache: the CUDA decode kernels are not built yet";
}
std::size_t kvcache_workspace_size(const detail::KvCacheArgs&) { return 0; }
void forward_kvcache(const detail::KvCacheArgs&) {
  throw Error(ErrorCode::unsupported, "flashpp::forward_kvcache: no CUDA decode kernel yet");
}

}  // namespace flashpp::cuda
