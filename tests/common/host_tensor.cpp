#include "host_tensor.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "cpu/element_access.hpp"
#include "random.hpp"

namespace flashpp::test {

const char* to_string(Layout layout) {
  switch (layout) {
    case Layout::bnhd: return "bnhd";
    case Layout::bhnd: return "bhnd";
    case Layout::padded: return "padded";
  }
  return "?";
}

HostTensor HostTensor::attention(DType dtype, std::int64_t B, std::int64_t N, std::int64_t H,
                                 std::int64_t D, Layout layout) {
  HostTensor t;
  t.dtype_ = dtype;
  t.layout_ = layout;
  t.rank_ = 4;
  const std::int64_t sizes[4] = {B, N, H, D};
  std::memcpy(t.sizes_, sizes, sizeof sizes);
  switch (layout) {
    case Layout::bnhd: {
      const std::int64_t s[4] = {N * H * D, H * D, D, 1};
      std::memcpy(t.strides_, s, sizeof s);
      break;
    }
    case Layout::bhnd: {
      const std::int64_t s[4] = {H * N * D, D, N * D, 1};
      std::memcpy(t.strides_, s, sizeof s);
      break;
    }
    case Layout::padded: {
      // Odd gaps, so padded rows are also misaligned for vector loads.
      const std::int64_t head = D + 3, row = H * head + 5, batch = N * row + 7;
      const std::int64_t s[4] = {batch, row, head, 1};
      std::memcpy(t.strides_, s, sizeof s);
      break;
    }
  }
  t.allocate();
  return t;
}

HostTensor HostTensor::lse(DType dtype, std::int64_t B, std::int64_t H, std::int64_t N,
                           Layout layout) {
  HostTensor t;
  t.dtype_ = dtype;
  t.layout_ = layout == Layout::padded ? Layout::padded : Layout::bnhd;
  t.rank_ = 3;
  t.sizes_[0] = B;
  t.sizes_[1] = H;
  t.sizes_[2] = N;
  const std::int64_t row = layout == Layout::padded ? N + 2 : N;
  const std::int64_t batch = layout == Layout::padded ? H * row + 1 : H * row;
  t.strides_[0] = batch;
  t.strides_[1] = row;
  t.strides_[2] = 1;
  t.allocate();
  return t;
}

void HostTensor::allocate() {
  std::int64_t extent = 1;  // 1 + the largest offset, or 0 when some size is 0
  for (int i = 0; i < rank_; ++i) {
    if (sizes_[i] == 0) extent = 0;
  }
  if (extent != 0) {
    for (int i = 0; i < rank_; ++i) extent += (sizes_[i] - 1) * strides_[i];
  }
  storage_elements_ = extent;
  const std::size_t bytes = static_cast<std::size_t>(extent) * element_size(dtype_);
  storage_.assign((bytes + 7) / 8, 0);
  poison();
}

HostTensor HostTensor::like() const {
  HostTensor t = *this;
  t.poison();
  return t;
}

HostTensor HostTensor::converted(DType dtype) const {
  HostTensor t = *this;
  t.dtype_ = dtype;
  t.allocate();
  t.set_values(values());
  return t;
}

TensorView HostTensor::view(Device device) const {
  TensorView v;
  v.data = storage_elements_ > 0 ? const_cast<std::uint64_t*>(storage_.data()) : nullptr;
  v.dtype = dtype_;
  v.device = device;
  v.rank = rank_;
  for (int i = 0; i < rank_; ++i) {
    v.sizes[i] = sizes_[i];
    v.strides[i] = strides_[i];
  }
  return v;
}

std::int64_t HostTensor::numel() const {
  std::int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= sizes_[i];
  return n;
}

std::size_t HostTensor::raw_bytes() const {
  return static_cast<std::size_t>(storage_elements_) * element_size(dtype_);
}

std::int64_t HostTensor::offset(std::int64_t i0, std::int64_t i1, std::int64_t i2,
                                std::int64_t i3) const {
  return i0 * strides_[0] + i1 * strides_[1] + i2 * strides_[2] + i3 * strides_[3];
}

double HostTensor::get(std::int64_t i0, std::int64_t i1, std::int64_t i2, std::int64_t i3) const {
  return detail::load_element(view(), offset(i0, i1, i2, i3));
}

void HostTensor::set(std::int64_t i0, std::int64_t i1, std::int64_t i2, std::int64_t i3,
                     double value) {
  detail::store_element(view(), offset(i0, i1, i2, i3), value);
}

namespace {
// Calls f(i0, i1, i2, i3) for every logical index in row-major order.
template <class F>
void for_each_index(const HostTensor& t, F&& f) {
  const std::int64_t n3 = t.rank() == 4 ? t.size(3) : 1;
  for (std::int64_t a = 0; a < t.size(0); ++a)
    for (std::int64_t b = 0; b < t.size(1); ++b)
      for (std::int64_t c = 0; c < t.size(2); ++c)
        for (std::int64_t d = 0; d < n3; ++d) f(a, b, c, d);
}
}  // namespace

std::vector<double> HostTensor::values() const {
  std::vector<double> out;
  out.reserve(static_cast<std::size_t>(numel()));
  for_each_index(*this, [&](auto a, auto b, auto c, auto d) { out.push_back(get(a, b, c, d)); });
  return out;
}

void HostTensor::set_values(const std::vector<double>& values) {
  std::size_t n = 0;
  for_each_index(*this, [&](auto a, auto b, auto c, auto d) { set(a, b, c, d, values.at(n++)); });
}

void HostTensor::fill_normal(std::uint64_t seed, double stddev) {
  NormalGenerator normal(seed);
  for_each_index(*this,
                 [&](auto a, auto b, auto c, auto d) { set(a, b, c, d, stddev * normal.next()); });
}

void HostTensor::fill(double value) {
  for_each_index(*this, [&](auto a, auto b, auto c, auto d) { set(a, b, c, d, value); });
}

void HostTensor::poison() {
  const TensorView all = view();
  for (std::int64_t i = 0; i < storage_elements_; ++i) {
    detail::store_element(all, i, std::numeric_limits<double>::quiet_NaN());
  }
}

bool HostTensor::gaps_untouched() const {
  std::vector<bool> addressed(static_cast<std::size_t>(storage_elements_), false);
  for_each_index(*this, [&](auto a, auto b, auto c, auto d) {
    addressed[static_cast<std::size_t>(offset(a, b, c, d))] = true;
  });
  const TensorView all = view();
  for (std::int64_t i = 0; i < storage_elements_; ++i) {
    if (!addressed[i] && !std::isnan(detail::load_element(all, i))) return false;
  }
  return true;
}

std::string describe(const HostTensor& t) {
  std::ostringstream s;
  s << "[";
  for (int i = 0; i < t.rank(); ++i) s << (i ? ", " : "") << t.size(i);
  s << "] " << flashpp::to_string(t.dtype()) << " " << to_string(t.layout());
  return s.str();
}

}  // namespace flashpp::test
