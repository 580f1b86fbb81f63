// Prints measurements: an aligned table (default) or CSV (--csv), one line per timed direction,
// printed as soon as the case finishes.
#pragma once

#include <optional>

#include "fma_peak.hpp"
#include "runner.hpp"

namespace flashpp::bench {

class Report {
 public:
  // `peak`: on the CPU, the measured FMA peak the rates are shown as a fraction of.
  Report(bool csv, DeviceType device, std::optional<FmaPeak> peak);

  void header() const;
  void row(const Measurement& m);
  void footer() const;  // notes on what the columns mean, as far as this run needs them

 private:
  bool csv_;
  DeviceType device_;
  std::optional<FmaPeak> peak_;
  bool any_exact_pairs_ = false;
};

}  // namespace flashpp::bench
