// Turning DLPack tensors (numpy, torch, cupy, ...) into flashpp::TensorView without copying.
//
// nanobind imports any object with __dlpack__ (or the buffer protocol) as an nb::ndarray; we
// read its pointer, dtype, device, sizes and strides (in elements) and hand them to the C++ API
// as they are. Validation of shapes and strides stays in src/api (one place); here we only
// reject what a TensorView cannot express (an unknown dtype, an unknown device kind).
#pragma once

#include <nanobind/ndarray.h>

#include "flashpp/flashpp.hpp"

namespace flashpp::python {

namespace nb = nanobind;

// Read-only inputs (q, k, v, o, lse, dout) and writable outputs (o, lse, dq, dk, dv).
using InputArray = nb::ndarray<nb::ro>;
using OutputArray = nb::ndarray<>;

// numpy cannot export bfloat16 through DLPack (ml_dtypes' bfloat16 is not a DLPack dtype), so
// the Python layer passes such arrays viewed as uint16 and sets `uint16_is_bf16`.
// float8 e4m3 arrays (torch.float8_e4m3fn, ml_dtypes.float8_e4m3fn) likewise cross as their
// uint8 bits with `uint8_is_e4m3` set.
struct ViewRules {
  bool uint16_is_bf16 = false;
  bool uint8_is_e4m3 = false;
};

// `name` is the argument's name for error messages ("q", "lse", ...).
TensorView to_view(const InputArray& array, const char* name, const ViewRules& rules);
TensorView to_view(const OutputArray& array, const char* name, const ViewRules& rules);

// The raw bytes of an optional workspace buffer (any dtype, contiguous).
Workspace to_workspace(const OutputArray* buffer);

}  // namespace flashpp::python
