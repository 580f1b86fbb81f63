// TEMPORARY: the forward dispatch before the kernels land (replaced in the next commit).
#include "../../forward.hpp"

namespace flashpp::cuda {

std::string forward_layout_unsupported_reason(const detail::ForwardArgs&) { return {}; }

void run_forward(const detail::ForwardArgs&) {
  throw Error(ErrorCode::unsupported, "the CUDA forward is not implemented yet");
}

}  // namespace flashpp::cuda
