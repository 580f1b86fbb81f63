// The lean eager path's bindings: launch plans.
//
// A plan holds everything about a call that does not change from one call to the next with the
// same shapes, strides, dtype, device and options: the tensor views without their data pointers,
// the options, the workspace size. The Python layer (python/flashpp/torch/_eager.py) builds one
// per such configuration, caches it, and per call passes only the data pointers, the dropout
// seed/offset and the stream: a handful of integers instead of DLPack capsules and an options
// object, which is most of what a small eager call used to cost on the host.
#pragma once

#include <nanobind/nanobind.h>

namespace flashpp::python {

void bind_launch_plans(nanobind::module_& m);

}  // namespace flashpp::python
