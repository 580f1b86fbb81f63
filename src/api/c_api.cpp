// The C API (include/flashpp/flashpp.h): converts C structs to the C++ views and options, calls
// the C++ API, and turns every exception into a status code plus a thread-local message. No
// exception may cross the extern "C" boundary, so every entry point runs inside guarded().
#include "flashpp/flashpp.h"

#include <cmath>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "flashpp/flashpp.hpp"

namespace {

using flashpp::ErrorCode;

// The message of the last failing call on this thread.
thread_local std::string last_error_message;

flashpp_status fail(flashpp_status status, std::string message) {
  try {
    last_error_message = std::move(message);
  } catch (...) {
    // Out of memory while storing the message: keep the status, lose the text.
  }
  return status;
}

flashpp_status to_status(ErrorCode code) {
  switch (code) {
    case ErrorCode::ok: return FLASHPP_OK;
    case ErrorCode::invalid_argument: return FLASHPP_ERROR_INVALID_ARGUMENT;
    case ErrorCode::unsupported: return FLASHPP_ERROR_UNSUPPORTED;
    case ErrorCode::backend_failure: return FLASHPP_ERROR_BACKEND_FAILURE;
    case ErrorCode::internal: return FLASHPP_ERROR_INTERNAL;
  }
  return FLASHPP_ERROR_INTERNAL;
}

// Runs `body` and maps whatever it throws to a status; the C boundary sees no exception.
template <class Body>
flashpp_status guarded(const char* call, Body&& body) noexcept {
  try {
    body();
    return FLASHPP_OK;
  } catch (const flashpp::Error& e) {
    return fail(to_status(e.code()), e.what());
  } catch (const std::bad_alloc&) {
    return fail(FLASHPP_ERROR_BACKEND_FAILURE, std::string(call) + ": out of host memory");
  } catch (const std::exception& e) {
    return fail(FLASHPP_ERROR_INTERNAL, std::string(call) + ": " + e.what());
  } catch (...) {
    return fail(FLASHPP_ERROR_INTERNAL, std::string(call) + ": unknown exception");
  }
}

[[noreturn]] void invalid(const char* call, const std::string& what) {
  throw flashpp::Error(ErrorCode::invalid_argument, std::string(call) + ": " + what);
}

void require_non_null(const char* call, const char* name, const void* pointer) {
  if (pointer == nullptr) invalid(call, std::string(name) + ": expected a pointer, got NULL");
}

// The integer a C enum field holds. C code may store any int there, but C++ may assume an
// object of enum type holds only values in its enumerators' range, so reading an out-of-range
// value through the enum type is undefined (UBSan flags it, -fstrict-enums folds the checks
// away). Copying the bytes into an int reads it safely.
template <class Enum>
int raw_enum_value(const Enum& field) {
  static_assert(sizeof(Enum) == sizeof(int), "C enums are int-sized on supported ABIs");
  int value;
  std::memcpy(&value, &field, sizeof value);
  return value;
}

// A C tensor to a C++ view. Enum values from C may be anything, so they are checked here (the
// C++ API trusts its enums); shapes and strides are checked by the C++ validation.
flashpp::TensorView to_view(const char* call, const char* name, const flashpp_tensor* t) {
  require_non_null(call, name, t);
  const int dtype = raw_enum_value(t->dtype);
  if (dtype < FLASHPP_F32 || dtype > FLASHPP_I32) {
    invalid(call, std::string(name) + ": expected dtype FLASHPP_F32, F16, BF16, F64, E4M3 or I32, got " +
                      std::to_string(dtype));
  }
  const int device = raw_enum_value(t->device_type);
  if (device != FLASHPP_CPU && device != FLASHPP_CUDA) {
    invalid(call, std::string(name) + ": expected device_type FLASHPP_CPU or FLASHPP_CUDA, got " +
                      std::to_string(device));
  }
  if (t->rank < 0 || t->rank > flashpp::TensorView::kMaxRank) {
    invalid(call, std::string(name) + ": expected rank 0..4, got " + std::to_string(t->rank));
  }
  flashpp::TensorView v;
  v.data = t->data;
  v.dtype = static_cast<flashpp::DType>(dtype);
  v.device.type = static_cast<flashpp::DeviceType>(device);
  v.device.index = t->device_index;
  v.rank = t->rank;
  for (int i = 0; i < t->rank; ++i) {
    v.sizes[i] = t->sizes[i];
    v.strides[i] = t->strides[i];
  }
  return v;
}

// lse may be NULL when the forward is asked not to write it: an empty view then.
flashpp::TensorView to_optional_view(const char* call, const char* name,
                                     const flashpp_tensor* t) {
  return t == nullptr ? flashpp::TensorView{} : to_view(call, name, t);
}

flashpp::Options to_options(const char* call, const flashpp_options* o) {
  require_non_null(call, "options", o);
  const int alignment = raw_enum_value(o->alignment);
  if (alignment != FLASHPP_ALIGN_TOP_LEFT && alignment != FLASHPP_ALIGN_BOTTOM_RIGHT) {
    invalid(call, "options.alignment: expected FLASHPP_ALIGN_TOP_LEFT or "
                  "FLASHPP_ALIGN_BOTTOM_RIGHT, got " + std::to_string(alignment));
  }
  const int backend = raw_enum_value(o->backend);
  if (backend < FLASHPP_BACKEND_AUTO || backend > FLASHPP_BACKEND_CPU_REFERENCE) {
    invalid(call, "options.backend: expected FLASHPP_BACKEND_AUTO, CPU, CUDA or CPU_REFERENCE, "
                  "got " + std::to_string(backend));
  }
  flashpp::Options r;
  r.softmax_scale = o->softmax_scale;
  r.causal = o->causal != 0;
  r.alignment = static_cast<flashpp::Alignment>(alignment);
  r.window_left = o->window_left;
  r.window_right = o->window_right;
  r.softcap = o->softcap;
  r.dropout_p = o->dropout_p;
  r.seed = o->seed;
  r.offset = o->offset;
  r.deterministic = o->deterministic != 0;
  r.write_lse = o->write_lse != 0;
  r.backend = static_cast<flashpp::Backend>(backend);
  r.q_descale = to_optional_view(call, "options.q_descale", o->q_descale);
  r.k_descale = to_optional_view(call, "options.k_descale", o->k_descale);
  r.v_descale = to_optional_view(call, "options.v_descale", o->v_descale);
  return r;
}

flashpp_tensor from_view(const flashpp::TensorView& v) {
  flashpp_tensor t{};
  t.data = v.data;
  t.dtype = static_cast<flashpp_dtype>(v.dtype);
  t.device_type = static_cast<flashpp_device_type>(v.device.type);
  t.device_index = v.device.index;
  t.rank = v.rank;
  for (int i = 0; i < 4; ++i) {
    t.sizes[i] = v.sizes[i];
    t.strides[i] = v.strides[i];
  }
  return t;
}

flashpp::Device to_device(flashpp_device_type type, int32_t index) {
  return flashpp::Device{static_cast<flashpp::DeviceType>(type), index};
}

}  // namespace

