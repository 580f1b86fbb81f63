/* Compiled as C99: checks that flashpp.h is valid C and that a C program links against
 * libflashpp.so and runs a forward pass (one query, two keys, with known output). Run by CTest
 * as flashpp_c_api_smoke. */
#include <math.h>
#include <stdio.h>

#include "flashpp/flashpp.h"

int main(void) {
  /* q = [1, 0]; k0 = [1, 0], k1 = [0, 0]; scale 1: scores 1 and 0. v0 = [1, 2], v1 = [3, 4]. */
  float q[2] = {1.0f, 0.0f}, k[4] = {1.0f, 0.0f, 0.0f, 0.0f}, v[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  float o[2] = {NAN, NAN}, lse[1] = {NAN};
  flashpp_tensor Q = flashpp_make_bnhd(q, FLASHPP_F32, 1, 1, 1, 2, FLASHPP_CPU, 0);
  flashpp_tensor K = flashpp_make_bnhd(k, FLASHPP_F32, 1, 2, 1, 2, FLASHPP_CPU, 0);
  flashpp_tensor V = flashpp_make_bnhd(v, FLASHPP_F32, 1, 2, 1, 2, FLASHPP_CPU, 0);
  flashpp_tensor O = flashpp_make_bnhd(o, FLASHPP_F32, 1, 1, 1, 2, FLASHPP_CPU, 0);
  flashpp_tensor L = flashpp_make_lse(lse, 1, 1, 1, FLASHPP_CPU, 0);
  flashpp_options opt = flashpp_options_default();
  opt.softmax_scale = 1.0f;
  flashpp_status s = flashpp_forward(&Q, &K, &V, &O, &L, &opt, NULL);
  if (s != FLASHPP_OK) {
    fprintf(stderr, "forward failed: %s\n", flashpp_last_error());
    return 1;
  }
  const double p0 = exp(1.0) / (exp(1.0) + 1.0), p1 = 1.0 - p0;
  const double want_o0 = p0 * 1 + p1 * 3, want_o1 = p0 * 2 + p1 * 4;
  const double want_lse = log(exp(1.0) + 1.0);
  if (fabs(o[0] - want_o0) > 1e-5 || fabs(o[1] - want_o1) > 1e-5 || fabs(lse[0] - want_lse) > 1e-5) {
    fprintf(stderr, "wrong result: o = (%g, %g) lse = %g; want (%g, %g) %g\n", o[0], o[1], lse[0],
            want_o0, want_o1, want_lse);
    return 1;
  }
  /* An error comes back as a code with a message. */
  opt.dropout_p = 1.5f;
  s = flashpp_forward(&Q, &K, &V, &O, &L, &opt, NULL);
  if (s != FLASHPP_ERROR_INVALID_ARGUMENT || flashpp_last_error()[0] == '\0') {
    fprintf(stderr, "expected an invalid-argument error, got %s\n", flashpp_status_string(s));
    return 1;
  }
  /* Releasing the CUDA scratch pools links from C and does nothing harmful with or without CUDA
   * (the GPU suite checks that it gives the memory back: CudaBackend.ReleaseScratch...). */
  flashpp_cuda_release_scratch();
  printf("ok: %s\n", flashpp_last_error());
  return 0;
}
