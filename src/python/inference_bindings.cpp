#include "inference_bindings.hpp"

#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>

#include <cstdint>
#include <optional>

#include "flashpp/flashpp.hpp"
#include "tensor_views.hpp"

namespace flashpp::python {
namespace {

namespace nb = nanobind;
using namespace nb::literals;

using OptionalIn = std::optional<InputArray>;
using OptionalOut = std::optional<OutputArray>;

TensorView optional_view(const OptionalIn& a, const char* name, const ViewRules& rules) {
  return a ? to_view(*a, name, rules) : TensorView{};
}

KvCache make_cache(const OutputArray& k_cache, const OutputArray& v_cache,
                   const InputArray& cache_seqlens, const OptionalIn& block_table,
                   const OptionalIn& k_new, const OptionalIn& v_new, bool validate_indices,
                   const ViewRules& rules) {
  KvCache c;
  c.k_cache = to_view(k_cache, "k_cache", rules);
  c.v_cache = to_view(v_cache, "v_cache", rules);
  c.cache_seqlens = to_view(cache_seqlens, "cache_seqlens", rules);
  c.block_table = optional_view(block_table, "block_table", rules);
  c.k_new = optional_view(k_new, "k_new", rules);
  c.v_new = optional_view(v_new, "v_new", rules);
  c.validate_indices = validate_indices;
  return c;
}

std::size_t forward_kvcache_workspace_size_py(const InputArray& q, const OutputArray& k_cache,
                                              const OutputArray& v_cache,
                                              const InputArray& cache_seqlens,
                                              const OptionalIn& block_table,
                                              const OptionalIn& k_new, const OptionalIn& v_new,
                                              const Options& options, bool uint16_is_bf16) {
  const ViewRules rules{uint16_is_bf16};
  const KvCache c = make_cache(k_cache, v_cache, cache_seqlens, block_table, k_new, v_new,
                               /*validate_indices=*/false, rules);
  return forward_kvcache_workspace_size(to_view(q, "q", rules), c, options);
}

void forward_kvcache_py(const InputArray& q, const OutputArray& k_cache,
                        const OutputArray& v_cache, const InputArray& cache_seqlens,
                        const OptionalIn& block_table, const OptionalIn& k_new,
                        const OptionalIn& v_new, const OutputArray& o, const OptionalOut& lse,
                        const Options& options, bool validate_indices, std::uintptr_t stream,
                        const OptionalOut& workspace, bool uint16_is_bf16) {
  const ViewRules rules{uint16_is_bf16};
  const KvCache c = make_cache(k_cache, v_cache, cache_seqlens, block_table, k_new, v_new,
                               validate_indices, rules);
  const TensorView Q = to_view(q, "q", rules), O = to_view(o, "o", rules);
  const TensorView L = lse ? to_view(*lse, "lse", rules) : TensorView{};
  const Workspace W = to_workspace(workspace ? &*workspace : nullptr);
  nb::gil_scoped_release no_gil;
  forward_kvcache(Q, c, O, L, options, reinterpret_cast<void*>(stream), W);
}

PackedBatch make_batch(const InputArray& cu_q, const InputArray& cu_k, std::int64_t max_q,
                       std::int64_t max_k, const ViewRules& rules) {
  PackedBatch b;
  b.cu_seqlens_q = to_view(cu_q, "cu_seqlens_q", rules);
  b.cu_seqlens_k = to_view(cu_k, "cu_seqlens_k", rules);
  b.max_seqlen_q = max_q;
  b.max_seqlen_k = max_k;
  return b;
}

void forward_varlen_py(const InputArray& q, const InputArray& k, const InputArray& v,
                       const InputArray& cu_q, const InputArray& cu_k, std::int64_t max_q,
                       std::int64_t max_k, const OutputArray& o, const OptionalOut& lse,
                       const Options& options, std::uintptr_t stream, bool uint16_is_bf16) {
  const ViewRules rules{uint16_is_bf16};
  const TensorView Q = to_view(q, "q", rules), K = to_view(k, "k", rules),
                   V = to_view(v, "v", rules), O = to_view(o, "o", rules);
  const TensorView L = lse ? to_view(*lse, "lse", rules) : TensorView{};
  const PackedBatch batch = make_batch(cu_q, cu_k, max_q, max_k, rules);
  nb::gil_scoped_release no_gil;
  forward_varlen(Q, K, V, batch, O, L, options, reinterpret_cast<void*>(stream));
}

void backward_varlen_py(const InputArray& q, const InputArray& k, const InputArray& v,
                        const InputArray& o, const InputArray& lse, const InputArray& dout,
                        const OutputArray& dq, const OutputArray& dk, const OutputArray& dv,
                        const InputArray& cu_q, const InputArray& cu_k, std::int64_t max_q,
                        std::int64_t max_k, const Options& options, std::uintptr_t stream,
                        bool uint16_is_bf16) {
  const ViewRules rules{uint16_is_bf16};
  const TensorView Q = to_view(q, "q", rules), K = to_view(k, "k", rules),
                   V = to_view(v, "v", rules), O = to_view(o, "o", rules),
                   L = to_view(lse, "lse", rules), dO = to_view(dout, "dout", rules),
                   dQ = to_view(dq, "dq", rules), dK = to_view(dk, "dk", rules),
                   dV = to_view(dv, "dv", rules);
  const PackedBatch batch = make_batch(cu_q, cu_k, max_q, max_k, rules);
  nb::gil_scoped_release no_gil;
  backward_varlen(Q, K, V, O, L, dO, dQ, dK, dV, batch, options, reinterpret_cast<void*>(stream));
}

}  // namespace

void bind_inference(nb::module_& m) {
  m.def("forward_kvcache_workspace_size", &forward_kvcache_workspace_size_py, "q"_a, "k_cache"_a,
        "v_cache"_a, "cache_seqlens"_a, "block_table"_a.none(), "k_new"_a.none(),
        "v_new"_a.none(), "options"_a, "uint16_is_bf16"_a = false,
        "Bytes of scratch memory flashpp.forward_kvcache needs (split-KV partials).");
  m.def("forward_kvcache", &forward_kvcache_py, "q"_a, "k_cache"_a, "v_cache"_a,
        "cache_seqlens"_a, "block_table"_a.none(), "k_new"_a.none(), "v_new"_a.none(), "o"_a,
        "lse"_a.none(), "options"_a, "validate_indices"_a = true, "stream"_a = 0,
        "workspace"_a.none() = nb::none(), "uint16_is_bf16"_a = false,
        "KV-cache attention (see flashpp.hpp, forward_kvcache): q [B, Nq, Hq, D] over the\n"
        "cache [B, capacity, Hkv, D] (or pages [num_pages, page_size, Hkv, D] with block_table\n"
        "int32 [B, max_pages]), cache_seqlens int32 [B]; k_new/v_new [B, Nnew, Hkv, D] are\n"
        "written into the cache first. o like q, lse float32 [B, Hq, Nq] or None.");
  m.def("forward_varlen", &forward_varlen_py, "q"_a, "k"_a, "v"_a, "cu_seqlens_q"_a,
        "cu_seqlens_k"_a, "max_seqlen_q"_a, "max_seqlen_k"_a, "o"_a, "lse"_a.none(),
        "options"_a, "stream"_a = 0, "uint16_is_bf16"_a = false,
        "Packed sequences: q [total_q, Hq, D], k, v [total_k, Hkv, D], cu_seqlens int32 [B+1];\n"
        "o like q, lse float32 [Hq, total_q] or None.");
  m.def("backward_varlen", &backward_varlen_py, "q"_a, "k"_a, "v"_a, "o"_a, "lse"_a, "dout"_a,
        "dq"_a, "dk"_a, "dv"_a, "cu_seqlens_q"_a, "cu_seqlens_k"_a, "max_seqlen_q"_a,
        "max_seqlen_k"_a, "options"_a, "stream"_a = 0, "uint16_is_bf16"_a = false,
        "Gradients of forward_varlen with the same options, written into dq, dk, dv.");
}

}  // namespace flashpp::python
