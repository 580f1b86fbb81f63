/* flashpp C API: exact attention, softmax(Q K^T * scale) V, the FlashAttention way.
 *
 * Plain C (C99; also compiles as C++). It mirrors the C++ API in flashpp.hpp: tensor views,
 * options, forward, backward and the workspace queries. Every call returns a flashpp_status;
 * on failure, flashpp_last_error() gives the readable message (it names the argument, what was
 * expected and what was given). No C++ exception ever crosses this boundary.
 *
 *   flashpp_options opt = flashpp_options_default();
 *   opt.causal = 1;
 *   if (flashpp_forward(&q, &k, &v, &o, &lse, &opt, NULL) != FLASHPP_OK)
 *     fprintf(stderr, "%s\n", flashpp_last_error());
 *
 * Link with libflashpp.so (CMake target flashpp_shared) or libflashpp.a plus the C++ runtime.
 */
#ifndef FLASHPP_FLASHPP_H
#define FLASHPP_FLASHPP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define FLASHPP_C_API
#else
#define FLASHPP_C_API __attribute__((visibility("default")))
#endif

/* ------------------------------------------------------------------------------------------- */
/* Status codes (the same values as flashpp::ErrorCode)                                        */
/* ------------------------------------------------------------------------------------------- */
typedef enum flashpp_status {
  FLASHPP_OK = 0,
  FLASHPP_ERROR_INVALID_ARGUMENT = 1, /* a shape, stride, dtype, option or pointer is wrong */
  FLASHPP_ERROR_UNSUPPORTED = 2,      /* valid, but the chosen backend cannot do it */
  FLASHPP_ERROR_BACKEND_FAILURE = 3,  /* the device failed (CUDA error, out of memory, ...) */
  FLASHPP_ERROR_INTERNAL = 4          /* a bug in flashpp */
} flashpp_status;

/* ------------------------------------------------------------------------------------------- */
/* Tensor views                                                                                */
/* ------------------------------------------------------------------------------------------- */
/* Storage dtypes. F64 is accepted only by FLASHPP_BACKEND_CPU_REFERENCE (the float64 oracle).
 * E4M3 (float8_e4m3fn) is a forward-only input dtype for q, k, v (o then F16 or BF16; descale
 * factors in flashpp_options). */
typedef enum flashpp_dtype {
  FLASHPP_F32 = 0,
  FLASHPP_F16 = 1,
  FLASHPP_BF16 = 2,
  FLASHPP_F64 = 3,
  FLASHPP_E4M3 = 4,
  FLASHPP_I32 = 5 /* index tensors only: cu_seqlens, cache_seqlens, block_table */
} flashpp_dtype;

typedef enum flashpp_device_type { FLASHPP_CPU = 0, FLASHPP_CUDA = 1 } flashpp_device_type;

/* A non-owning view of a strided tensor of rank 1..4. Sizes and strides are in elements; the
 * last stride must be 1, the others are free. By meaning: q, o, dout, dq are [B, Nq, Hq, D];
 * k, v, dk, dv are [B, Nk, Hkv, D]; lse is float32 [B, Hq, Nq]. The [B, H, N, D] memory
 * layout is expressed by strides alone (see flashpp_make_bhnd). */
typedef struct flashpp_tensor {
  void* data;
  flashpp_dtype dtype;
  flashpp_device_type device_type;
  int32_t device_index; /* CUDA ordinal; 0 for the CPU */
  int32_t rank;
  int64_t sizes[4];
  int64_t strides[4];
} flashpp_tensor;

/* Helpers that fill a view, as make_bnhd / make_bhnd / make_lse in the C++ API. */
FLASHPP_C_API flashpp_tensor flashpp_make_bnhd(void* data, flashpp_dtype dtype, int64_t B,
                                               int64_t N, int64_t H, int64_t D,
                                               flashpp_device_type device_type,
                                               int32_t device_index);
FLASHPP_C_API flashpp_tensor flashpp_make_bhnd(void* data, flashpp_dtype dtype, int64_t B,
                                               int64_t N, int64_t H, int64_t D,
                                               flashpp_device_type device_type,
                                               int32_t device_index);
FLASHPP_C_API flashpp_tensor flashpp_make_lse(float* data, int64_t B, int64_t H, int64_t N,
                                              flashpp_device_type device_type,
                                              int32_t device_index);

/* ------------------------------------------------------------------------------------------- */
/* Options                                                                                     */
/* ------------------------------------------------------------------------------------------- */
/* Which diagonal the causal mask and the window follow when Nq != Nk (see flashpp.hpp). */
typedef enum flashpp_alignment {
  FLASHPP_ALIGN_TOP_LEFT = 0,    /* query i aligned with key i (torch SDPA is_causal) */
  FLASHPP_ALIGN_BOTTOM_RIGHT = 1 /* query i aligned with key i + Nk - Nq (KV-cache decode) */
} flashpp_alignment;

