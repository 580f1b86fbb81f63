// Public entry points for inference and packed batches: forward_kvcache (KV-cache decoding,
// contiguous or paged, with append) and forward_varlen / backward_varlen (packed sequences).
// As everywhere in src/api: validate every argument (index contents included), then dispatch.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "../cpu/cpu_backend.hpp"
#include "../cuda/cuda_backend.hpp"
#include "flashpp/flashpp.hpp"
#include "inference_problem.hpp"
#include "validate.hpp"

namespace flashpp {
namespace {

using detail::check_tensor;
using detail::Direction;
using detail::fail_argument;
using detail::shape_of;

std::string str(std::int64_t x) { return std::to_string(x); }

bool is_empty_view(const TensorView& t) { return t.rank == 0 && t.data == nullptr; }

// An int32 index tensor of the given rank and sizes on `device`.
void check_index_tensor(const char* call, const char* name, const TensorView& t, int rank,
                        const std::int64_t* sizes, const char* dims, const Device& device) {
  check_tensor(call, name, t, rank, dims);
  if (t.dtype != DType::i32) {
    fail_argument(ErrorCode::invalid_argument, call, name, "dtype i32 (int32 indices)",
                  to_string(t.dtype));
  }
  for (int i = 0; i < rank; ++i) {
    if (t.sizes[i] != sizes[i]) {
      std::string want = "shape [";
      for (int j = 0; j < rank; ++j) want += (j ? ", " : "") + str(sizes[j]);
      fail_argument(ErrorCode::invalid_argument, call, name, want + "] " + dims, shape_of(t));
    }
  }
  if (!(t.device == device)) {
    fail_argument(ErrorCode::invalid_argument, call, name,
                  "device " + detail::device_name(device) + " (the device of q)",
                  detail::device_name(t.device));
  }
}

// The elements of a (validated) rank-1 or rank-2 int32 tensor, row-major, on the host. A CUDA
// tensor is copied (the span its strides address, nothing beyond it).
std::vector<std::int32_t> read_indices(const TensorView& t, void* stream) {
  const std::int64_t rows = t.rank == 2 ? t.sizes[0] : 1;
  const std::int64_t cols = t.rank == 2 ? t.sizes[1] : t.sizes[0];
  const std::int64_t row_stride = t.rank == 2 ? t.strides[0] : 0;
  const std::int64_t col_stride = t.rank == 2 ? t.strides[1] : t.strides[0];
  std::vector<std::int32_t> out(static_cast<std::size_t>(rows * cols));
  if (rows * cols == 0) return out;
  const std::int64_t span = (rows - 1) * row_stride + (cols - 1) * col_stride + 1;
  const std::int32_t* src = static_cast<const std::int32_t*>(t.data);
  std::vector<std::int32_t> staged;
  if (t.device.type == DeviceType::cuda) {
    staged.resize(static_cast<std::size_t>(span));
    cuda::copy_to_host(staged.data(), t.data, static_cast<std::size_t>(span) * 4, t.device.index,
                       stream);
    src = staged.data();
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      out[static_cast<std::size_t>(r * cols + c)] = src[r * row_stride + c * col_stride];
    }
  }
  return out;
}

// A rank-3 [N, H, D] view as the rank-4 [1, N, H, D] view the single-sequence API takes.
TensorView as_batch_of_one(const TensorView& t) {
  TensorView r = t;
  r.rank = 4;
  for (int i = 3; i >= 1; --i) {
    r.sizes[i] = t.sizes[i - 1];
    r.strides[i] = t.strides[i - 1];
  }
  r.sizes[0] = 1;
  r.strides[0] = 0;
  return r;
}

// Rows [start, start + len) of a [1, N, H, D] view.
TensorView rows_of(const TensorView& t, std::int64_t start, std::int64_t len) {
  TensorView r = t;
  r.data = static_cast<char*>(t.data) +
           start * t.strides[1] * static_cast<std::int64_t>(element_size(t.dtype));
  r.sizes[1] = len;
  return r;
}

// ---- KV cache ---------------------------------------------------------------------------------

detail::KvCacheArgs validate_kvcache(const char* call, const TensorView& q, const KvCache& c,
                                     const Options& options, Backend* backend_out) {
  check_tensor(call, "q", q, 4, "[B, Nq, Hq, D]");
  check_tensor(call, "k_cache", c.k_cache, 4,
               "[B, capacity, Hkv, D] (or [num_pages, page_size, Hkv, D] with a block_table)");
  check_tensor(call, "v_cache", c.v_cache, 4, "the shape of k_cache");
  const std::int64_t B = q.sizes[0];
  const bool paged = !is_empty_view(c.block_table);
  detail::KvCacheArgs a;
  a.paged = paged;
  for (int i = 0; i < 4; ++i) {
    if (c.v_cache.sizes[i] != c.k_cache.sizes[i]) {
      fail_argument(ErrorCode::invalid_argument, call, "v_cache",
                    "the shape of k_cache " + shape_of(c.k_cache), shape_of(c.v_cache));
    }
  }
  if (c.k_cache.sizes[3] != q.sizes[3]) {
    fail_argument(ErrorCode::invalid_argument, call, "k_cache",
                  "head dim " + str(q.sizes[3]) + " (q's)", shape_of(c.k_cache));
  }
  if (paged) {
    const std::int64_t bt_sizes[2] = {B, c.block_table.rank == 2 ? c.block_table.sizes[1] : 0};
    check_index_tensor(call, "block_table", c.block_table, 2, bt_sizes, "[B, max_pages]",
                       q.device);
    a.num_pages = c.k_cache.sizes[0];
    a.page_size = c.k_cache.sizes[1];
    a.max_pages = c.block_table.sizes[1];
    if (a.page_size < 1 && a.max_pages > 0) {
      fail_argument(ErrorCode::invalid_argument, call, "k_cache",
                    "a page size (dimension 1) >= 1", shape_of(c.k_cache));
    }
  } else {
    if (c.k_cache.sizes[0] != B) {
      fail_argument(ErrorCode::invalid_argument, call, "k_cache",
                    "batch " + str(B) + " (q's; or pass a block_table for a paged cache)",
                    shape_of(c.k_cache));
    }
    a.num_pages = B;
    a.page_size = c.k_cache.sizes[1];
    a.max_pages = 1;
  }
  const std::int64_t capacity = a.page_size * a.max_pages;
  // q, k, v and the options through the common checks, with the cache seen as the
  // [B, capacity, Hkv, D] tensor it stands for.
  TensorView k_like = c.k_cache, v_like = c.v_cache;
  for (TensorView* t : {&k_like, &v_like}) {
    t->sizes[0] = B;
    t->sizes[1] = capacity;
    if (paged) t->strides[0] = 0;
  }
  if (options.dropout_p != 0.0f) {
    fail_argument(ErrorCode::unsupported, call, "options.dropout_p",
                  "0 (dropout is for training; forward_kvcache does not apply it)",
                  std::to_string(options.dropout_p));
  }
  try {
    a.problem = detail::validate_inputs(call, q, k_like, v_like, options);
  } catch (const Error& e) {
    // The common checks name k and v: here they are k_cache and v_cache.
    std::string m = e.what();
    for (const char* name : {"k", "v"}) {
      const std::string from = std::string(": ") + name + ": ";
      const auto at = m.find(from);
      if (at != std::string::npos) m.replace(at, from.size(), std::string(": ") + name + "_cache: ");
    }
    throw Error(e.code(), m);
  }
  if (a.problem.dtype == DType::e4m3) {
    fail_argument(ErrorCode::unsupported, call, "q",
                  "dtype f16, bf16 or f32 (e4m3 inputs are for flashpp::forward only)", "e4m3");
  }
  a.problem.mask.shift = 0;  // per sequence: Nk_b - Nq (bottom-right)
  const std::int64_t sl_sizes[1] = {B};
  check_index_tensor(call, "cache_seqlens", c.cache_seqlens, 1, sl_sizes, "[B]", q.device);

  const bool has_k_new = !is_empty_view(c.k_new), has_v_new = !is_empty_view(c.v_new);
  if (has_k_new != has_v_new) {
    fail_argument(ErrorCode::invalid_argument, call, has_k_new ? "v_new" : "k_new",
                  "a tensor (k_new and v_new come together)", "an empty view");
  }
  if (has_k_new) {
    for (const auto& [name, t] : {std::pair<const char*, const TensorView*>{"k_new", &c.k_new},
                                  {"v_new", &c.v_new}}) {
      check_tensor(call, name, *t, 4, "[B, Nnew, Hkv, D]");
      if (t->sizes[0] != B || t->sizes[2] != a.problem.Hkv || t->sizes[3] != a.problem.D ||
          t->sizes[1] != c.k_new.sizes[1]) {
        fail_argument(ErrorCode::invalid_argument, call, name,
                      "shape [" + str(B) + ", Nnew, " + str(a.problem.Hkv) + ", " +
                          str(a.problem.D) + "] (Nnew the same for k_new and v_new)",
                      shape_of(*t));
      }
      if (t->dtype != q.dtype || !(t->device == q.device)) {
        fail_argument(ErrorCode::invalid_argument, call, name,
                      std::string("dtype ") + to_string(q.dtype) + " on " +
                          detail::device_name(q.device) + " (as q)",
                      std::string(to_string(t->dtype)) + " on " + detail::device_name(t->device));
      }
    }
    a.Nnew = c.k_new.sizes[1];
    if (a.Nnew > capacity) {
      fail_argument(ErrorCode::invalid_argument, call, "k_new",
                    "at most " + str(capacity) + " new rows (the cache capacity)", str(a.Nnew));
    }
  }
  const Backend backend = detail::choose_backend(call, a.problem, options, Direction::forward);
  a.q = q;
  a.k_cache = c.k_cache;
  a.v_cache = c.v_cache;
  a.cache_seqlens = c.cache_seqlens;
  a.block_table = c.block_table;
  a.k_new = c.k_new;
  a.v_new = c.v_new;
  if (backend == Backend::cuda) {
    const std::string why = cuda::kvcache_unsupported_reason(a);
    if (!why.empty()) throw Error(ErrorCode::unsupported, std::string(call) + ": " + why);
  }
  *backend_out = backend;
  return a;
}

// Every used index in range: 0 <= cache_seqlens[b] <= capacity - Nnew and, paged, the pages
// covering keys [0, cache_seqlens[b] + Nnew) in [0, num_pages).
void check_kvcache_indices(const char* call, const detail::KvCacheArgs& a,
                           const std::vector<std::int32_t>& seqlens,
                           const std::vector<std::int32_t>& table) {
  const std::int64_t capacity = a.page_size * a.max_pages;
  for (std::int64_t b = 0; b < a.problem.B; ++b) {
    const std::int64_t len = seqlens[static_cast<std::size_t>(b)];
    if (len < 0 || len + a.Nnew > capacity) {
      fail_argument(ErrorCode::invalid_argument, call,
                    "cache_seqlens[" + str(b) + "]",
                    "a length in [0, " + str(capacity - a.Nnew) + "] (capacity " + str(capacity) +
                        (a.Nnew ? " minus the " + str(a.Nnew) + " appended rows)" : ")"),
                    str(len));
    }
    if (!a.paged) continue;
    const std::int64_t pages_used = (len + a.Nnew + a.page_size - 1) / a.page_size;
    for (std::int64_t p = 0; p < pages_used; ++p) {
      const std::int64_t page = table[static_cast<std::size_t>(b * a.max_pages + p)];
      if (page < 0 || page >= a.num_pages) {
        fail_argument(ErrorCode::invalid_argument, call,
                      "block_table[" + str(b) + "][" + str(p) + "]",
                      "a page id in [0, " + str(a.num_pages) + ") (k_cache has " +
                          str(a.num_pages) + " pages)",
                      str(page));
      }
    }
  }
}

// ---- varlen -----------------------------------------------------------------------------------

struct VarlenPlan {
  detail::Problem problem;  // the whole packed problem as B = 1, Nq = total_q, Nk = total_k
  Backend backend = Backend::cpu;
  std::vector<std::int32_t> cu_q, cu_k;
  std::int64_t batch = 0;
};

VarlenPlan validate_varlen(const char* call, const TensorView& q, const TensorView& k,
                           const TensorView& v, const PackedBatch& batch, const Options& options,
                           Direction direction, void* stream) {
  check_tensor(call, "q", q, 3, "[total_q, Hq, D]");
  check_tensor(call, "k", k, 3, "[total_k, Hkv, D]");
  check_tensor(call, "v", v, 3, "[total_k, Hkv, D]");
  VarlenPlan plan;
  plan.problem = detail::validate_inputs(call, as_batch_of_one(q), as_batch_of_one(k),
                                         as_batch_of_one(v), options);
  if (plan.problem.dtype == DType::e4m3) {
    fail_argument(ErrorCode::unsupported, call, "q",
                  "dtype f16, bf16 or f32 (e4m3 inputs are for flashpp::forward only)", "e4m3");
  }
  const std::int64_t nb = batch.cu_seqlens_q.rank == 1 ? batch.cu_seqlens_q.sizes[0] : 0;
  if (nb < 1) {
    fail_argument(ErrorCode::invalid_argument, call, "batch.cu_seqlens_q",
                  "an int32 tensor [B + 1] with B + 1 >= 1", shape_of(batch.cu_seqlens_q));
  }
  const std::int64_t cu_sizes[1] = {nb};
  check_index_tensor(call, "batch.cu_seqlens_q", batch.cu_seqlens_q, 1, cu_sizes, "[B + 1]",
                     q.device);
  check_index_tensor(call, "batch.cu_seqlens_k", batch.cu_seqlens_k, 1, cu_sizes,
                     "[B + 1] (the size of cu_seqlens_q)", q.device);
  for (const auto& [name, m] : {std::pair<const char*, std::int64_t>{"batch.max_seqlen_q",
                                                                     batch.max_seqlen_q},
                                {"batch.max_seqlen_k", batch.max_seqlen_k}}) {
    if (m < 0) fail_argument(ErrorCode::invalid_argument, call, name, "a length >= 0", str(m));
  }
  plan.backend = detail::choose_backend(call, plan.problem, options, direction);
  plan.batch = nb - 1;
  plan.cu_q = read_indices(batch.cu_seqlens_q, stream);
  plan.cu_k = read_indices(batch.cu_seqlens_k, stream);
  for (int which = 0; which < 2; ++which) {
    const auto& cu = which == 0 ? plan.cu_q : plan.cu_k;
    const char* name = which == 0 ? "batch.cu_seqlens_q" : "batch.cu_seqlens_k";
    const std::int64_t total = which == 0 ? q.sizes[0] : k.sizes[0];
    const std::int64_t max_len = which == 0 ? batch.max_seqlen_q : batch.max_seqlen_k;
    if (cu[0] < 0) {
      fail_argument(ErrorCode::invalid_argument, call, std::string(name) + "[0]",
                    "an offset >= 0", str(cu[0]));
    }
    for (std::int64_t b = 0; b < plan.batch; ++b) {
      const std::int64_t len = std::int64_t(cu[b + 1]) - cu[b];
      if (len < 0) {
        fail_argument(ErrorCode::invalid_argument, call,
                      std::string(name) + "[" + str(b + 1) + "]",
                      "non-decreasing offsets (>= " + str(cu[b]) + ", the entry before)",
                      str(cu[b + 1]));
      }
      if (len > max_len) {
        fail_argument(ErrorCode::invalid_argument, call,
                      which == 0 ? "batch.max_seqlen_q" : "batch.max_seqlen_k",
                      "at least every sequence's length (sequence " + str(b) + " has " +
                          str(len) + ")",
                      str(max_len));
      }
    }
    if (cu[plan.batch] > total) {
      fail_argument(ErrorCode::invalid_argument, call,
                    std::string(name) + "[" + str(plan.batch) + "]",
                    "an offset within the packed tensor (<= " + str(total) + " rows)",
                    str(cu[plan.batch]));
    }
  }
  return plan;
}

// The single-sequence problem of sequence b.
detail::Problem sequence_problem(const VarlenPlan& plan, const Options& options, std::int64_t b) {
  detail::Problem p = plan.problem;
  p.Nq = plan.cu_q[b + 1] - plan.cu_q[b];
  p.Nk = plan.cu_k[b + 1] - plan.cu_k[b];
  p.mask.shift = options.alignment == Alignment::bottom_right ? p.Nk - p.Nq : 0;
  if (options.dropout_p > 0.0f) {
    // Sequences are independent problems with independent masks: a seed per sequence.
    const std::uint64_t seed =
        options.seed ^ (0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(b + 1));
    p.dropout = detail::make_dropout_params(options.dropout_p, seed, options.offset);
  }
  return p;
}

// lse [Hq, total_q] -> the [1, Hq, len] view of sequence rows [start, start + len).
TensorView lse_rows(const TensorView& lse, std::int64_t start, std::int64_t len) {
  TensorView r;
  r.data = static_cast<char*>(lse.data) +
           start * lse.strides[1] * static_cast<std::int64_t>(element_size(lse.dtype));
  r.dtype = lse.dtype;
  r.device = lse.device;
  r.rank = 3;
  r.sizes[0] = 1;
  r.sizes[1] = lse.sizes[0];
  r.sizes[2] = len;
  r.strides[0] = 0;
  r.strides[1] = lse.strides[0];
  r.strides[2] = lse.strides[1];
  return r;
}

// Runs every sequence: one after the other on the CPU; on CUDA as independent launches spread
// over a few forked streams, longest first, so that the small launches of short sequences and
// the tails of long ones overlap.
template <class Run>
void run_sequences(const VarlenPlan& plan, void* stream, Run& run) {
  if (plan.backend != Backend::cuda) {
    for (std::int64_t b = 0; b < plan.batch; ++b) run(b, stream);
    return;
  }
  std::vector<std::int64_t> order(static_cast<std::size_t>(plan.batch));
  for (std::int64_t b = 0; b < plan.batch; ++b) order[static_cast<std::size_t>(b)] = b;
  auto work = [&](std::int64_t b) {
    return (std::int64_t(plan.cu_q[b + 1]) - plan.cu_q[b]) *
           (std::int64_t(plan.cu_k[b + 1]) - plan.cu_k[b]);
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](std::int64_t x, std::int64_t y) { return work(x) > work(y); });
  cuda::run_forked(plan.problem.device.index, stream, plan.batch,
                   [&](std::int64_t i, void* s) { run(order[static_cast<std::size_t>(i)], s); });
}

