// The CUDA backward's host side (backward.hpp): what is supported, how much workspace, which
// kernel family runs (sm80/backward/, sm90/backward/), and the parameters every family takes
// (common/backward_params.hpp), with the workspace laid out by common/backward_workspace.hpp.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>

#include "backward.hpp"
#include "common/backward_params.hpp"
#include "common/backward_workspace.hpp"
#include "common/check_cuda.hpp"
#include "common/problem_fields.hpp"
#include "common/poison.cuh"
#include "families.hpp"
#include "instances.hpp"

namespace flashpp::cuda {
namespace {

// The 16-byte copies need 16-byte aligned rows: base pointers and row/head/batch strides in
// multiples of 8 elements (a dimension of size 1 may have any stride).
std::string misaligned_tensor(const detail::BackwardArgs& a) {
  const std::pair<const char*, const TensorView*> tensors[] = {
      {"q", &a.q},       {"k", &a.k},   {"v", &a.v},   {"o", &a.o}, {"dout", &a.dout},
      {"dq", &a.dq},     {"dk", &a.dk}, {"dv", &a.dv}};
  for (const auto& [name, t] : tensors) {
    bool aligned = reinterpret_cast<std::uintptr_t>(t->data) % 16 == 0;
    for (int d = 0; d < 3; ++d) aligned = aligned && (t->sizes[d] <= 1 || t->strides[d] % 8 == 0);
    if (!aligned) return name;
  }
  return {};
}

// Why the sm90 family cannot run this backward (empty when it can): its device and build, and
// what it covers so far (the kernel head dims of Sm90BackwardHeadDims in instances.hpp, 64, 96,
// 128, 192 and 256, the deterministic mode up to 128, with or without dropout; no softcap: that
// runs on the sm80 family).
std::string sm90_backward_unsupported(const detail::Problem& pr, bool deterministic) {
  std::string reason = sm90_unavailable_reason(pr.device.index);
  if (!reason.empty()) return reason;
  if (!Sm90BackwardHeadDims::contains(kernel_head_dim(pr.D))) {
    return "the sm90 backward covers kernel head dims " + Sm90BackwardHeadDims::text() +
           " (a head dim rounds up to the next of " + Sm80BackwardHeadDims::text() + ")";
  }
  if (pr.softcap > 0.0f) return "the sm90 backward has no softcap yet";
  if (deterministic && !sm90_deterministic_head_dim(kernel_head_dim(pr.D))) {
    return "the sm90 backward's deterministic mode covers kernel head dims up to 128";
  }
  if (pr.B * pr.Hkv > 65535) return "batch * kv heads above 65535";
  return {};
}

// The backward's family. FLASHPP_CUDA_FAMILY=sm80 forces sm80 and =sm90 forces sm90 (an error
// where it does not apply); FLASHPP_SM90_BACKWARD=0 turns the sm90 backward off (=1, once the
// deterministic mode's opt-in, is the default now). Otherwise sm90 runs wherever it applies: it
// measured faster than sm80 on the H100 at kernel head dims 64 (+17-20%, run 28 in
// BENCHMARKS.md) and 128 (+15-20% since the block's dQ, run 30), and on the H200 at 96
// (+71-78%, session 15 run 16).
// The workspace query and the run both ask, so they agree.
bool use_sm90_backward(const detail::Problem& pr, bool deterministic) {
  const std::string requested = requested_family();
  if (requested == "sm80") return false;
  const std::string why_not = sm90_backward_unsupported(pr, deterministic);
  if (requested == "sm90") {
    if (!why_not.empty()) throw Error(ErrorCode::unsupported, "FLASHPP_CUDA_FAMILY=sm90: " + why_not);
    return true;
  }
  if (!why_not.empty()) return false;
  const char* opt = std::getenv("FLASHPP_SM90_BACKWARD");
  if (opt != nullptr && std::string(opt) == "0") return false;
  // The deterministic mode too (since session 21): its ordered dQ additions measured +7..+12%
  // over the sm80 deterministic backward at D=64 and +41..+51% at D=128 (H100, session 21 run 5;
  // run 6, both dtypes and N=1024 too: +1..+14% and +21..+53%).
  return true;
}

BackwardParams make_params(const detail::BackwardArgs& a, bool sm90) {
  const detail::Problem& pr = a.problem;
  BackwardParams p;
  fill_qkvo(p, a);
  fill_problem_fields(p, pr);
  set_tensor(p.dout, p.dout_strides, a.dout);
  set_tensor(p.dq, p.dq_strides, a.dq);
  set_tensor(p.dk, p.dk_strides, a.dk);
  set_tensor(p.dv, p.dv_strides, a.dv);
  p.lse = static_cast<const float*>(a.lse.data);
  p.lse_stride_batch = a.lse.strides[0];
  p.lse_stride_head = a.lse.strides[1];
  p.lse_stride_row = a.lse.strides[2];
  p.batch = pr.B;
  p.kv_heads = pr.Hkv;

  const bool ordered_dq = a.deterministic && sm90;
  const WorkspaceLayout w = workspace_layout(pr.B, pr.Hq, pr.Nq, pr.Hkv, pr.Nk, pr.D,
                                             a.deterministic, ordered_dq);
  auto* base = static_cast<unsigned char*>(a.workspace.data);
  p.delta = reinterpret_cast<float*>(base + w.delta_offset);
  p.lse_log2 = reinterpret_cast<float*>(base + w.lse_offset);
  p.dq_accum = a.deterministic && !ordered_dq ? nullptr : reinterpret_cast<float*>(base + w.dq_accum_offset);
  if (ordered_dq) p.dq_turns = reinterpret_cast<int*>(base + w.semaphore_offset);
  p.rows_padded = w.rows_padded;
  p.accum_width = w.accum_width;
  if (!a.deterministic) {
    p.split_partials = reinterpret_cast<float*>(base + w.split_offset);
    p.split_capacity = w.split_capacity;
  }
  return p;
}

// Largest grid the kernels flatten into blockIdx.x.
constexpr std::int64_t kMaxBlocks = std::numeric_limits<std::int32_t>::max();

}  // namespace

std::string backward_unsupported_reason(const detail::Problem& p) {
  if (p.dtype != DType::f16 && p.dtype != DType::bf16) {
    return std::string("q: the CUDA backward supports f16 and bf16, got ") + to_string(p.dtype);
  }
  if (p.D % 8 != 0 || kernel_head_dim(p.D) == 0) {
    return "q: the CUDA backward supports head dims that are multiples of 8 up to 256, got " +
           std::to_string(p.D);
  }
  const std::int64_t main_blocks = (p.Nk + 63) / 64 * p.Hkv * p.B;
  const std::int64_t dq_blocks = (p.Nq + 63) / 64 * p.Hq * p.B;
  const std::int64_t prep_blocks = p.B * p.Hq * ((p.Nq + 127) / 128 * 128) / 64;
  const std::int64_t post_blocks = p.B * p.Hq * ((p.Nq + 15) / 16);
  if (main_blocks > kMaxBlocks || dq_blocks > kMaxBlocks || prep_blocks > kMaxBlocks ||
      post_blocks > kMaxBlocks) {
    return "q: the CUDA backward grid would exceed 2^31 - 1 blocks (B * H * N too large)";
  }
  return {};
}

std::size_t backward_scratch_bytes(const detail::Problem& p, bool deterministic) {
  if (p.B == 0 || p.Hq == 0) return 0;
  const bool ordered_dq = deterministic && use_sm90_backward(p, deterministic);
  return workspace_layout(p.B, p.Hq, p.Nq, p.Hkv, p.Nk, p.D, deterministic, ordered_dq)
      .total_bytes;
}

void run_backward(const detail::BackwardArgs& args) {
  const std::string bad = misaligned_tensor(args);
  if (!bad.empty()) {
    throw Error(ErrorCode::unsupported,
                "flashpp::backward: " + bad +
                    ": the CUDA backward needs 16-byte aligned data and strides that are "
                    "multiples of 8 elements");
  }
  const detail::Problem& pr = args.problem;
  if (pr.B == 0 || pr.Hq == 0) return;
  // delta, lse_log2 and dq_accum are read with 16-byte copies (cudaMalloc gives 256 bytes).
  if (reinterpret_cast<std::uintptr_t>(args.workspace.data) % 16 != 0) {
    throw Error(ErrorCode::unsupported,
                "flashpp::backward: workspace: the CUDA backward needs 16-byte aligned scratch");
  }
  const bool sm90 = use_sm90_backward(args.problem, args.deterministic);
  const BackwardParams p = make_params(args, sm90);
  const auto stream = static_cast<cudaStream_t>(args.stream);
  // Test builds: every workspace byte NaN first, so a read of an unwritten byte shows.
  poison_device_buffer(args.workspace.data, backward_scratch_bytes(pr, args.deterministic), stream);
  if (sm90) {
    sm90::run_backward(p, args, stream);
  } else {
    sm80::run_backward(p, args, stream);
  }
}

}  // namespace flashpp::cuda