typedef enum flashpp_backend {
  FLASHPP_BACKEND_AUTO = 0, /* the tensors' device */
  FLASHPP_BACKEND_CPU = 1,
  FLASHPP_BACKEND_CUDA = 2,
  FLASHPP_BACKEND_CPU_REFERENCE = 3
} flashpp_backend;

#define FLASHPP_UNBOUNDED ((int64_t)-1)

/* Start from flashpp_options_default() (or flashpp_options_init) and change what you need;
 * the fields mean exactly what flashpp::Options's do. */
typedef struct flashpp_options {
  float softmax_scale; /* <= 0 or NaN: 1/sqrt(D) */
  int32_t causal;      /* 0 or 1 */
  flashpp_alignment alignment;
  int64_t window_left;  /* FLASHPP_UNBOUNDED: no limit */
  int64_t window_right; /* FLASHPP_UNBOUNDED: no limit */
  float softcap;        /* 0: off */
  float dropout_p;      /* 0: off */
  uint64_t seed;
  uint64_t offset;
  int32_t deterministic; /* backward: bit-identical run to run */
  int32_t write_lse;     /* forward: when 0, lse may be NULL */
  flashpp_backend backend;
  /* FP8 forward (q, k, v of dtype FLASHPP_E4M3) only: float32 [B, Hkv] descale factors of q,
   * k and v (the true inputs are q * q_descale, ...); NULL means 1. */
  const flashpp_tensor* q_descale;
  const flashpp_tensor* k_descale;
  const flashpp_tensor* v_descale;
} flashpp_options;

FLASHPP_C_API flashpp_options flashpp_options_default(void);
/* The same defaults written through a pointer (for FFIs that cannot return structs). */
FLASHPP_C_API flashpp_status flashpp_options_init(flashpp_options* options);

/* ------------------------------------------------------------------------------------------- */
/* Attention                                                                                   */
/* ------------------------------------------------------------------------------------------- */
/* Pointers to tensors and options must not be NULL (except lse when options->write_lse is 0).
 * `stream` is a cudaStream_t for CUDA tensors (NULL = the default stream), ignored on the CPU.
 * The plain calls allocate any scratch they need; the *_with_workspace calls take a buffer on
 * the tensors' device of at least the size the *_workspace_size call reports. */

FLASHPP_C_API flashpp_status flashpp_forward_workspace_size(const flashpp_tensor* q,
                                                            const flashpp_tensor* k,
                                                            const flashpp_tensor* v,
                                                            const flashpp_options* options,
                                                            size_t* bytes);

/* o = softmax(q k^T * scale) v; lse = log-sum-exp of each row (o = 0, lse = -inf for rows that
 * see no key). */
FLASHPP_C_API flashpp_status flashpp_forward(const flashpp_tensor* q, const flashpp_tensor* k,
                                             const flashpp_tensor* v, const flashpp_tensor* o,
                                             const flashpp_tensor* lse,
                                             const flashpp_options* options, void* stream);
FLASHPP_C_API flashpp_status flashpp_forward_with_workspace(
    const flashpp_tensor* q, const flashpp_tensor* k, const flashpp_tensor* v,
    const flashpp_tensor* o, const flashpp_tensor* lse, const flashpp_options* options,
    void* stream, void* workspace, size_t workspace_bytes);

FLASHPP_C_API flashpp_status flashpp_backward_workspace_size(const flashpp_tensor* q,
                                                             const flashpp_tensor* k,
                                                             const flashpp_tensor* v,
                                                             const flashpp_options* options,
                                                             size_t* bytes);

/* Gradients of the forward with the same options: o and lse are the forward's outputs, dout
 * the gradient of o. dk and dv sum over the query heads that share a kv head. */
FLASHPP_C_API flashpp_status flashpp_backward(
    const flashpp_tensor* q, const flashpp_tensor* k, const flashpp_tensor* v,
    const flashpp_tensor* o, const flashpp_tensor* lse, const flashpp_tensor* dout,
    const flashpp_tensor* dq, const flashpp_tensor* dk, const flashpp_tensor* dv,
    const flashpp_options* options, void* stream);
FLASHPP_C_API flashpp_status flashpp_backward_with_workspace(
    const flashpp_tensor* q, const flashpp_tensor* k, const flashpp_tensor* v,
    const flashpp_tensor* o, const flashpp_tensor* lse, const flashpp_tensor* dout,
    const flashpp_tensor* dq, const flashpp_tensor* dk, const flashpp_tensor* dv,
    const flashpp_options* options, void* stream, void* workspace, size_t workspace_bytes);

