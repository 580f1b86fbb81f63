#include "runner.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

#include "device_memory.hpp"
#include "host_memory.hpp"
#include "workload.hpp"

namespace flashpp::bench {
namespace {

// CPU: the first call is warm-up; then 3 to 5 timed calls, as many as fit in about 2 s (only
// one when a call takes over 5 s), so that the standard grid stays near a minute on 2 cores.
constexpr int kCpuDefaultWarmup = 1;
constexpr int kCpuMinRepetitions = 3;
constexpr int kCpuMaxRepetitions = 5;
constexpr double kCpuTimedBudgetMs = 2000;
constexpr double kCpuLongCallMs = 5000;
// CUDA: several warm-up calls (clocks ramp, lazy module loading), then 10 timed calls.
constexpr int kCudaDefaultWarmup = 3;
constexpr int kCudaDefaultRepetitions = 10;
// CUDA: shapes whose tensors fit in L2 would be timed with warm caches; rotating through
// enough input sets to exceed a few L2s (50 MiB on H100) avoids that.
constexpr std::size_t kRotationBytes = std::size_t(256) << 20;
constexpr int kMaxInputSets = 8;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n == 0 ? 0 : n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// Milliseconds of one call: CUDA events on the default stream, or the host clock.
template <class Call>
double time_one(const Device& device, Call&& call, int rep) {
  if (device.type == DeviceType::cuda) {
    CudaEventTimer timer;
    timer.start();
    call(rep);
    timer.stop();
    return timer.milliseconds();
  }
  const auto start = std::chrono::steady_clock::now();
  call(rep);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// Warm-up calls, then the timed ones; call(rep) picks its input set from rep.
template <class Call>
std::vector<double> time_calls(const RunSettings& s, Call&& call) {
  const bool cuda = s.device.type == DeviceType::cuda;
  const int warmup = s.warmup.value_or(cuda ? kCudaDefaultWarmup : kCpuDefaultWarmup);
  int rep = 0;
  for (int i = 0; i < warmup; ++i) time_one(s.device, call, rep++);

  std::vector<double> times;
  double total = 0;
  for (;;) {
    if (s.repetitions) {
      if (int(times.size()) == *s.repetitions) break;
    } else if (cuda) {
      if (int(times.size()) == kCudaDefaultRepetitions) break;
    } else if (!times.empty()) {
      // Stop at the cap, or when one more call would overrun the budget (and the minimum is
      // reached, or calls are so long that one must do).
      const double next = total / double(times.size());
      const int count = int(times.size());
      const bool minimum_reached = count >= kCpuMinRepetitions || next > kCpuLongCallMs;
      if (count == kCpuMaxRepetitions || (minimum_reached && total + next > kCpuTimedBudgetMs))
        break;
    }
    const double ms = time_one(s.device, call, rep++);
    times.push_back(ms);
    total += ms;
  }
  return times;
}

// Memory a call takes beyond its inputs and outputs. CPU: growth of the peak resident set over
// the calls. CUDA: the drop of free device memory across the calls (memory kept after them).
class MemoryProbe {
 public:
  explicit MemoryProbe(const Device& device) : device_(device) {
    if (device.type == DeviceType::cpu) {
      available_ = reset_peak_rss();
      baseline_ = current_rss_bytes();
      available_ = available_ && baseline_ >= 0;
    } else {
      cuda_synchronize();
      baseline_ = std::int64_t(cuda_free_bytes());
    }
  }
  std::int64_t extra_bytes() const {
    if (device_.type == DeviceType::cpu) {
      const std::int64_t peak = peak_rss_bytes();
      return available_ && peak >= 0 ? std::max<std::int64_t>(0, peak - baseline_) : -1;
    }
    cuda_synchronize();
    return std::max<std::int64_t>(0, baseline_ - std::int64_t(cuda_free_bytes()));
  }

 private:
  Device device_;
  bool available_ = true;
  std::int64_t baseline_ = 0;
};

Options case_options(const Case& c) {
  Options o;
  o.causal = c.causal;
  o.alignment = c.alignment;
  return o;
}

Measurement blank_measurement(const Case& c, Mode direction, const FlopCount& flops, int sets) {
  Measurement m;
  m.shape = c;
  m.direction = direction;
  m.flops = direction == Mode::forward ? flops.forward : flops.backward;
  m.exact_pairs = flops.exact_pairs;
  m.input_sets = sets;
  return m;
}

void record_times(Measurement& m, const std::vector<double>& times) {
  m.repetitions = int(times.size());
  m.median_ms = median(times);
  m.min_ms = times.empty() ? 0 : *std::min_element(times.begin(), times.end());
}

// On CUDA the workspace is allocated here, outside the timing; on the CPU flashpp allocates it
// itself, so that it shows in the resident-set growth.
Buffer workspace_buffer(const Device& device, std::size_t bytes) {
  return device.type == DeviceType::cuda ? Buffer(device, bytes) : Buffer();
}

int input_set_count(const Case& c, const Device& device) {
  if (device.type != DeviceType::cuda) return 1;
  const double es = double(element_size(c.dtype));
  const double set_bytes = es * double(c.B * c.D) * double(c.Nq * c.Hq + 2 * c.Nk * c.Hkv) *
                           (c.mode == Mode::forward ? 1 : 2);
  if (set_bytes <= 0) return 1;
  return std::clamp(int(std::ceil(double(kRotationBytes) / set_bytes)), 1, kMaxInputSets);
}

}  // namespace

std::vector<Measurement> run_case(const Case& c, const RunSettings& settings,
                                  ProgressTicker& progress) {
  const Device device = settings.device;
  const FlopCount flops = count_flops(c);
  const Options options = case_options(c);
  const int sets = input_set_count(c, device);
  const bool want_forward = c.mode != Mode::backward, want_backward = c.mode != Mode::forward;

  progress.set_stage("making inputs");
  const HostInputs host_inputs = random_inputs(c, 1);  // set 0: kept for the check
  std::vector<AttentionTensors> tensors;
  tensors.push_back(place_tensors(c, device, host_inputs));
  for (int s = 1; s < sets; ++s)
    tensors.push_back(place_tensors(c, device, random_inputs(c, 1 + s)));

  std::vector<Measurement> results;
  if (want_forward) {
    Measurement m = blank_measurement(c, Mode::forward, flops, sets);
    try {
      const AttentionTensors& t0 = tensors[0];
      m.workspace_bytes = forward_workspace_size(t0.Q, t0.K, t0.V, options);
      const Buffer ws = workspace_buffer(device, m.workspace_bytes);
      const Workspace workspace{ws.data(), ws.bytes()};
      auto call = [&](int rep) {
        const AttentionTensors& t = tensors[std::size_t(rep % sets)];
        forward(t.Q, t.K, t.V, t.O, t.L, options, nullptr, workspace);
      };
      progress.set_stage("timing forward");
      const MemoryProbe probe(device);
      record_times(m, time_calls(settings, call));
      m.extra_bytes = probe.extra_bytes();
      if (m.extra_bytes >= 0 && device.type == DeviceType::cuda) m.extra_bytes += ws.bytes();
      if (settings.check) {
        progress.set_stage("checking forward against the float64 reference");
        HostOutputs out;
        out.o = t0.o.download();
        out.lse = t0.lse.download();
        m.check = check_forward(c, host_inputs, out);
      }
    } catch (const std::exception& e) {
      m.error = e.what();
    }
    results.push_back(std::move(m));
  }

  if (want_backward) {
    Measurement m = blank_measurement(c, Mode::backward, flops, sets);
    try {
      // The backward consumes the forward's o and lse: one untimed forward per input set.
      progress.set_stage("forward for the backward");
      for (const AttentionTensors& t : tensors) forward(t.Q, t.K, t.V, t.O, t.L, options);
      const AttentionTensors& t0 = tensors[0];
      m.workspace_bytes = backward_workspace_size(t0.Q, t0.K, t0.V, options);
      const Buffer ws = workspace_buffer(device, m.workspace_bytes);
      const Workspace workspace{ws.data(), ws.bytes()};
      auto call = [&](int rep) {
        const AttentionTensors& t = tensors[std::size_t(rep % sets)];
        backward(t.Q, t.K, t.V, t.O, t.L, t.dO, t.dQ, t.dK, t.dV, options, nullptr, workspace);
      };
      progress.set_stage("timing backward");
      const MemoryProbe probe(device);
      record_times(m, time_calls(settings, call));
      m.extra_bytes = probe.extra_bytes();
      if (m.extra_bytes >= 0 && device.type == DeviceType::cuda) m.extra_bytes += ws.bytes();
      if (settings.check) {
        progress.set_stage("checking backward against the float64 reference");
        HostOutputs out;
        out.dq = t0.dq.download();
        out.dk = t0.dk.download();
        out.dv = t0.dv.download();
        m.check = check_backward(c, host_inputs, out);
      }
    } catch (const std::exception& e) {
      m.error = e.what();
    }
    results.push_back(std::move(m));
  }
  return results;
}

}  // namespace flashpp::bench
