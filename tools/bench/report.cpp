#include "report.hpp"

#include <cstdio>
#include <string>

namespace flashpp::bench {
namespace {

std::string human_bytes(std::int64_t bytes) {
  if (bytes < 0) return "n/a";
  char text[32];
  const double b = double(bytes);
  if (b < 1024)
    std::snprintf(text, sizeof text, "%lld B", static_cast<long long>(bytes));
  else if (b < 1024.0 * 1024)
    std::snprintf(text, sizeof text, "%.1f KiB", b / 1024);
  else if (b < 1024.0 * 1024 * 1024)
    std::snprintf(text, sizeof text, "%.1f MiB", b / 1048576);
  else
    std::snprintf(text, sizeof text, "%.2f GiB", b / 1073741824);
  return text;
}

// Commas would break a CSV field.
std::string csv_safe(std::string text) {
  for (char& ch : text) {
    if (ch == ',' || ch == '\n') ch = ';';
  }
  return text;
}

}  // namespace

Report::Report(bool csv, DeviceType device, std::optional<FmaPeak> peak)
    : csv_(csv), device_(device), peak_(peak) {}

void Report::header() const {
  if (csv_) {
    std::printf(
        "device,dtype,layout,B,Hq,Hkv,Nq,Nk,D,causal,align,direction,reps,input_sets,"
        "median_ms,min_ms,flops,flops_exact_pairs,tflops,fraction_of_peak,"
        "workspace_bytes,extra_bytes,check,max_rel_error,tolerance,error\n");
  } else {
    const char* rate = device_ == DeviceType::cuda ? "TFLOPS" : "GFLOPS";
    std::printf("%-5s %-5s %3s %4s %4s %6s %6s %4s %-6s %-3s %4s %10s %9s %6s %10s %10s  %s\n",
                "dtype", "lay", "B", "Hq", "Hkv", "Nq", "Nk", "D", "causal", "dir", "reps",
                "median_ms", rate, "%peak", "workspace", "extra_mem", "check vs float64 reference");
  }
  std::fflush(stdout);
}

void Report::row(const Measurement& m) {
  const Case& c = m.shape;
  any_exact_pairs_ = any_exact_pairs_ || m.exact_pairs;
  const char* dir = m.direction == Mode::forward ? "fwd" : "bwd";
  const double rate = m.flops_per_second();
  const double fraction = peak_ && peak_->gflops > 0 ? rate / (peak_->gflops * 1e9) : -1;
  const char* causal = !c.causal ? "no" : c.alignment == Alignment::top_left ? "yes" : "yes-br";

  if (csv_) {
    std::printf("%s,%s,%s,%lld,%lld,%lld,%lld,%lld,%lld,%d,%s,%s,%d,%d,%.6g,%.6g,%.6g,%d,%.6g,",
                device_ == DeviceType::cuda ? "cuda" : "cpu", to_string(c.dtype),
                to_string(c.layout), (long long)c.B, (long long)c.Hq, (long long)c.Hkv,
                (long long)c.Nq, (long long)c.Nk, (long long)c.D, c.causal ? 1 : 0,
                c.alignment == Alignment::top_left ? "top-left" : "bottom-right", dir,
                m.repetitions, m.input_sets, m.median_ms, m.min_ms, m.flops, m.exact_pairs ? 1 : 0,
                rate / 1e12);
    if (fraction >= 0) std::printf("%.4f", fraction);
    std::printf(",%zu,%lld,%s,", m.workspace_bytes, (long long)m.extra_bytes,
                !m.error.empty() ? "error"
                : !m.check.ran   ? "none"
                : m.check.pass() ? "pass"
                                 : "fail");
    if (m.check.ran)
      std::printf("%.3g,%.3g", m.check.max_error(), m.check.tolerance);
    else
      std::printf(",");
    std::printf(",%s\n", csv_safe(m.error).c_str());
    std::fflush(stdout);
    return;
  }

  std::printf("%-5s %-5s %3lld %4lld %4lld %6lld %6lld %4lld %-6s %-3s ", to_string(c.dtype),
              to_string(c.layout), (long long)c.B, (long long)c.Hq, (long long)c.Hkv,
              (long long)c.Nq, (long long)c.Nk, (long long)c.D, causal, dir);
  if (!m.error.empty()) {
    std::printf("error: %s\n", m.error.c_str());
    std::fflush(stdout);
    return;
  }
  const double shown_rate = device_ == DeviceType::cuda ? rate / 1e12 : rate / 1e9;
  char fraction_text[16] = "-";
  if (fraction >= 0) std::snprintf(fraction_text, sizeof fraction_text, "%.1f%%", 100 * fraction);
  std::printf("%4d %10.3f %8.2f%s %6s %10s %10s  %s\n", m.repetitions, m.median_ms, shown_rate,
              m.exact_pairs ? "*" : " ", fraction_text,
              human_bytes(std::int64_t(m.workspace_bytes)).c_str(),
              human_bytes(m.extra_bytes).c_str(), m.check.summary().c_str());
  std::fflush(stdout);
}

void Report::footer() const {
  if (csv_) return;
  std::printf(
      "\nms: median of the timed calls. FLOPs: forward 4*B*Hq*Nq*Nk*D (halved when causal with"
      " Nq = Nk),\nbackward 2.5x forward, timed alone after one forward.\n");
  if (any_exact_pairs_) {
    std::printf("*: causal with Nq != Nk: FLOPs count the visible (query, key) pairs exactly.\n");
  }
  if (device_ == DeviceType::cpu) {
    std::printf(
        "extra_mem: peak resident-set growth during the calls beyond inputs and outputs"
        " (includes the workspace).\n");
  } else {
    std::printf("extra_mem: the workspace plus any drop of free device memory across the calls.\n");
  }
  std::printf(
      "check: ||out - ref|| / ||ref|| on a slice (batch 0, 1-2 heads, <= 256 rows; dk,dv:"
      " kv head 0, all rows)\nrecomputed by the float64 reference from the same inputs.\n");
  std::fflush(stdout);
}

}  // namespace flashpp::bench
