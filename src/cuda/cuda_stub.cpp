// Stands in for the CUDA backend when flashpp is built without CUDA.
#include "cuda_backend.hpp"

namespace flashpp::cuda {

bool compiled() noexcept { return false; }
bool available() noexcept { return false; }

std::string unsupported_reason(const detail::Problem&, bool) {
  return "flashpp was built without CUDA (configure with FLASHPP_CUDA=ON and nvcc present)";
}

std::size_t forward_workspace_size(const detail::Problem&) { return 0; }
std::size_t backward_workspace_size(const detail::Problem&, bool) { return 0; }

std::string kernel_families(int) { return "none: flashpp was built without CUDA"; }
void release_scratch() noexcept {}

void forward(const detail::ForwardArgs&) {
  throw Error(ErrorCode::unsupported, "flashpp was built without CUDA");
}
void backward(const detail::BackwardArgs&) {
  throw Error(ErrorCode::unsupported, "flashpp was built without CUDA");
}


std::string kvcache_unsupported_reason(const detail::KvCacheArgs&) {
  return "flashpp was built without CUDA (configure with FLASHPP_CUDA=ON and nvcc present)";
}
std::size_t kvcache_workspace_size(const detail::KvCacheArgs&) { return 0; }
void forward_kvcache(const detail::KvCacheArgs&) {
  throw Error(ErrorCode::unsupported, "flashpp was built without CUDA");
}
void run_forked(int, void*, std::int64_t, const std::function<void(std::int64_t, void*)>&) {
  throw Error(ErrorCode::unsupported, "flashpp was built without CUDA");
}
void copy_to_host(void*, const void*, std::size_t, int, void*) {
  throw Error(ErrorCode::unsupported, "flashpp was built without CUDA");
}

}  // namespace flashpp::cuda