void check_varlen_lse(const char* call, const TensorView& lse, const detail::Problem& p,
                      Backend backend) {
  check_tensor(call, "lse", lse, 2, "[Hq, total_q] float32");
  detail::check_output_tensor(call, "lse", lse);
  if (lse.sizes[0] != p.Hq || lse.sizes[1] != p.Nq) {
    fail_argument(ErrorCode::invalid_argument, call, "lse",
                  "shape [" + str(p.Hq) + ", " + str(p.Nq) + "]", shape_of(lse));
  }
  const bool ok = lse.dtype == DType::f32 ||
                  (lse.dtype == DType::f64 && backend == Backend::cpu_reference);
  if (!ok) fail_argument(ErrorCode::invalid_argument, call, "lse", "dtype f32", to_string(lse.dtype));
  if (!(lse.device == p.device)) {
    fail_argument(ErrorCode::invalid_argument, call, "lse",
                  "device " + detail::device_name(p.device) + " (the device of q)",
                  detail::device_name(lse.device));
  }
}

}  // namespace

std::size_t forward_kvcache_workspace_size(const TensorView& q, const KvCache& cache,
                                           const Options& options) {
  constexpr const char* call = "flashpp::forward_kvcache_workspace_size";
  Backend backend = Backend::cpu;
  const detail::KvCacheArgs a = validate_kvcache(call, q, cache, options, &backend);
  return backend == Backend::cuda ? cuda::kvcache_workspace_size(a) : 0;
}

