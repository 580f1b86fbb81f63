// Shows that a long case is still running: while alive, prints the elapsed time to stderr every
// 2 seconds on a terminal, every 10 s into a log (nothing for a case that finishes sooner).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace flashpp::bench {

class ProgressTicker {
 public:
  explicit ProgressTicker(std::string label);
  ~ProgressTicker();  // stops the ticker and ends its line
  ProgressTicker(const ProgressTicker&) = delete;
  ProgressTicker& operator=(const ProgressTicker&) = delete;

  // What the case is doing now ("timing", "checking", ...), shown on the next tick.
  void set_stage(const std::string& stage);

 private:
  void run();

  std::string label_;
  std::string stage_;
  bool interactive_ = false;  // stderr is a terminal
  bool stop_ = false;
  bool printed_ = false;  // a line was left open (terminal)
  int ticks_ = 0;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::chrono::steady_clock::time_point start_;
  std::thread thread_;
};

}  // namespace flashpp::bench
