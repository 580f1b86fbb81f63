// Error limits for comparing a float32-accumulating kernel with the float64 oracle.
//
// Both sides read the same rounded inputs, so input rounding cancels. What remains:
//  * output rounding: storing O, dQ, dK, dV in the storage dtype costs a relative error of at
//    most u per element (u = 2^-24 f32, 2^-11 f16, 2^-8 bf16), about u/sqrt(3) in norm;
//  * intermediate rounding: a kernel may round P (or dS) to the storage dtype before a matrix
//    product, as tensor-core kernels do: about another u;
//  * float32 accumulation: ~2^-24 * sqrt(terms), ~1e-6 even for thousands of keys.
// Relative limits are therefore about 4u for O and dV (f16 2e-3, bf16 1.6e-2) and 8u for dQ and
// dK (dS = P (dP - D) adds the rounding of D, which comes from the stored O), with floors of
// ~2e-5 / 1e-4 for f32 where accumulation dominates. lse is float32 for every dtype and comes
// from float32 scores of exactly representable inputs, so its limit does not depend on dtype.
//
// dQ and dK also carry an absolute error that does not shrink with the reference: D_i =
// rowsum(dO∘O) is formed from the stored (rounded) O, so dS_ij = P_ij (dP_ij - D_i) has an
// error P_ij·δD_i even where the exact dS is zero (e.g. a row that sees a single key has exact
// dQ = 0). gradient_noise_floor() bounds it from the mask's visible-key counts.
#pragma once

#include "attention_case.hpp"

namespace flashpp::test {

struct Tolerance {
  double o = 0, lse = 0, dq = 0, dk = 0, dv = 0;  // relative, per tensor
};

// The relative limits above for a kernel storing in `dtype` and accumulating in float32.
Tolerance float32_kernel_tolerance(DType dtype);

// Root-mean-square absolute error per element of dQ and dK allowed on top of the relative
// limit (see above): about u_eff * sqrt(mean over rows of 1/keys_i) for dQ, and
// u_eff * sqrt(mean over keys of sum over the rows i that see it of 1/keys_i^2) for dK, where
// u_eff = u + D * 2^-24 also covers float32 cancellation in dP - D, times a safety factor 4 and
// the dropout scale 1/(1-p).
struct NoiseFloor {
  double dq = 0, dk = 0;
};
NoiseFloor gradient_noise_floor(const AttentionCase& c);

// Whether ||out - ref|| <= rtol ||ref|| + atol sqrt(n).
bool within(const HostTensor& out, const HostTensor& ref, double rtol, double atol,
            double* measured_relative = nullptr);

}  // namespace flashpp::test