extern "C" {

flashpp_tensor flashpp_make_bnhd(void* data, flashpp_dtype dtype, int64_t B, int64_t N,
                                 int64_t H, int64_t D, flashpp_device_type device_type,
                                 int32_t device_index) {
  return from_view(flashpp::make_bnhd(data, static_cast<flashpp::DType>(dtype), B, N, H, D,
                                      to_device(device_type, device_index)));
}

flashpp_tensor flashpp_make_bhnd(void* data, flashpp_dtype dtype, int64_t B, int64_t N,
                                 int64_t H, int64_t D, flashpp_device_type device_type,
                                 int32_t device_index) {
  return from_view(flashpp::make_bhnd(data, static_cast<flashpp::DType>(dtype), B, N, H, D,
                                      to_device(device_type, device_index)));
}

flashpp_tensor flashpp_make_lse(float* data, int64_t B, int64_t H, int64_t N,
                                flashpp_device_type device_type, int32_t device_index) {
  return from_view(flashpp::make_lse(data, B, H, N, to_device(device_type, device_index)));
}

flashpp_options flashpp_options_default(void) {
  // Taken from flashpp::Options so that the two APIs can never disagree on a default.
  const flashpp::Options d;
  flashpp_options o{};
  o.softmax_scale = d.softmax_scale;
  o.causal = d.causal ? 1 : 0;
  o.alignment = static_cast<flashpp_alignment>(d.alignment);
  o.window_left = d.window_left;
  o.window_right = d.window_right;
  o.softcap = d.softcap;
  o.dropout_p = d.dropout_p;
  o.seed = d.seed;
  o.offset = d.offset;
  o.deterministic = d.deterministic ? 1 : 0;
  o.write_lse = d.write_lse ? 1 : 0;
  o.backend = static_cast<flashpp_backend>(d.backend);
  o.q_descale = o.k_descale = o.v_descale = nullptr;
  return o;
}

flashpp_status flashpp_options_init(flashpp_options* options) {
  return guarded("flashpp_options_init", [&] {
    require_non_null("flashpp_options_init", "options", options);
    *options = flashpp_options_default();
  });
}

flashpp_status flashpp_forward_workspace_size(const flashpp_tensor* q, const flashpp_tensor* k,
                                              const flashpp_tensor* v,
                                              const flashpp_options* options, size_t* bytes) {
  constexpr const char* call = "flashpp_forward_workspace_size";
  return guarded(call, [&] {
    require_non_null(call, "bytes", bytes);
    // Converted one by one, in argument order, so the first bad argument is the one reported
    // (the evaluation order of function arguments is unspecified).
    const auto Q = to_view(call, "q", q), K = to_view(call, "k", k), V = to_view(call, "v", v);
    *bytes = flashpp::forward_workspace_size(Q, K, V, to_options(call, options));
  });
}

flashpp_status flashpp_backward_workspace_size(const flashpp_tensor* q, const flashpp_tensor* k,
                                               const flashpp_tensor* v,
                                               const flashpp_options* options, size_t* bytes) {
  constexpr const char* call = "flashpp_backward_workspace_size";
  return guarded(call, [&] {
    require_non_null(call, "bytes", bytes);
    const auto Q = to_view(call, "q", q), K = to_view(call, "k", k), V = to_view(call, "v", v);
    *bytes = flashpp::backward_workspace_size(Q, K, V, to_options(call, options));
  });
}

flashpp_status flashpp_forward_with_workspace(const flashpp_tensor* q, const flashpp_tensor* k,
                                              const flashpp_tensor* v, const flashpp_tensor* o,
                                              const flashpp_tensor* lse,
                                              const flashpp_options* options, void* stream,
                                              void* workspace, size_t workspace_bytes) {
  constexpr const char* call = "flashpp_forward";
  return guarded(call, [&] {
    const flashpp::Options opt = to_options(call, options);
    // lse may be NULL only when it will not be written.
    if (lse == nullptr && opt.write_lse) {
      invalid(call, "lse: expected a pointer (or options.write_lse = 0), got NULL");
    }
    const auto Q = to_view(call, "q", q), K = to_view(call, "k", k), V = to_view(call, "v", v);
    const auto O = to_view(call, "o", o), L = to_optional_view(call, "lse", lse);
    flashpp::forward(Q, K, V, O, L, opt, stream, flashpp::Workspace{workspace, workspace_bytes});
  });
}

flashpp_status flashpp_forward(const flashpp_tensor* q, const flashpp_tensor* k,
                               const flashpp_tensor* v, const flashpp_tensor* o,
                               const flashpp_tensor* lse, const flashpp_options* options,
                               void* stream) {
  return flashpp_forward_with_workspace(q, k, v, o, lse, options, stream, nullptr, 0);
}

flashpp_status flashpp_backward_with_workspace(
    const flashpp_tensor* q, const flashpp_tensor* k, const flashpp_tensor* v,
    const flashpp_tensor* o, const flashpp_tensor* lse, const flashpp_tensor* dout,
    const flashpp_tensor* dq, const flashpp_tensor* dk, const flashpp_tensor* dv,
    const flashpp_options* options, void* stream, void* workspace, size_t workspace_bytes) {
  constexpr const char* call = "flashpp_backward";
  return guarded(call, [&] {
    const auto Q = to_view(call, "q", q), K = to_view(call, "k", k), V = to_view(call, "v", v);
    const auto O = to_view(call, "o", o), L = to_view(call, "lse", lse);
    const auto dO = to_view(call, "dout", dout);
    const auto dQ = to_view(call, "dq", dq), dK = to_view(call, "dk", dk),
               dV = to_view(call, "dv", dv);
    flashpp::backward(Q, K, V, O, L, dO, dQ, dK, dV, to_options(call, options), stream,
                      flashpp::Workspace{workspace, workspace_bytes});
  });
}

flashpp_status flashpp_backward(const flashpp_tensor* q, const flashpp_tensor* k,
                                const flashpp_tensor* v, const flashpp_tensor* o,
                                const flashpp_tensor* lse, const flashpp_tensor* dout,
                                const flashpp_tensor* dq, const flashpp_tensor* dk,
                                const flashpp_tensor* dv, const flashpp_options* options,
                                void* stream) {
  return flashpp_backward_with_workspace(q, k, v, o, lse, dout, dq, dk, dv, options, stream,
                                         nullptr, 0);
}

flashpp_kv_cache flashpp_kv_cache_default(void) {
  flashpp_kv_cache c{};
  c.validate_indices = 1;
  return c;
}

namespace {
flashpp::KvCache to_kv_cache(const char* call, const flashpp_kv_cache* c) {
  require_non_null(call, "cache", c);
  flashpp::KvCache r;
  r.k_cache = to_view(call, "k_cache", c->k_cache);
  r.v_cache = to_view(call, "v_cache", c->v_cache);
  r.cache_seqlens = to_view(call, "cache_seqlens", c->cache_seqlens);
  r.block_table = to_optional_view(call, "block_table", c->block_table);
  r.k_new = to_optional_view(call, "k_new", c->k_new);
  r.v_new = to_optional_view(call, "v_new", c->v_new);
  r.validate_indices = c->validate_indices != 0;
  return r;
}

flashpp::PackedBatch to_packed_batch(const char* call, const flashpp_packed_batch* b) {
  require_non_null(call, "batch", b);
  flashpp::PackedBatch r;
  r.cu_seqlens_q = to_view(call, "batch.cu_seqlens_q", b->cu_seqlens_q);
  r.cu_seqlens_k = to_view(call, "batch.cu_seqlens_k", b->cu_seqlens_k);
  r.max_seqlen_q = b->max_seqlen_q;
  r.max_seqlen_k = b->max_seqlen_k;
  return r;
}
}  // namespace

flashpp_status flashpp_forward_kvcache_workspace_size(const flashpp_tensor* q,
                                                      const flashpp_kv_cache* cache,
                                                      const flashpp_options* options,
                                                      size_t* bytes) {
  constexpr const char* call = "flashpp_forward_kvcache_workspace_size";
  return guarded(call, [&] {
    require_non_null(call, "bytes", bytes);
    const auto Q = to_view(call, "q", q);
    const auto C = to_kv_cache(call, cache);
    *bytes = flashpp::forward_kvcache_workspace_size(Q, C, to_options(call, options));
  });
}

flashpp_status flashpp_forward_kvcache(const flashpp_tensor* q, const flashpp_kv_cache* cache,
                                       const flashpp_tensor* o, const flashpp_tensor* lse,
                                       const flashpp_options* options, void* stream,
                                       void* workspace, size_t workspace_bytes) {
  constexpr const char* call = "flashpp_forward_kvcache";
  return guarded(call, [&] {
    const flashpp::Options opt = to_options(call, options);
    if (lse == nullptr && opt.write_lse) {
      invalid(call, "lse: expected a pointer (or options.write_lse = 0), got NULL");
    }
    const auto Q = to_view(call, "q", q);
    const auto C = to_kv_cache(call, cache);
    const auto O = to_view(call, "o", o), L = to_optional_view(call, "lse", lse);
    flashpp::forward_kvcache(Q, C, O, L, opt, stream,
                             flashpp::Workspace{workspace, workspace_bytes});
  });
}

flashpp_status flashpp_forward_varlen(const flashpp_tensor* q, const flashpp_tensor* k,
                                      const flashpp_tensor* v, const flashpp_packed_batch* batch,
                                      const flashpp_tensor* o, const flashpp_tensor* lse,
                                      const flashpp_options* options, void* stream) {
  constexpr const char* call = "flashpp_forward_varlen";
  return guarded(call, [&] {
    const flashpp::Options opt = to_options(call, options);
    if (lse == nullptr && opt.write_lse) {
      invalid(call, "lse: expected a pointer (or options.write_lse = 0), got NULL");
    }
    const auto Q = to_view(call, "q", q), K = to_view(call, "k", k), V = to_view(call, "v", v);
    const auto P = to_packed_batch(call, batch);
    const auto O = to_view(call, "o", o), L = to_optional_view(call, "lse", lse);
    flashpp::forward_varlen(Q, K, V, P, O, L, opt, stream);
  });
}

flashpp_status flashpp_backward_varlen(const flashpp_tensor* q, const flashpp_tensor* k,
                                       const flashpp_tensor* v, const flashpp_tensor* o,
                                       const flashpp_tensor* lse, const flashpp_tensor* dout,
                                       const flashpp_tensor* dq, const flashpp_tensor* dk,
                                       const flashpp_tensor* dv,
                                       const flashpp_packed_batch* batch,
                                       const flashpp_options* options, void* stream) {
  constexpr const char* call = "flashpp_backward_varlen";
  return guarded(call, [&] {
    const auto Q = to_view(call, "q", q), K = to_view(call, "k", k), V = to_view(call, "v", v);
    const auto O = to_view(call, "o", o), L = to_view(call, "lse", lse);
    const auto dO = to_view(call, "dout", dout);
    const auto dQ = to_view(call, "dq", dq), dK = to_view(call, "dk", dk),
               dV = to_view(call, "dv", dv);
    const auto P = to_packed_batch(call, batch);
    flashpp::backward_varlen(Q, K, V, O, L, dO, dQ, dK, dV, P, to_options(call, options), stream);
  });
}

int flashpp_cuda_compiled(void) { return flashpp::cuda_compiled() ? 1 : 0; }
int flashpp_cuda_available(void) { return flashpp::cuda_available() ? 1 : 0; }
void flashpp_cuda_release_scratch(void) { flashpp::cuda_release_scratch(); }
const char* flashpp_cuda_kernel_families(int device) {
  static thread_local std::string text;
  try {
    text = flashpp::cuda_kernel_families(device);
  } catch (const std::exception& e) {
    text = std::string("unknown: ") + e.what();
  }
  return text.c_str();
}
const char* flashpp_cpu_kernel(flashpp_dtype dtype, int backward) {
  static thread_local std::string text;
  try {
    text = flashpp::cpu_kernel(static_cast<flashpp::DType>(dtype), backward != 0);
  } catch (const std::exception& e) {
    text = std::string("unknown: ") + e.what();
  }
  return text.c_str();
}
const char* flashpp_version(void) { return flashpp::version(); }
const char* flashpp_last_error(void) { return last_error_message.c_str(); }

const char* flashpp_status_string(flashpp_status status) {
  switch (status) {
    case FLASHPP_OK: return "ok";
    case FLASHPP_ERROR_INVALID_ARGUMENT: return "invalid argument";
    case FLASHPP_ERROR_UNSUPPORTED: return "unsupported";
    case FLASHPP_ERROR_BACKEND_FAILURE: return "backend failure";
    case FLASHPP_ERROR_INTERNAL: return "internal error";
  }
  return "unknown status";
}

}  // extern "C"
