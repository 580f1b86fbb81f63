// flashpp._C: the nanobind extension behind the Python package (python/flashpp). It links the
// C++ library statically and never links against a framework: tensors cross by DLPack, so one
// build serves every PyTorch version (and numpy, cupy, ...).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "attention_bindings.hpp"
#include "dropout_bindings.hpp"
#include "errors.hpp"
#include "host_probe.hpp"
#include "inference_bindings.hpp"
#include "launch_plans.hpp"
#include "flashpp/flashpp.hpp"

NB_MODULE(_C, m) {
  m.doc() = "flashpp's C++ API for Python (use the flashpp package, not this module)";
  // Options objects cached by the Python layer live until interpreter exit; nanobind would
  // report them as leaks.
  nanobind::set_leak_warnings(false);
  flashpp::python::register_error_translation();
  flashpp::python::bind_attention(m);
  flashpp::python::bind_dropout(m);
  flashpp::python::bind_inference(m);
  flashpp::python::bind_launch_plans(m);
  flashpp::python::bind_host_probe(m);
  m.def("version", [] { return flashpp::version(); });
  m.def("cuda_compiled", [] { return flashpp::cuda_compiled(); },
        "Whether this build has the CUDA backend.");
  m.def("cuda_available", [] { return flashpp::cuda_available(); },
        "Whether the CUDA backend can run now (compiled in and a device present).");
  m.def("cuda_kernel_families", [](int device) { return flashpp::cuda_kernel_families(device); },
        nanobind::arg("device") = 0,
        "Which CUDA kernel families flashpp runs on `device` now, in words.");
  m.def("cuda_release_scratch", [] { flashpp::cuda_release_scratch(); },
        "Gives the device memory flashpp's scratch pools keep between calls back to the driver "
        "(synchronise first); torch's allocator is not touched.");
}
