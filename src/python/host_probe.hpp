// flashpp._C._host_probe: the host time of the CUDA runtime and driver calls a launch makes,
// each timed alone (tools/profile_eager.py prints them beside the layers of a call).
#pragma once

#include <nanobind/nanobind.h>

namespace flashpp::python {

void bind_host_probe(nanobind::module_& m);

}  // namespace flashpp::python