void forward_kvcache(const TensorView& q, const KvCache& cache, const TensorView& o,
                     const TensorView& lse, const Options& options, void* stream,
                     const Workspace& workspace) {
  constexpr const char* call = "flashpp::forward_kvcache";
  Backend backend = Backend::cpu;
  detail::KvCacheArgs a = validate_kvcache(call, q, cache, options, &backend);
  detail::validate_like(call, "o", o, q, a.problem, detail::Role::output);
  a.o = o;
  a.write_lse = options.write_lse;
  if (a.write_lse) {
    detail::validate_lse(call, lse, a.problem, backend);
    a.lse = lse;
  }
  const std::size_t needed = backend == Backend::cuda ? cuda::kvcache_workspace_size(a) : 0;
  detail::validate_workspace(call, workspace, needed);
  a.stream = stream;
  a.workspace = workspace;
  // The CPU backends always need the lengths on the host; the CUDA one only to check them.
  std::vector<std::int32_t> seqlens, table;
  if (cache.validate_indices || backend != Backend::cuda) {
    seqlens = read_indices(cache.cache_seqlens, stream);
    if (a.paged) table = read_indices(cache.block_table, stream);
    check_kvcache_indices(call, a, seqlens, table);
    a.indices_checked = true;
    a.host_seqlens = seqlens.data();
  }
  if (a.problem.B == 0) return;
  switch (backend) {
    case Backend::cpu_reference: cpu::forward_kvcache(a, /*reference=*/true); break;
    case Backend::cpu: cpu::forward_kvcache(a, /*reference=*/false); break;
    case Backend::cuda: cuda::forward_kvcache(a); break;
    default: throw Error(ErrorCode::internal, "flashpp::forward_kvcache: unresolved backend");
  }
}

