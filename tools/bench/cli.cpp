#include "cli.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string_view>

namespace flashpp::bench {
namespace {

constexpr const char* kUsage = R"(flashpp-bench: time flashpp's attention forward and backward.

Usage: flashpp-bench [options]
  With no shape option, runs a small standard grid for the device found (CPU: also measures
  the machine's fp32 FMA peak and prints each result as a fraction of it).

Shape (any of these runs one case; values are integers >= 1 unless noted):
  --B N          batch                                   (default 1)
  --Hq N         query heads                             (default 8)
  --Hkv N        key/value heads, divides Hq             (default: Hq)
  --N N          sets both Nq and Nk                     (default 1024)
  --Nq N         query length (>= 0)
  --Nk N         key length (>= 0)
  --D N          head dim                                (default 64)
  --causal / --no-causal                                 (default no)
  --align top-left|bottom-right   causal diagonal when Nq != Nk (default top-left)
  --dtype f32|f16|bf16                                   (default f32 on CPU, bf16 on CUDA)
  --layout bnhd|bhnd   memory layout of every tensor     (default bnhd)
  --mode fwd|bwd|both                                    (default fwd; the grid runs both)

Run:
  --device auto|cpu|cuda   (default auto: CUDA when available, else CPU)
  --reps N       timed repetitions, the median is reported (default: 10 on CUDA; on CPU 3
                 to 5, as many as fit in about 2 s, 1 when a call takes over 5 s)
  --warmup N     untimed calls first (default: 3 on CUDA, 1 on CPU)
  --threads N    OpenMP threads for the CPU backend (default: all cores)
  --check / --no-check   compare a slice of every result with the float64 reference (default on)
  --csv          print CSV instead of a table
  --no-peak      skip the CPU FMA peak measurement
  --help         this text

Rates: forward FLOPs = 4*B*Hq*Nq*Nk*D, halved when causal with Nq = Nk (causal with Nq != Nk
counts the visible (query, key) pairs exactly); backward = 2.5 x forward, timed alone after one
forward. Extra memory: CPU, peak RSS growth during the calls beyond inputs and outputs; CUDA,
the workspace flashpp asked for plus any drop of free device memory across the calls.
)";

[[noreturn]] void bad(const std::string& message) {
  throw std::invalid_argument(message + " (see --help)");
}

std::int64_t parse_int(const std::string& flag, const std::string& text, std::int64_t min) {
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0) {
    bad(flag + ": expected an integer, got '" + text + "'");
  }
  if (value < min) bad(flag + ": expected a value >= " + std::to_string(min) + ", got " + text);
  return value;
}

DType parse_dtype(const std::string& text) {
  if (text == "f32" || text == "fp32" || text == "float32") return DType::f32;
  if (text == "f16" || text == "fp16" || text == "float16") return DType::f16;
  if (text == "bf16" || text == "bfloat16") return DType::bf16;
  bad("--dtype: expected f32, f16 or bf16, got '" + text + "'");
}

Mode parse_mode(const std::string& text) {
  if (text == "fwd" || text == "forward") return Mode::forward;
  if (text == "bwd" || text == "backward") return Mode::backward;
  if (text == "both") return Mode::both;
  bad("--mode: expected fwd, bwd or both, got '" + text + "'");
}

Layout parse_layout(const std::string& text) {
  if (text == "bnhd") return Layout::bnhd;
  if (text == "bhnd") return Layout::bhnd;
  bad("--layout: expected bnhd or bhnd, got '" + text + "'");
}

DeviceChoice parse_device(const std::string& text) {
  if (text == "auto") return DeviceChoice::automatic;
  if (text == "cpu") return DeviceChoice::cpu;
  if (text == "cuda" || text == "gpu") return DeviceChoice::cuda;
  bad("--device: expected auto, cpu or cuda, got '" + text + "'");
}

Alignment parse_alignment(const std::string& text) {
  if (text == "top-left" || text == "top_left") return Alignment::top_left;
  if (text == "bottom-right" || text == "bottom_right") return Alignment::bottom_right;
  bad("--align: expected top-left or bottom-right, got '" + text + "'");
}

}  // namespace

