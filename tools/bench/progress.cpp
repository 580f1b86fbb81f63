#include "progress.hpp"

#include <cstdio>

namespace flashpp::bench {

ProgressTicker::ProgressTicker(std::string label)
    : label_(std::move(label)), start_(std::chrono::steady_clock::now()) {
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
    // One line rewritten in place (\r): a terminal shows a counter, a log shows the history.
    std::fprintf(stderr, "\r  %s: %s ... %.0f s", label_.c_str(), stage_.c_str(), seconds);
    std::fflush(stderr);
    printed_ = true;
    next += period;
  }
}

}  // namespace flashpp::bench
