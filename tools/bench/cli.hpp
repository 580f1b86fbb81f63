// Command-line options of flashpp-bench.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "flashpp/flashpp.hpp"

namespace flashpp::bench {

enum class Mode { forward, backward, both };
enum class Layout { bnhd, bhnd };
enum class DeviceChoice { automatic, cpu, cuda };

// One benchmark case: a shape and how it is stored.
struct Case {
  std::int64_t B = 1, Hq = 8, Hkv = 8, Nq = 1024, Nk = 1024, D = 64;
  bool causal = false;
  Alignment alignment = Alignment::top_left;
  DType dtype = DType::f32;
  Layout layout = Layout::bnhd;
  Mode mode = Mode::forward;
};

struct BenchOptions {
  DeviceChoice device = DeviceChoice::automatic;
  // Set when the user gave any shape option: run that one case instead of the standard grid.
  std::optional<Case> single_case;
  bool dtype_given = false;  // for single_case: false means "the device's default dtype"
  // Unset: chosen per case so that a case stays within a time budget (see runner.cpp).
  std::optional<int> repetitions;
  std::optional<int> warmup;
  int threads = 0;  // 0: OpenMP's default (every core)
  bool check = true;
  bool csv = false;
  bool measure_peak = true;  // CPU only: the fp32 FMA peak the results are a fraction of
};

// Parses argv. Prints usage and exits 0 on --help; throws std::invalid_argument with a readable
// message on a bad flag or value.
BenchOptions parse_command_line(int argc, char** argv);

const char* to_string(Mode mode);
const char* to_string(Layout layout);

}  // namespace flashpp::bench
