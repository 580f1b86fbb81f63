// The C++ ring API (include/flashpp/ring.hpp) on every GPU of this machine, in one process:
// ncclCommInitAll over the devices, one thread per rank. Each case runs ring_forward and
// ring_backward on the zigzag (causal) or plain slices of a random sequence and compares o, lse,
// dq, dk, dv with single-GPU flashpp::forward/backward on the whole sequence (device 0).
// Prints one line per case and "ring_cpp: N passed, M failed". Built with -DFLASHPP_RING_CHECK=ON
// where NCCL is found; run by tools/ring_gpu_check.sh.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/half_convert.hpp"
#include "distributed/ring_schedule.hpp"
#include "flashpp/flashpp.hpp"
#include "flashpp/ring.hpp"

namespace {

#define CHECK_CUDA(x)                                                                         \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(2);                                                                           \
    }                                                                                         \
  } while (0)
#define CHECK_NCCL(x)                                                                          \
  do {                                                                                         \
    ncclResult_t r_ = (x);                                                                     \
    if (r_ != ncclSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, ncclGetErrorString(r_)); \
      std::exit(2);                                                                            \
    }                                                                                          \
  } while (0)

using flashpp::DType;
using u16 = std::uint16_t;

struct Case {
  bool causal;
  int Hq, Hkv;
  DType dtype;
  bool serial = false;  // FLASHPP_RING_OVERLAP=0: the ring without overlap, same results
};

u16 to_storage(float x, DType dt) {
  return dt == DType::bf16 ? flashpp::detail::float_to_bf16(x) : flashpp::detail::float_to_half(x);
}
float to_float(u16 x, DType dt) {
  return dt == DType::bf16 ? flashpp::detail::bf16_to_float(x) : flashpp::detail::half_to_float(x);
}