/* ------------------------------------------------------------------------------------------- */
/* Inference: KV-cache decoding and variable-length batches (see flashpp.hpp for the semantics) */
/* ------------------------------------------------------------------------------------------- */
/* The cache: k_cache, v_cache [B, capacity, Hkv, D], or [num_pages, page_size, Hkv, D] with a
 * block_table int32 [B, max_pages]; cache_seqlens int32 [B]; k_new, v_new [B, Nnew, Hkv, D]
 * appended at cache_seqlens first. block_table, k_new and v_new may be NULL. */
typedef struct flashpp_kv_cache {
  const flashpp_tensor* k_cache;
  const flashpp_tensor* v_cache;
  const flashpp_tensor* cache_seqlens;
  const flashpp_tensor* block_table; /* NULL: contiguous cache */
  const flashpp_tensor* k_new;       /* NULL: nothing appended */
  const flashpp_tensor* v_new;
  int32_t validate_indices; /* 1: check the index contents on the host (CUDA: synchronises) */
} flashpp_kv_cache;

/* A cache with validate_indices = 1 and every pointer NULL. */
FLASHPP_C_API flashpp_kv_cache flashpp_kv_cache_default(void);

FLASHPP_C_API flashpp_status flashpp_forward_kvcache_workspace_size(
    const flashpp_tensor* q, const flashpp_kv_cache* cache, const flashpp_options* options,
    size_t* bytes);
/* o = attention of q [B, Nq, Hq, D] over each sequence's cached (and appended) keys, causal and
 * windows aligned bottom-right; lse float32 [B, Hq, Nq] (NULL when options->write_lse is 0).
 * workspace may be NULL (flashpp allocates) or hold at least the reported bytes. */
FLASHPP_C_API flashpp_status flashpp_forward_kvcache(
    const flashpp_tensor* q, const flashpp_kv_cache* cache, const flashpp_tensor* o,
    const flashpp_tensor* lse, const flashpp_options* options, void* stream, void* workspace,
    size_t workspace_bytes);

/* Packed sequences: q, o, dout, dq [total_q, Hq, D]; k, v, dk, dv [total_k, Hkv, D];
 * lse float32 [Hq, total_q]; cu_seqlens_* int32 [B + 1]. */
typedef struct flashpp_packed_batch {
  const flashpp_tensor* cu_seqlens_q;
  const flashpp_tensor* cu_seqlens_k;
  int64_t max_seqlen_q;
  int64_t max_seqlen_k;
} flashpp_packed_batch;

FLASHPP_C_API flashpp_status flashpp_forward_varlen(
    const flashpp_tensor* q, const flashpp_tensor* k, const flashpp_tensor* v,
    const flashpp_packed_batch* batch, const flashpp_tensor* o, const flashpp_tensor* lse,
    const flashpp_options* options, void* stream);
FLASHPP_C_API flashpp_status flashpp_backward_varlen(
    const flashpp_tensor* q, const flashpp_tensor* k, const flashpp_tensor* v,
    const flashpp_tensor* o, const flashpp_tensor* lse, const flashpp_tensor* dout,
    const flashpp_tensor* dq, const flashpp_tensor* dk, const flashpp_tensor* dv,
    const flashpp_packed_batch* batch, const flashpp_options* options, void* stream);

/* ------------------------------------------------------------------------------------------- */
/* Library                                                                                     */
/* ------------------------------------------------------------------------------------------- */
/* 1 when flashpp was built with the CUDA backend / a CUDA device is usable now; else 0. */
FLASHPP_C_API int flashpp_cuda_compiled(void);
FLASHPP_C_API int flashpp_cuda_available(void);

/* Which CUDA kernel families flashpp runs on `device` now, in words (see flashpp.hpp's
 * cuda_kernel_families). The pointer stays valid until the next call on this thread. */
FLASHPP_C_API const char* flashpp_cuda_kernel_families(int device);

/* Gives the device memory flashpp's scratch pools keep between calls back to the driver (see
 * flashpp.hpp's cuda_release_scratch); synchronise the streams of earlier calls first. */
FLASHPP_C_API void flashpp_cuda_release_scratch(void);

/* Which CPU kernel FLASHPP_BACKEND_CPU runs now for `dtype` (forward, or backward when
 * backward != 0), in words (see flashpp.hpp's cpu_kernel). The pointer stays valid until the
 * next call on this thread. */
FLASHPP_C_API const char* flashpp_cpu_kernel(flashpp_dtype dtype, int backward);

/* "0.1.0" */
FLASHPP_C_API const char* flashpp_version(void);

/* The message of the last call that failed on this thread ("" if none has). Successful calls
 * leave it unchanged. The pointer stays valid until the next failing call on this thread. */
FLASHPP_C_API const char* flashpp_last_error(void);

/* A fixed name for a status code: "ok", "invalid argument", ... */
FLASHPP_C_API const char* flashpp_status_string(flashpp_status status);

#ifdef __cplusplus
}
#endif

#endif /* FLASHPP_FLASHPP_H */
