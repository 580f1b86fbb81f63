// The fields that the forward's and the backward's kernel parameters (forward_params.hpp,
// backward_params.hpp) share, filled in one place by both dispatchers: the tensors every pass
// reads (q, k, v, o and their row strides) and what the problem says about them (lengths, heads,
// head dim, scale, softcap, mask, dropout). Host code only.
#pragma once

#include "../../api/problem.hpp"
#include "row_strides.hpp"

namespace flashpp::cuda {

template <typename Params>
void fill_problem_fields(Params& p, const detail::Problem& pr) {
  p.q_len = pr.Nq;
  p.k_len = pr.Nk;
  p.q_heads = pr.Hq;
  p.heads_per_kv = pr.Hkv > 0 ? pr.heads_per_kv() : 1;
  p.head_dim = static_cast<decltype(p.head_dim)>(pr.D);
  p.scale = pr.scale;
  p.scale_log2 = static_cast<float>(static_cast<double>(pr.scale) * 1.4426950408889634);  // log2(e)
  p.softcap = pr.softcap;
  p.mask = pr.mask;
  p.dropout = pr.dropout;
}

// A [B, N, H, *] tensor of the parameters: its data pointer and row strides.
template <typename Pointer, typename View>
void set_tensor(Pointer& data, RowStrides& strides, const View& view) {
  data = view.data;
  strides = row_strides(view);
}

// Args: detail::ForwardArgs or detail::BackwardArgs (their q, k, v, o views).
template <typename Params, typename Args>
void fill_qkvo(Params& p, const Args& a) {
  set_tensor(p.q, p.q_strides, a.q);
  set_tensor(p.k, p.k_strides, a.k);
  set_tensor(p.v, p.v_strides, a.v);
  set_tensor(p.o, p.o_strides, a.o);
}

}  // namespace flashpp::cuda
