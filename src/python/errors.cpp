#include "errors.hpp"

#include <Python.h>
#include <nanobind/nanobind.h>

#include <string_view>

#include "flashpp/flashpp.hpp"

namespace flashpp::python {
namespace {

PyObject* exception_type(const Error& e) {
  switch (e.code()) {
    case ErrorCode::invalid_argument: return PyExc_ValueError;
    case ErrorCode::unsupported:
      // "unsupported dtype" is a type problem for a Python caller; other unsupported requests
      // (a head dim a backend lacks, no CUDA) are not wrong arguments, just not implemented.
      return std::string_view(e.what()).find("dtype") != std::string_view::npos
                 ? PyExc_TypeError
                 : PyExc_NotImplementedError;
    default: return PyExc_RuntimeError;
  }
}

}  // namespace

void register_error_translation() {
  nanobind::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      PyErr_SetString(exception_type(e), e.what());
    }
  });
}

}  // namespace flashpp::python