void forward_varlen(const TensorView& q, const TensorView& k, const TensorView& v,
                    const PackedBatch& batch, const TensorView& o, const TensorView& lse,
                    const Options& options, void* stream) {
  constexpr const char* call = "flashpp::forward_varlen";
  const VarlenPlan plan =
      validate_varlen(call, q, k, v, batch, options, Direction::forward, stream);
  const TensorView Q = as_batch_of_one(q), K = as_batch_of_one(k), V = as_batch_of_one(v);
  check_tensor(call, "o", o, 3, "[total_q, Hq, D] (the shape of q)");
  const TensorView O = as_batch_of_one(o);
  detail::validate_like(call, "o", O, Q, plan.problem, detail::Role::output);
  if (options.write_lse) check_varlen_lse(call, lse, plan.problem, plan.backend);
  auto run_sequence = [&](std::int64_t b, void* on_stream) {
    detail::ForwardArgs a;
    a.problem = sequence_problem(plan, options, b);
    if (a.problem.Nq == 0 || a.problem.Hq == 0) return;
    a.q = rows_of(Q, plan.cu_q[b], a.problem.Nq);
    a.o = rows_of(O, plan.cu_q[b], a.problem.Nq);
    a.k = rows_of(K, plan.cu_k[b], a.problem.Nk);
    a.v = rows_of(V, plan.cu_k[b], a.problem.Nk);
    a.write_lse = options.write_lse;
    if (a.write_lse) a.lse = lse_rows(lse, plan.cu_q[b], a.problem.Nq);
    a.stream = on_stream;
    switch (plan.backend) {
      case Backend::cpu_reference: cpu::reference_forward(a); break;
      case Backend::cpu: cpu::flash_forward(a); break;
      case Backend::cuda: cuda::forward(a); break;
      default: throw Error(ErrorCode::internal, "flashpp::forward_varlen: unresolved backend");
    }
  };
  run_sequences(plan, stream, run_sequence);
}

