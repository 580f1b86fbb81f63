/* flashpp from C: one causal attention forward on the CPU, and what a failing call looks like.
 * Link with libflashpp.so (CMake target flashpp_shared). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <flashpp/flashpp.h>

int main(void) {
  enum { B = 1, N = 64, H = 4, D = 32 };
  float* q = malloc(sizeof(float) * B * N * H * D);
  float* k = malloc(sizeof(float) * B * N * H * D);
  float* v = malloc(sizeof(float) * B * N * H * D);
  float* o = malloc(sizeof(float) * B * N * H * D);
  float* lse = malloc(sizeof(float) * B * H * N);
  int i, ok;
  if (!q || !k || !v || !o || !lse) return 1;
  for (i = 0; i < B * N * H * D; ++i) { /* any non-trivial data */
    q[i] = (float)sin(0.1 * i);
    k[i] = (float)cos(0.2 * i);
    v[i] = (float)sin(0.3 * i + 1.0);
  }

  /* Views of the arrays in the [B, N, H, D] layout. */
  flashpp_tensor tq = flashpp_make_bnhd(q, FLASHPP_F32, B, N, H, D, FLASHPP_CPU, 0);
  flashpp_tensor tk = flashpp_make_bnhd(k, FLASHPP_F32, B, N, H, D, FLASHPP_CPU, 0);
  flashpp_tensor tv = flashpp_make_bnhd(v, FLASHPP_F32, B, N, H, D, FLASHPP_CPU, 0);
  flashpp_tensor to = flashpp_make_bnhd(o, FLASHPP_F32, B, N, H, D, FLASHPP_CPU, 0);
  flashpp_tensor tlse = flashpp_make_lse(lse, B, H, N, FLASHPP_CPU, 0);

  flashpp_options opt = flashpp_options_default();
  opt.causal = 1;

  flashpp_status status = flashpp_forward(&tq, &tk, &tv, &to, &tlse, &opt, NULL);
  if (status != FLASHPP_OK) {
    fprintf(stderr, "flashpp_forward: %s\n", flashpp_last_error());
    return 1;
  }
  /* Query 0 sees only key 0: its output is v[0]. */
  ok = fabs(o[0] - v[0]) < 1e-5;
  printf("flashpp %s: o[0, 0, 0, :3] = %.4f %.4f %.4f (v[0, 0, 0, :3] = %.4f %.4f %.4f)\n",
         flashpp_version(), o[0], o[1], o[2], v[0], v[1], v[2]);

  /* A wrong call returns a code; the message says what was wrong. */
  tk.sizes[3] = D / 2;
  status = flashpp_forward(&tq, &tk, &tv, &to, &tlse, &opt, NULL);
  printf("with a bad k: %s: %s\n", flashpp_status_string(status), flashpp_last_error());

  ok = ok && status == FLASHPP_ERROR_INVALID_ARGUMENT;
  free(q), free(k), free(v), free(o), free(lse);
  return ok ? 0 : 1;
}