template <typename T>
T* upload(const std::vector<T>& h) {
  T* d = nullptr;
  CHECK_CUDA(cudaMalloc(&d, h.size() * sizeof(T) + 16));
  CHECK_CUDA(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}
template <typename T>
std::vector<T> download(const T* d, std::size_t n) {
  std::vector<T> h(n);
  CHECK_CUDA(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

// Rows of the given global positions: x is [B, N, H, D] (row = one (b, n) pair, H*D values).
std::vector<u16> gather_rows(const std::vector<u16>& x, int B, int N, int HD,
                             const std::vector<std::int64_t>& pos) {
  std::vector<u16> out;
  out.reserve(std::size_t(B) * pos.size() * HD);
  for (int b = 0; b < B; ++b)
    for (std::int64_t p : pos)
      out.insert(out.end(), x.begin() + (std::int64_t(b) * N + p) * HD,
                 x.begin() + (std::int64_t(b) * N + p + 1) * HD);
  return out;
}

double rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double d = double(got[i]) - double(want[i]);
    num += d * d;
    den += double(want[i]) * double(want[i]);
  }
  return std::sqrt(num / (den > 0 ? den : 1e-300));
}

bool run_case(const Case& c, int world, const std::vector<ncclComm_t>& comms) {
  const int B = 2, D = 128, chunk = 192;
  const int n = 2 * chunk, N = n * world;
  const DType dt = c.dtype;
  std::mt19937 gen(1234 + c.Hq * 7 + c.causal);
  std::normal_distribution<float> normal;
  auto make = [&](int H) {
    std::vector<u16> v(std::size_t(B) * N * H * D);
    for (auto& x : v) x = to_storage(normal(gen), dt);
    return v;
  };
  const auto q = make(c.Hq), k = make(c.Hkv), v = make(c.Hkv), dout = make(c.Hq);

  // Single GPU, whole sequence (device 0).
  CHECK_CUDA(cudaSetDevice(0));
  const flashpp::Device dev0{flashpp::DeviceType::cuda, 0};
  u16 *dq_ = upload(q), *dk_ = upload(k), *dv_ = upload(v), *ddo = upload(dout);
  u16 *dO, *dgq, *dgk, *dgv;
  float* dL;
  CHECK_CUDA(cudaMalloc(&dO, q.size() * 2));
  CHECK_CUDA(cudaMalloc(&dgq, q.size() * 2));
  CHECK_CUDA(cudaMalloc(&dgk, k.size() * 2));
  CHECK_CUDA(cudaMalloc(&dgv, k.size() * 2));
  CHECK_CUDA(cudaMalloc(&dL, std::size_t(B) * c.Hq * N * 4));
  auto bnhd = [&](void* p, int NN, int H, flashpp::Device d) {
    return flashpp::make_bnhd(p, dt, B, NN, H, D, d);
  };
  flashpp::Options opt;
  opt.causal = c.causal;
  flashpp::forward(bnhd(dq_, N, c.Hq, dev0), bnhd(dk_, N, c.Hkv, dev0), bnhd(dv_, N, c.Hkv, dev0),
                   bnhd(dO, N, c.Hq, dev0), flashpp::make_lse(dL, B, c.Hq, N, dev0), opt);
  flashpp::backward(bnhd(dq_, N, c.Hq, dev0), bnhd(dk_, N, c.Hkv, dev0), bnhd(dv_, N, c.Hkv, dev0),
                    bnhd(dO, N, c.Hq, dev0), flashpp::make_lse(dL, B, c.Hq, N, dev0),
                    bnhd(ddo, N, c.Hq, dev0), bnhd(dgq, N, c.Hq, dev0), bnhd(dgk, N, c.Hkv, dev0),
                    bnhd(dgv, N, c.Hkv, dev0), opt);
  CHECK_CUDA(cudaDeviceSynchronize());
  const auto ref_o = download(dO, q.size()), ref_dq = download(dgq, q.size()),
             ref_dk = download(dgk, k.size()), ref_dv = download(dgv, k.size());
  const auto ref_lse = download(dL, std::size_t(B) * c.Hq * N);
  for (void* p : {(void*)dq_, (void*)dk_, (void*)dv_, (void*)ddo, (void*)dO, (void*)dgq,
                  (void*)dgk, (void*)dgv, (void*)dL})
    CHECK_CUDA(cudaFree(p));

  // The ring: one thread per rank.
  std::vector<std::vector<std::int64_t>> pos(world);
  for (int r = 0; r < world; ++r)
    for (int i = 0; i < n; ++i)
      pos[r].push_back(c.causal ? flashpp::ring_detail::zigzag_position(world, r, n, i)
                                : std::int64_t(r) * n + i);
  std::vector<std::vector<float>> got(5 * world);
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        CHECK_CUDA(cudaSetDevice(r));
        const flashpp::Device dev{flashpp::DeviceType::cuda, r};
        cudaStream_t stream;
        CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        const auto lq = gather_rows(q, B, N, c.Hq * D, pos[r]);
        const auto lk = gather_rows(k, B, N, c.Hkv * D, pos[r]);
        const auto lv = gather_rows(v, B, N, c.Hkv * D, pos[r]);
        const auto ldo = gather_rows(dout, B, N, c.Hq * D, pos[r]);
        u16 *pq = upload(lq), *pk = upload(lk), *pv = upload(lv), *pdo = upload(ldo);
        u16 *po, *pgq, *pgk, *pgv;
        float* pl;
        CHECK_CUDA(cudaMalloc(&po, lq.size() * 2));
        CHECK_CUDA(cudaMalloc(&pgq, lq.size() * 2));
        CHECK_CUDA(cudaMalloc(&pgk, lk.size() * 2));
        CHECK_CUDA(cudaMalloc(&pgv, lk.size() * 2));
        CHECK_CUDA(cudaMalloc(&pl, std::size_t(B) * c.Hq * n * 4));
        flashpp::RingOptions ro;
        ro.causal = c.causal;
        const auto Q = bnhd(pq, n, c.Hq, dev), K = bnhd(pk, n, c.Hkv, dev),
                   V = bnhd(pv, n, c.Hkv, dev), O = bnhd(po, n, c.Hq, dev);
        const auto L = flashpp::make_lse(pl, B, c.Hq, n, dev);
        flashpp::ring_forward(Q, K, V, O, L, ro, comms[r], stream);
        flashpp::ring_backward(Q, K, V, O, L, bnhd(pdo, n, c.Hq, dev), bnhd(pgq, n, c.Hq, dev),
                               bnhd(pgk, n, c.Hkv, dev), bnhd(pgv, n, c.Hkv, dev), ro, comms[r],
                               stream);
        CHECK_CUDA(cudaStreamSynchronize(stream));
        auto widen = [&](const std::vector<u16>& h) {
          std::vector<float> f(h.size());
          for (std::size_t i = 0; i < h.size(); ++i) f[i] = to_float(h[i], dt);
          return f;
        };
        got[5 * r + 0] = widen(download(po, lq.size()));
        got[5 * r + 1] = download(pl, std::size_t(B) * c.Hq * n);
        got[5 * r + 2] = widen(download(pgq, lq.size()));
        got[5 * r + 3] = widen(download(pgk, lk.size()));
        got[5 * r + 4] = widen(download(pgv, lk.size()));
        for (void* p : {(void*)pq, (void*)pk, (void*)pv, (void*)pdo, (void*)po, (void*)pgq,
                        (void*)pgk, (void*)pgv, (void*)pl})
          CHECK_CUDA(cudaFree(p));
        CHECK_CUDA(cudaStreamDestroy(stream));
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    if (!errors[r].empty()) {
      std::printf("ring_cpp rank %d: error: %s\n", r, errors[r].c_str());
      return false;
    }
  }
  // References in the ranks' order.
  auto widen_rows = [&](const std::vector<u16>& x, int H, int r) {
    const auto rows = gather_rows(x, B, N, H * D, pos[r]);
    std::vector<float> f(rows.size());
    for (std::size_t i = 0; i < rows.size(); ++i) f[i] = to_float(rows[i], dt);
    return f;
  };
  double err[5] = {0, 0, 0, 0, 0};
  for (int r = 0; r < world; ++r) {
    std::vector<float> lse_r;
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < c.Hq; ++h)
        for (std::int64_t p : pos[r]) lse_r.push_back(ref_lse[(std::size_t(b) * c.Hq + h) * N + p]);
    const std::vector<float> want[5] = {widen_rows(ref_o, c.Hq, r), lse_r,
                                        widen_rows(ref_dq, c.Hq, r), widen_rows(ref_dk, c.Hkv, r),
                                        widen_rows(ref_dv, c.Hkv, r)};
    for (int t = 0; t < 5; ++t) err[t] = std::max(err[t], rel_err(got[5 * r + t], want[t]));
  }
  const double tol = dt == DType::bf16 ? 2e-2 : 5e-3;
  const bool ok = err[0] < tol && err[1] < 1e-4 && err[2] < tol && err[3] < tol && err[4] < tol;
  std::printf("ring_cpp W=%d B=%d N=%d Hq=%d Hkv=%d D=%d %s causal=%d%s: rel err o %.2e lse %.2e "
              "dq %.2e dk %.2e dv %.2e (tol %.0e) %s\n",
              world, B, N, c.Hq, c.Hkv, D, dt == DType::bf16 ? "bf16" : "fp16", int(c.causal),
              c.serial ? " FLASHPP_RING_OVERLAP=0" : "",
              err[0], err[1], err[2], err[3], err[4], tol, ok ? "PASS" : "FAIL");
  return ok;
}

}  // namespace

