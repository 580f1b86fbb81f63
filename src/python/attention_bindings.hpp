// Python bindings of the attention entry points: flashpp::Options, forward, backward and the
// workspace-size queries. Tensors arrive as DLPack arrays (no copies); the CUDA stream arrives
// as an integer (e.g. torch.cuda.current_stream().cuda_stream); the GIL is released while
// flashpp computes.
#pragma once

#include <nanobind/nanobind.h>

namespace flashpp::python {

void bind_attention(nanobind::module_& m);

}  // namespace flashpp::python
