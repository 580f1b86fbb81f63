// Argument checking for every public entry point. Each check throws flashpp::Error with a
// message of the form "<call>: <argument>: expected <what>, got <what>".
#pragma once

#include <string>

#include "problem.hpp"

namespace flashpp::detail {

enum class Direction { forward, backward };

// Checks q, k, v and the options; returns the resolved problem (backend not yet chosen).
Problem validate_inputs(const char* call, const TensorView& q, const TensorView& k,
                        const TensorView& v, const Options& options);

// Checks a tensor that must have the shape of `like` (same dtype and device). Outputs must
// also have no zero stride over a dimension of size > 1 (elements would alias).
enum class Role { input, output };
void validate_like(const char* call, const char* name, const TensorView& t,
                   const TensorView& like, const Problem& problem, Role role);

// Checks o for e4m3 inputs (dtype f16 or bf16, shape of q) and records its dtype in the problem.
void validate_fp8_output(const char* call, const TensorView& o, const TensorView& q,
                         Problem& problem);

// Checks the lse view: float32 (or float64 for the reference backend) [B, Hq, Nq].
void validate_lse(const char* call, const TensorView& lse, const Problem& problem,
                  Backend backend);

// Resolves Backend::automatic and checks the chosen backend can run the problem.
Backend choose_backend(const char* call, const Problem& problem, const Options& options,
                       Direction direction);

// Checks a caller-provided workspace is on the device and large enough.
void validate_workspace(const char* call, const Workspace& ws, std::size_t needed);

}  // namespace flashpp::detail

namespace flashpp::detail {

// The building blocks of the checks above, for the other entry points (src/api/inference.cpp).
[[noreturn]] void fail_argument(ErrorCode code, const char* call, const std::string& name,
                                const std::string& expected, const std::string& got);
// Rank, sizes, strides (last one 1), 64-bit offsets, non-null data; `dims` names the dimensions.
void check_tensor(const char* call, const char* name, const TensorView& t, int rank,
                  const char* dims);
// Outputs: no zero stride over a dimension of size > 1.
void check_output_tensor(const char* call, const char* name, const TensorView& t);
std::string shape_of(const TensorView& t);
std::string device_name(const Device& d);

}  // namespace flashpp::detail
