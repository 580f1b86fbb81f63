// flashpp-bench: times flashpp's forward and backward on the CPU or a CUDA device, prints FLOP
// rates by BENCHMARKING.md's convention, extra memory, and a check of every result against the
// float64 reference. `flashpp-bench --help` lists the options.
#include <algorithm>
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <stdexcept>
#include <string>

#include "cli.hpp"
#include "device_memory.hpp"
#include "fma_peak.hpp"
#include "progress.hpp"
#include "report.hpp"
#include "runner.hpp"
#include "workload.hpp"

namespace fb = flashpp::bench;
using flashpp::DeviceType;

namespace {

std::string cpu_model_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown CPU";
}

// The 1-minute load average: on a shared machine, other processes compete for the cores and
// every CPU figure of the run is then an upper bound on time, a lower bound on rate.
std::string load_average() {
  std::ifstream loadavg("/proc/loadavg");
  std::string one_minute;
  return loadavg >> one_minute ? one_minute : "unknown";
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  return text;
}

DeviceType resolve_device(fb::DeviceChoice choice) {
  const bool cuda = flashpp::cuda_available();
  if (choice == fb::DeviceChoice::cuda && !cuda) {
    throw std::invalid_argument(
        std::string("--device cuda: no usable CUDA device (flashpp was built ") +
        (flashpp::cuda_compiled() ? "with" : "without") + " CUDA)");
  }
  if (choice == fb::DeviceChoice::cpu) return DeviceType::cpu;
  return cuda ? DeviceType::cuda : DeviceType::cpu;
}

std::string case_label(const fb::Case& c) {
  char text[160];
  std::snprintf(text, sizeof text, "%s %s B=%lld Hq=%lld Hkv=%lld Nq=%lld Nk=%lld D=%lld%s %s",
                flashpp::to_string(c.dtype), fb::to_string(c.layout), (long long)c.B,
                (long long)c.Hq, (long long)c.Hkv, (long long)c.Nq, (long long)c.Nk, (long long)c.D,
                c.causal ? " causal" : "", fb::to_string(c.mode));
  return text;
}

// "#" prefixes the preamble in CSV mode so that CSV readers can skip it.
void print_line(bool csv, const std::string& text) {
  std::printf("%s%s\n", csv ? "# " : "", text.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const auto wall_start = std::chrono::steady_clock::now();
  fb::BenchOptions options;
  DeviceType device_type;
  try {
    options = fb::parse_command_line(argc, argv);
    device_type = resolve_device(options.device);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashpp-bench: %s\n", e.what());
    return 2;
  }
  if (options.threads > 0) omp_set_num_threads(options.threads);
  const bool on_cuda = device_type == DeviceType::cuda;

  // The cases: one from the command line, or the standard grid of the device.
  std::vector<fb::Case> cases;
  if (options.single_case) {
    fb::Case c = *options.single_case;
    if (!options.dtype_given) c.dtype = on_cuda ? flashpp::DType::bf16 : flashpp::DType::f32;
    cases.push_back(c);
  } else {
    cases = on_cuda ? fb::cuda_grid() : fb::cpu_grid();
  }

  // Machine description, and on the CPU the FMA peak the rates are compared with.
  std::optional<fb::FmaPeak> peak;
  print_line(options.csv, std::string("flashpp-bench ") + flashpp::version() + ", " + utc_now());
  if (on_cuda) {
    try {
      print_line(options.csv, "device: cuda:0 " + fb::cuda_device_name(0));
      print_line(options.csv, "kernels: " + flashpp::cuda_kernel_families(0));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "flashpp-bench: %s\n", e.what());
      return 1;
    }
  } else {
    const int threads = omp_get_max_threads();
    print_line(options.csv, "device: cpu, " + cpu_model_name() + ", " + std::to_string(threads) +
                                " OpenMP threads, load average " + load_average() +
                                " at the start");
    // Which kernel runs, per dtype of the grid: the CPU backend picks it at run time from the
    // CPU's features (or FLASHPP_CPU_ISA), and a slow fallback must never go unnoticed.
    std::vector<flashpp::DType> dtypes;
    for (const fb::Case& c : cases) {
      if (std::find(dtypes.begin(), dtypes.end(), c.dtype) == dtypes.end()) dtypes.push_back(c.dtype);
    }
    try {
      for (const flashpp::DType dt : dtypes) {
        const std::string fwd = flashpp::cpu_kernel(dt, false), bwd = flashpp::cpu_kernel(dt, true);
        print_line(options.csv, std::string("cpu kernel, ") + flashpp::to_string(dt) + ": forward " +
                                    fwd.substr(0, fwd.find(';')) + ", backward " + bwd);
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "flashpp-bench: %s\n", e.what());
      return 1;
    }
    if (options.measure_peak) {
      std::fprintf(stderr, "measuring the fp32 FMA peak ...\n");
      peak = fb::measure_fma_peak(threads);
      char text[160];
      std::snprintf(text, sizeof text,
                    "fp32 FMA peak (measured, register-only, %s, %d threads): %.1f GFLOPS",
                    peak->isa.c_str(), peak->threads, peak->gflops);
      print_line(options.csv, text);
    }
  }
  if (!options.csv) std::printf("\n");

  fb::RunSettings settings;
  settings.device = flashpp::Device{device_type, 0};
  settings.repetitions = options.repetitions;
  settings.warmup = options.warmup;
  settings.check = options.check;

  fb::Report report(options.csv, device_type, peak);
  report.header();
  bool all_ok = true;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const std::string label = case_label(cases[i]);
    char prefix[32];
    std::snprintf(prefix, sizeof prefix, "[%zu/%zu]", i + 1, cases.size());
    std::fprintf(stderr, "%s %s\n", prefix, label.c_str());
    std::vector<fb::Measurement> results;
    {
      fb::ProgressTicker progress(prefix);
      try {
        results = fb::run_case(cases[i], settings, progress);
      } catch (const std::exception& e) {
        // Tensors could not be made (e.g. out of device memory): report and go on.
        fb::Measurement m;
        m.shape = cases[i];
        m.direction = cases[i].mode == fb::Mode::backward ? fb::Mode::backward : fb::Mode::forward;
        m.error = e.what();
        results.push_back(m);
      }
    }
    for (const fb::Measurement& m : results) {
      report.row(m);
      all_ok = all_ok && m.error.empty() && (!m.check.ran || m.check.pass());
    }
  }
  report.footer();
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  char text[64];
  std::snprintf(text, sizeof text, "wall time: %.1f s", wall);
  print_line(options.csv, text);
  return all_ok ? 0 : 1;
}