int main() {
  int ndev = 0;
  CHECK_CUDA(cudaGetDeviceCount(&ndev));
  if (ndev < 2) {
    std::printf("ring_cpp: needs at least 2 GPUs, found %d\n", ndev);
    return 1;
  }
  int version = 0;
  CHECK_NCCL(ncclGetVersion(&version));
  std::printf("ring_cpp: %d GPUs, NCCL %d\n", ndev, version);
  std::vector<ncclComm_t> comms(ndev);
  std::vector<int> devs(ndev);
  for (int i = 0; i < ndev; ++i) devs[i] = i;
  CHECK_NCCL(ncclCommInitAll(comms.data(), ndev, devs.data()));
  const Case cases[] = {{false, 8, 8, DType::bf16}, {true, 8, 8, DType::bf16},
                        {true, 8, 2, DType::bf16}, {false, 8, 2, DType::f16},
                        {true, 16, 4, DType::f16}, {true, 8, 2, DType::bf16, true}};
  int passed = 0, failed = 0;
  for (const Case& c : cases) {
    // The diagnostic knob is read by ring_forward/ring_backward at each call (src/distributed/
    // ring.cpp); set here, before the rank threads start, and cleared after they end.
    if (c.serial) setenv("FLASHPP_RING_OVERLAP", "0", 1);
    (run_case(c, ndev, comms) ? passed : failed)++;
    if (c.serial) unsetenv("FLASHPP_RING_OVERLAP");
  }
  for (auto comm : comms) ncclCommDestroy(comm);
  std::printf("ring_cpp: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
