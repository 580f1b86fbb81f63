// Python bindings of the inference entry points: forward_kvcache (KV-cache decoding, contiguous
// or paged, with append) and forward_varlen / backward_varlen (packed sequences). As for the
// attention bindings: DLPack arrays in, no copies, the stream as an integer, the GIL released.
#pragma once

#include <nanobind/nanobind.h>

namespace flashpp::python {

void bind_inference(nanobind::module_& m);

}  // namespace flashpp::python
