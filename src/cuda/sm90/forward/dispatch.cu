// The sm90 family's forward entry: picks the instantiation for (dtype, head dim), rounding a head
// dim up to the next instantiated one (the copy engine zero-fills the extra columns; they are
// never stored).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

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
