#include "progress.hpp"

#include <unistd.h>

#include <cstdio>

namespace flashpp::bench {

ProgressTicker::ProgressTicker(std::string label)
    : label_(std::move(label)),
      interactive_(isatty(fileno(stderr)) != 0),
      start_(std::chrono::steady_clock::now()) {
  thread_ = std::thread([this] { run(); });
}

ProgressTicker::~ProgressTicker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
  if (printed_) std::fputc('\n', stderr);
}

void ProgressTicker::set_stage(const std::string& stage) {
  std::lock_guard<std::mutex> lock(mutex_);
  stage_ = stage;
}

void ProgressTicker::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto period = std::chrono::seconds(2);
  auto next = start_ + period;
  while (!wake_.wait_until(lock, next, [this] { return stop_; })) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    // A terminal gets one line rewritten in place every tick; a log gets a line every 5th
    // tick (10 s), so that it shows progress without filling up.
    if (interactive_) {
      std::fprintf(stderr, "\r  %s: %s ... %.0f s ", label_.c_str(), stage_.c_str(), seconds);
      printed_ = true;
    } else if (++ticks_ % 5 == 0) {
      std::fprintf(stderr, "  %s: %s ... %.0f s\n", label_.c_str(), stage_.c_str(), seconds);
    }
    std::fflush(stderr);
    next += period;
  }
}

}  // namespace flashpp::bench
