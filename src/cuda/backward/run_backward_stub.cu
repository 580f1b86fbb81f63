// TEMPORARY stand-in until the backward kernels land; replaced by the backward implementation.
#include "../backward.hpp"

namespace flashpp::cuda {

std::string backward_unsupported_reason(const detail::Problem&) {
  return "the CUDA backward is not implemented yet";
}
std::size_t backward_scratch_bytes(const detail::Problem&, bool) { return 0; }
void run_backward(const detail::BackwardArgs&) {
  throw Error(ErrorCode::unsupported, "the CUDA backward is not implemented yet");
}

}  // namespace flashpp::cuda