const char* to_string(Mode mode) {
  return mode == Mode::forward ? "fwd" : mode == Mode::backward ? "bwd" : "both";
}
const char* to_string(Layout layout) { return layout == Layout::bnhd ? "bnhd" : "bhnd"; }

BenchOptions parse_command_line(int argc, char** argv) {
  BenchOptions options;
  Case c;
  bool shape_given = false, hkv_given = false, dtype_given = false;

  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    std::string value;
    bool has_value = false;
    // Both "--flag value" and "--flag=value".
    if (const auto eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      has_value = true;
    }
    auto take_value = [&]() -> std::string {
      if (has_value) return value;
      if (i + 1 >= argc) bad(flag + ": expected a value");
      return argv[++i];
    };
    auto no_value = [&] {
      if (has_value) bad(flag + ": takes no value");
    };

    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (flag == "--B") {
      c.B = parse_int(flag, take_value(), 1), shape_given = true;
    } else if (flag == "--Hq" || flag == "--H") {
      c.Hq = parse_int(flag, take_value(), 1), shape_given = true;
    } else if (flag == "--Hkv") {
      c.Hkv = parse_int(flag, take_value(), 1), shape_given = hkv_given = true;
    } else if (flag == "--N") {
      c.Nq = c.Nk = parse_int(flag, take_value(), 1), shape_given = true;
    } else if (flag == "--Nq") {
      c.Nq = parse_int(flag, take_value(), 0), shape_given = true;
    } else if (flag == "--Nk") {
      c.Nk = parse_int(flag, take_value(), 0), shape_given = true;
    } else if (flag == "--D") {
      c.D = parse_int(flag, take_value(), 1), shape_given = true;
    } else if (flag == "--causal") {
      no_value(), c.causal = true, shape_given = true;
    } else if (flag == "--no-causal") {
      no_value(), c.causal = false, shape_given = true;
    } else if (flag == "--align") {
      c.alignment = parse_alignment(take_value()), shape_given = true;
    } else if (flag == "--dtype") {
      c.dtype = parse_dtype(take_value()), shape_given = dtype_given = true;
    } else if (flag == "--layout") {
      c.layout = parse_layout(take_value()), shape_given = true;
    } else if (flag == "--mode") {
      c.mode = parse_mode(take_value()), shape_given = true;
    } else if (flag == "--device") {
      options.device = parse_device(take_value());
    } else if (flag == "--reps" || flag == "--repetitions") {
      options.repetitions = static_cast<int>(parse_int(flag, take_value(), 1));
    } else if (flag == "--warmup" || flag == "--warm-up") {
      options.warmup = static_cast<int>(parse_int(flag, take_value(), 0));
    } else if (flag == "--threads") {
      options.threads = static_cast<int>(parse_int(flag, take_value(), 1));
    } else if (flag == "--check") {
      no_value(), options.check = true;
    } else if (flag == "--no-check") {
      no_value(), options.check = false;
    } else if (flag == "--csv") {
      no_value(), options.csv = true;
    } else if (flag == "--no-peak") {
      no_value(), options.measure_peak = false;
    } else {
      bad("unknown option '" + std::string(argv[i]) + "'");
    }
  }

  if (shape_given) {
    if (!hkv_given) c.Hkv = c.Hq;
    if (c.Hq % c.Hkv != 0) {
      bad("--Hkv: expected a divisor of Hq = " + std::to_string(c.Hq) + ", got " +
          std::to_string(c.Hkv));
    }
    // Without --dtype the dtype follows the device (f32 on CPU, bf16 on CUDA): see main.cpp.
    options.dtype_given = dtype_given;
    options.single_case = c;
  }
  return options;
}

}  // namespace flashpp::bench