void backward_varlen(const TensorView& q, const TensorView& k, const TensorView& v,
                     const TensorView& o, const TensorView& lse, const TensorView& dout,
                     const TensorView& dq, const TensorView& dk, const TensorView& dv,
                     const PackedBatch& batch, const Options& options, void* stream) {
  constexpr const char* call = "flashpp::backward_varlen";
  const VarlenPlan plan =
      validate_varlen(call, q, k, v, batch, options, Direction::backward, stream);
  const TensorView Q = as_batch_of_one(q), K = as_batch_of_one(k), V = as_batch_of_one(v);
  const std::pair<const char*, const TensorView*> like_q[] = {{"o", &o}, {"dout", &dout},
                                                              {"dq", &dq}};
  for (const auto& [name, t] : like_q) check_tensor(call, name, *t, 3, "the shape of q");
  for (const auto& [name, t] : {std::pair<const char*, const TensorView*>{"dk", &dk},
                                {"dv", &dv}}) {
    check_tensor(call, name, *t, 3, "the shape of k");
  }
  const TensorView O = as_batch_of_one(o), dO = as_batch_of_one(dout), dQ = as_batch_of_one(dq),
                   dK = as_batch_of_one(dk), dV = as_batch_of_one(dv);
  detail::validate_like(call, "o", O, Q, plan.problem, detail::Role::input);
  detail::validate_like(call, "dout", dO, Q, plan.problem, detail::Role::input);
  detail::validate_like(call, "dq", dQ, Q, plan.problem, detail::Role::output);
  detail::validate_like(call, "dk", dK, K, plan.problem, detail::Role::output);
  detail::validate_like(call, "dv", dV, V, plan.problem, detail::Role::output);
  check_varlen_lse(call, lse, plan.problem, plan.backend);
  auto run_sequence = [&](std::int64_t b, void* on_stream) {
    detail::BackwardArgs a;
    a.problem = sequence_problem(plan, options, b);
    if (a.problem.Hq == 0 || (a.problem.Nq == 0 && a.problem.Nk == 0)) return;
    const std::int64_t q0 = plan.cu_q[b], k0 = plan.cu_k[b];
    a.q = rows_of(Q, q0, a.problem.Nq);
    a.o = rows_of(O, q0, a.problem.Nq);
    a.dout = rows_of(dO, q0, a.problem.Nq);
    a.dq = rows_of(dQ, q0, a.problem.Nq);
    a.k = rows_of(K, k0, a.problem.Nk);
    a.v = rows_of(V, k0, a.problem.Nk);
    a.dk = rows_of(dK, k0, a.problem.Nk);
    a.dv = rows_of(dV, k0, a.problem.Nk);
    a.lse = lse_rows(lse, q0, a.problem.Nq);
    a.deterministic = options.deterministic;
    a.stream = on_stream;
    switch (plan.backend) {
      case Backend::cpu_reference: cpu::reference_backward(a); break;
      case Backend::cpu: cpu::flash_backward(a); break;
      case Backend::cuda: cuda::backward(a); break;
      default: throw Error(ErrorCode::internal, "flashpp::backward_varlen: unresolved backend");
    }
  };
  run_sequences(plan, stream, run_sequence);
}

}  // namespace flashpp
