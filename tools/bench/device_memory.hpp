// Owning memory on the CPU or a CUDA device, and the few CUDA runtime calls the bench needs.
// Without CUDA (FLASHPP_WITH_CUDA undefined) the CUDA paths throw a readable error.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "flashpp/flashpp.hpp"

namespace flashpp::bench {

class Buffer {
 public:
  Buffer() = default;
  Buffer(Device device, std::size_t bytes);
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  const Device& device() const { return device_; }

  void upload(const void* host);            // host -> this buffer (all bytes)
  std::vector<std::byte> download() const;  // this buffer -> host
  void fill_zero();                         // also touches every page (CPU)

 private:
  void release() noexcept;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  Device device_{};
};

// CUDA helpers; each throws std::runtime_error naming the failing call.
void cuda_set_device(int index);
void cuda_synchronize();
std::size_t cuda_free_bytes();  // cudaMemGetInfo's free
std::string cuda_device_name(int index);

// Times calls on the default stream with CUDA events: start() before the work, stop() after,
// milliseconds() once all are done.
class CudaEventTimer {
 public:
  CudaEventTimer();
  ~CudaEventTimer();
  CudaEventTimer(const CudaEventTimer&) = delete;
  CudaEventTimer& operator=(const CudaEventTimer&) = delete;
  void start();
  void stop();
  double milliseconds();  // waits for stop's event

 private:
  void* start_ = nullptr;
  void* stop_ = nullptr;
};

}  // namespace flashpp::bench
