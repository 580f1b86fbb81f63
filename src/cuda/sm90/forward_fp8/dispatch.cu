// The FP8 forward's entry (the kernel follows in the next commit): until then an error.
#include "../../families.hpp"

namespace flashpp::cuda::sm90 {

void run_forward_fp8(const ForwardParams&, const detail::ForwardArgs&, cudaStream_t) {
  throw Error(ErrorCode::unsupported, "q: the sm90 FP8 forward kernel is not built yet");
}

}  // namespace flashpp::cuda::sm90
