// Ring attention over NCCL (include/flashpp/ring.hpp): the schedule of ring_schedule.hpp, one
// flashpp::forward/backward call per step on the block held, the transfers of the next block
// on a second stream issued before that call, float32 merges and accumulators
// (ring_kernels.cu). docs/ring-attention.md walks through it.
#include "flashpp/ring.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "distributed/ring_kernels.hpp"
#include "distributed/ring_schedule.hpp"

namespace flashpp {
namespace {

using namespace ring_detail;

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw Error(ErrorCode::backend_failure,
                std::string("flashpp ring: ") + what + ": " + cudaGetErrorString(e));
  }
}

void nccl_check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) {
    throw Error(ErrorCode::backend_failure,
                std::string("flashpp ring: ") + what + ": " + ncclGetErrorString(r));
  }
}

[[noreturn]] void invalid(const char* call, const std::string& what) {
  throw Error(ErrorCode::invalid_argument, std::string(call) + ": " + what);
}

// Stream-ordered scratch memory, freed (stream-ordered) when it goes out of scope.
class Scratch {
 public:
  Scratch(std::size_t bytes, cudaStream_t stream) : stream_(stream) {
    if (bytes) cuda_check(cudaMallocAsync(&data_, bytes, stream), "cudaMallocAsync");
  }
  ~Scratch() {
    if (data_) cudaFreeAsync(data_, stream_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <typename T = void>
  T* get() const { return static_cast<T*>(data_); }

 private:
  void* data_ = nullptr;
  cudaStream_t stream_;
};

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    cuda_check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) cuda_check(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }

 private:
  int previous_ = 0;
};

// Diagnostics (docs/ring-attention.md "Diagnostics"), read at each ring_forward/ring_backward
// call; unset, the ring as documented:
//   FLASHPP_RING_TRANSFERS=skip  no NCCL calls (the events and stream waits stay): every step on
//                                the rank's own K/V and dK/dV accumulators, "compute alone"
//                                (results wrong for W > 1);
//   FLASHPP_RING_OVERLAP=0       each transfer waited for right after it is issued, before the
//                                compute of its step: the ring without overlap (same results).
struct Knobs {
  bool transfers = true, overlap = true;
};

Knobs knobs_from_env() {
  auto is = [](const char* name, const char* value) {
    const char* env = std::getenv(name);
    return env != nullptr && std::strcmp(env, value) == 0;
  };
  Knobs k;
  k.transfers = !is("FLASHPP_RING_TRANSFERS", "skip");
  k.overlap = !is("FLASHPP_RING_OVERLAP", "0");
  return k;
}

