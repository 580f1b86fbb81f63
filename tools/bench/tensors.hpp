// The tensors of one case: random normal inputs made on the host, then placed on the device
// with the case's layout, and the outputs flashpp writes.
#pragma once

#include <cstdint>
#include <vector>

#include "cli.hpp"
#include "device_memory.hpp"

namespace flashpp::bench {

// Inputs in the case's storage dtype, contiguous in the case's layout (dout only when the
// case runs the backward).
struct HostInputs {
  std::vector<std::byte> q, k, v, dout;
};
HostInputs random_inputs(const Case& c, std::uint64_t seed);

// A view of `data` as [B, N, H, D] in the case's layout (bnhd or bhnd).
TensorView view_of(const Case& c, void* data, DType dtype, std::int64_t N, std::int64_t H,
                   Device device);

// One full set of a case's tensors on one device. Outputs start zeroed (touched, so that their
// pages do not count as memory the call allocated).
struct AttentionTensors {
  Buffer q, k, v, o, lse, dout, dq, dk, dv;
  TensorView Q, K, V, O, L, dO, dQ, dK, dV;

  std::size_t bytes() const;
};
AttentionTensors place_tensors(const Case& c, Device device, const HostInputs& inputs);

}  // namespace flashpp::bench
