// The dropout keep-mask as an array, for tests: lets Python check that a backend drops exactly
// the elements src/common/philox.hpp says it must.
#pragma once

#include <nanobind/nanobind.h>

namespace flashpp::python {

void bind_dropout(nanobind::module_& m);

}  // namespace flashpp::python