// The ring of `comm`: a high-priority transfer stream, ordered against the compute stream by
// events (no host synchronisation).
class RingLinks {
 public:
  RingLinks(ncclComm_t comm, cudaStream_t stream)
      : knobs_(knobs_from_env()), comm_(comm), stream_(stream) {
    nccl_check(ncclCommCount(comm, &world), "ncclCommCount");
    nccl_check(ncclCommUserRank(comm, &rank), "ncclCommUserRank");
    int lowest = 0, highest = 0;
    cuda_check(cudaDeviceGetStreamPriorityRange(&lowest, &highest), "stream priorities");
    cuda_check(cudaStreamCreateWithPriority(&transfer_, cudaStreamNonBlocking, highest),
               "cudaStreamCreateWithPriority");
    cuda_check(cudaEventCreateWithFlags(&compute_done_, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~RingLinks() {
    // Work still queued finishes; the handles are released after it.
    cudaEventDestroy(compute_done_);
    cudaStreamDestroy(transfer_);
  }
  RingLinks(const RingLinks&) = delete;
  RingLinks& operator=(const RingLinks&) = delete;

  // Sends `bytes` of `send` to rank+1 and receives as many into `recv` from rank-1, after the
  // compute stream's work so far; `arrived` is recorded on the transfer stream after both.
  // Knobs: without transfers only the events and waits; without overlap the compute stream
  // waits for `arrived` at once. The caller swaps its buffers only when transfers().
  void exchange(const void* send, void* recv, std::size_t bytes, cudaEvent_t arrived) {
    cuda_check(cudaEventRecord(compute_done_, stream_), "cudaEventRecord");
    cuda_check(cudaStreamWaitEvent(transfer_, compute_done_, 0), "cudaStreamWaitEvent");
    if (knobs_.transfers) {
      nccl_check(ncclGroupStart(), "ncclGroupStart");
      nccl_check(ncclSend(send, bytes, ncclUint8, (rank + 1) % world, comm_, transfer_),
                 "ncclSend");
      nccl_check(ncclRecv(recv, bytes, ncclUint8, (rank + world - 1) % world, comm_, transfer_),
                 "ncclRecv");
      nccl_check(ncclGroupEnd(), "ncclGroupEnd");
    }
    cuda_check(cudaEventRecord(arrived, transfer_), "cudaEventRecord");
    if (!knobs_.overlap) wait(arrived);
  }
  void wait(cudaEvent_t arrived) {
    cuda_check(cudaStreamWaitEvent(stream_, arrived, 0), "cudaStreamWaitEvent");
  }

  bool transfers() const { return knobs_.transfers; }

  int world = 1, rank = 0;

 private:
  Knobs knobs_;
  ncclComm_t comm_;
  cudaStream_t stream_;
  cudaStream_t transfer_ = nullptr;
  cudaEvent_t compute_done_ = nullptr;
};

class Event {
 public:
  Event() { cuda_check(cudaEventCreateWithFlags(&e_, cudaEventDisableTiming), "cudaEventCreate"); }
  ~Event() { cudaEventDestroy(e_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  operator cudaEvent_t() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

Dims4 sizes_of(const TensorView& t) { return {{t.sizes[0], t.sizes[1], t.sizes[2], t.sizes[3]}}; }
Dims4 strides_of(const TensorView& t) {
  return {{t.strides[0], t.strides[1], t.strides[2], t.strides[3]}};
}

// Rows [r0, r1) of dim 1 of a [B, N, H, D] view.
TensorView rows(TensorView t, std::int64_t r0, std::int64_t r1) {
  t.data = static_cast<char*>(t.data) + r0 * t.strides[1] * std::int64_t(element_size(t.dtype));
  t.sizes[1] = r1 - r0;
  return t;
}

struct Shape {
  std::int64_t B, n, Hq, Hkv, D;
  DType dtype;
  Device device;
  std::size_t q_elems() const { return std::size_t(B * n * Hq * D); }
  std::size_t kv_elems() const { return std::size_t(B * n * Hkv * D); }
};

void check_same(const char* call, const char* name, const TensorView& t, const TensorView& like,
                const char* like_name) {
  bool ok = t.rank == 4 && t.dtype == like.dtype && t.device == like.device;
  for (int d = 0; ok && d < 4; ++d) ok = t.sizes[d] == like.sizes[d];
  if (!ok) {
    invalid(call, std::string(name) + ": expected the shape, dtype and device of " + like_name);
  }
}

Shape validate(const char* call, const TensorView& q, const TensorView& k, const TensorView& v,
               const TensorView& o, const TensorView& lse, const RingOptions& options,
               int world) {
  if (q.rank != 4 || k.rank != 4 || v.rank != 4) invalid(call, "q, k, v: expected [B, n, H, D]");
  if (q.dtype != DType::f16 && q.dtype != DType::bf16) invalid(call, "q: expected fp16 or bf16");
  if (q.device.type != DeviceType::cuda) invalid(call, "q: expected a CUDA tensor");
  check_same(call, "v", v, k, "k");
  if (k.sizes[0] != q.sizes[0] || k.sizes[1] != q.sizes[1] || k.sizes[3] != q.sizes[3] ||
      k.dtype != q.dtype || !(k.device == q.device)) {
    invalid(call, "k: expected q's B, n, D, dtype and device");
  }
  check_same(call, "o", o, q, "q");
  if (k.sizes[2] <= 0 || q.sizes[2] % k.sizes[2]) {
    invalid(call, "q, k: the query head count must be a multiple of the kv head count");
  }
  if (options.causal && q.sizes[1] % 2) {
    invalid(call, "q: causal ring attention takes the zigzag split (two chunks per rank): the "
                  "local length n must be even, got " + std::to_string(q.sizes[1]));
  }
  const Shape s{q.sizes[0], q.sizes[1], q.sizes[2], k.sizes[2], q.sizes[3], q.dtype, q.device};
  if (lse.rank != 3 || lse.dtype != DType::f32 || lse.sizes[0] != s.B || lse.sizes[1] != s.Hq ||
      lse.sizes[2] != s.n || lse.strides[2] != 1 || lse.strides[1] != s.n ||
      lse.strides[0] != s.Hq * s.n || !(lse.device == q.device)) {
    invalid(call, "lse: expected a contiguous float32 [B, Hq, n] tensor on q's device");
  }
  if (world < 1) invalid(call, "comm: no ranks");
  return s;
}

Options block_options(const RingOptions& r, bool causal) {
  Options o;
  o.softmax_scale = r.softmax_scale;
  o.causal = causal;
  o.softcap = r.softcap;
  o.deterministic = r.deterministic;
  o.backend = Backend::cuda;
  return o;
}

TensorView contiguous(void* data, const Shape& s, std::int64_t N, std::int64_t H) {
  return make_bnhd(data, s.dtype, s.B, N, H, s.D, s.device);
}

}  // namespace

void ring_forward(const TensorView& q, const TensorView& k, const TensorView& v,
                  const TensorView& o, const TensorView& lse, const RingOptions& options,
                  ncclComm_t comm, cudaStream_t stream) {
  constexpr const char* call = "flashpp::ring_forward";
  if (q.device.type != DeviceType::cuda) invalid(call, "q: expected a CUDA tensor");
  DeviceGuard guard(q.device.index);  // the transfer stream is created on q's device
  RingLinks ring(comm, stream);
  const Shape s = validate(call, q, k, v, o, lse, options, ring.world);
  const std::size_t es = element_size(s.dtype);
  const std::size_t kv_bytes = 2 * s.kv_elems() * es;  // K then V, one send buffer

  Scratch kv0(kv_bytes, stream), kv1(kv_bytes, stream);
  // The kernels' scratch: the largest any step needs (asked with the views they will get).
  std::size_t ws_bytes = 0;
  for (int step = 0; step < ring.world; ++step) {
    const Piece p = ring_piece(ring.world, ring.rank, step, s.n, options.causal);
    const TensorView kb = rows(contiguous(kv0.get(), s, s.n, s.Hkv), p.k0, p.k1);
    ws_bytes = std::max(ws_bytes, forward_workspace_size(rows(q, p.q0, p.q1), kb, kb,
                                                         block_options(options, p.causal)));
  }
  Scratch o_acc(s.q_elems() * sizeof(float), stream);
  Scratch o_blk(s.q_elems() * es, stream);
  Scratch lse_blk(std::size_t(s.B * s.Hq * s.n) * sizeof(float), stream);
  Scratch ws(ws_bytes, stream);
  Event kv_arrived;

  char* cur = kv0.get<char>();
  char* next = kv1.get<char>();
  launch_pack(k.data, strides_of(k), cur, sizes_of(k), stream);
  launch_pack(v.data, strides_of(v), cur + s.kv_elems() * es, sizes_of(v), stream);
  float* lse_acc = static_cast<float*>(lse.data);  // contiguous [B, Hq, n]: the accumulator

  for (int step = 0; step < ring.world; ++step) {
    const bool more = step + 1 < ring.world;
    if (more) ring.exchange(cur, next, kv_bytes, kv_arrived);  // before this step's compute
    const Piece p = ring_piece(ring.world, ring.rank, step, s.n, options.causal);
    const std::int64_t m = p.q1 - p.q0;
    const TensorView kb = rows(contiguous(cur, s, s.n, s.Hkv), p.k0, p.k1);
    const TensorView vb = rows(contiguous(cur + s.kv_elems() * es, s, s.n, s.Hkv), p.k0, p.k1);
    const TensorView ob = contiguous(o_blk.get(), s, m, s.Hq);
    const TensorView lb = make_lse(lse_blk.get<float>(), s.B, s.Hq, m, s.device);
    forward(rows(q, p.q0, p.q1), kb, vb, ob, lb, block_options(options, p.causal), stream,
            Workspace{ws.get(), ws_bytes});
    launch_merge(o_acc.get<float>(), lse_acc, s.n, p.q0, ob.data, lse_blk.get<float>(), s.dtype,
                 sizes_of(ob), step == 0, stream);
    if (more) {
      ring.wait(kv_arrived);
      if (ring.transfers()) std::swap(cur, next);
    }
  }
  launch_store(o_acc.get<float>(), o.data, s.dtype, sizes_of(o), strides_of(o), stream);
}

void ring_backward(const TensorView& q, const TensorView& k, const TensorView& v,
                   const TensorView& o, const TensorView& lse, const TensorView& dout,
                   const TensorView& dq, const TensorView& dk, const TensorView& dv,
                   const RingOptions& options, ncclComm_t comm, cudaStream_t stream) {
  constexpr const char* call = "flashpp::ring_backward";
  if (q.device.type != DeviceType::cuda) invalid(call, "q: expected a CUDA tensor");
  DeviceGuard guard(q.device.index);  // the transfer stream is created on q's device
  RingLinks ring(comm, stream);
  const Shape s = validate(call, q, k, v, o, lse, options, ring.world);
  check_same(call, "dout", dout, q, "q");
  check_same(call, "dq", dq, q, "q");
  check_same(call, "dk", dk, k, "k");
  check_same(call, "dv", dv, k, "k");
  const std::size_t es = element_size(s.dtype);
  const std::size_t kv_bytes = 2 * s.kv_elems() * es;
  const std::size_t dkv_bytes = 2 * s.kv_elems() * sizeof(float);  // float32 dK then dV
  const std::int64_t half = s.n / 2;

  Scratch kv0(kv_bytes, stream), kv1(kv_bytes, stream);
  std::size_t ws_bytes = 0;
  for (int step = 0; step < ring.world; ++step) {
    const Piece p = ring_piece(ring.world, ring.rank, step, s.n, options.causal);
    const TensorView kb = rows(contiguous(kv0.get(), s, s.n, s.Hkv), p.k0, p.k1);
    ws_bytes = std::max(ws_bytes, backward_workspace_size(rows(q, p.q0, p.q1), kb, kb,
                                                          block_options(options, p.causal)));
  }
  Scratch dkv0(dkv_bytes, stream), dkv1(dkv_bytes, stream);
  Scratch dq_acc(s.q_elems() * sizeof(float), stream);
  Scratch dq_blk(s.q_elems() * es, stream);
  Scratch dk_blk(s.kv_elems() * es, stream), dv_blk(s.kv_elems() * es, stream);
  Scratch lse_half(options.causal ? std::size_t(s.B * s.Hq * half) * sizeof(float) : 0, stream);
  Scratch ws(ws_bytes, stream);
  Event kv_arrived, dkv_arrived;

  char* cur = kv0.get<char>();
  char* next = kv1.get<char>();
  float* dkv_cur = dkv0.get<float>();
  float* dkv_next = dkv1.get<float>();
  launch_pack(k.data, strides_of(k), cur, sizes_of(k), stream);
  launch_pack(v.data, strides_of(v), cur + s.kv_elems() * es, sizes_of(v), stream);
  if (options.causal && half > 0) {  // the second chunk's lse rows, contiguous
    cuda_check(cudaMemcpy2DAsync(lse_half.get(), half * sizeof(float),
                                 static_cast<const float*>(lse.data) + half, s.n * sizeof(float),
                                 half * sizeof(float), s.B * s.Hq, cudaMemcpyDeviceToDevice,
                                 stream),
               "cudaMemcpy2DAsync");
  }

  for (int step = 0; step < ring.world; ++step) {
    const bool more = step + 1 < ring.world;
    if (more) ring.exchange(cur, next, kv_bytes, kv_arrived);
    const Piece p = ring_piece(ring.world, ring.rank, step, s.n, options.causal);
    const std::int64_t m = p.q1 - p.q0, kn = p.k1 - p.k0;
    const TensorView kb = rows(contiguous(cur, s, s.n, s.Hkv), p.k0, p.k1);
    const TensorView vb = rows(contiguous(cur + s.kv_elems() * es, s, s.n, s.Hkv), p.k0, p.k1);
    const TensorView lb = m == s.n ? lse : make_lse(lse_half.get<float>(), s.B, s.Hq, m, s.device);
    const TensorView dqb = contiguous(dq_blk.get(), s, m, s.Hq);
    const TensorView dkb = contiguous(dk_blk.get(), s, kn, s.Hkv);
    const TensorView dvb = contiguous(dv_blk.get(), s, kn, s.Hkv);
    // The final o and lse: every block's P = exp(S - lse) is its slice of the whole softmax,
    // and delta = rowsum(dout * o) is the whole row's.
    backward(rows(q, p.q0, p.q1), kb, vb, rows(o, p.q0, p.q1), lb, rows(dout, p.q0, p.q1), dqb,
             dkb, dvb, block_options(options, p.causal), stream, Workspace{ws.get(), ws_bytes});
    launch_accumulate(dq_acc.get<float>(), s.n, p.q0, dqb.data, s.dtype, sizes_of(dqb), step == 0,
                      stream);
    if (step > 0) ring.wait(dkv_arrived);  // the accumulators of the block held
    launch_accumulate(dkv_cur, s.n, p.k0, dkb.data, s.dtype, sizes_of(dkb), step == 0, stream);
    launch_accumulate(dkv_cur + s.kv_elems(), s.n, p.k0, dvb.data, s.dtype, sizes_of(dvb),
                      step == 0, stream);
    if (ring.world > 1) {  // on with the block (after the last step: home)
      ring.exchange(dkv_cur, dkv_next, dkv_bytes, dkv_arrived);
      if (ring.transfers()) std::swap(dkv_cur, dkv_next);
    }
    if (more) {
      ring.wait(kv_arrived);
      if (ring.transfers()) std::swap(cur, next);
    }
  }
  if (ring.world > 1) ring.wait(dkv_arrived);
  launch_store(dq_acc.get<float>(), dq.data, s.dtype, sizes_of(dq), strides_of(dq), stream);
  launch_store(dkv_cur, dk.data, s.dtype, sizes_of(dk), strides_of(dk), stream);
  launch_store(dkv_cur + s.kv_elems(), dv.data, s.dtype, sizes_of(dv), strides_of(dv), stream);
}

}  // namespace flashpp
