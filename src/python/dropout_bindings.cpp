#include "dropout_bindings.hpp"

#include <nanobind/ndarray.h>

#include <cstdint>

#include "common/philox.hpp"
#include "flashpp/flashpp.hpp"

namespace flashpp::python {
namespace {

namespace nb = nanobind;
using namespace nb::literals;

using MaskArray = nb::ndarray<nb::numpy, std::uint8_t, nb::ndim<4>>;

// keep[b, h, i, j] = 1 where attention element (b, h, i, j) survives dropout.
MaskArray dropout_keep_mask(float p, std::uint64_t seed, std::uint64_t offset, std::int64_t B,
                            std::int64_t H, std::int64_t Nq, std::int64_t Nk) {
  if (B < 0 || H < 0 || Nq < 0 || Nk < 0) {
    throw Error(ErrorCode::invalid_argument,
                "flashpp.dropout_keep_mask: sizes: expected non-negative sizes");
  }
  if (!(p >= 0.0f && p < 1.0f)) {
    throw Error(ErrorCode::invalid_argument,
                "flashpp.dropout_keep_mask: p: expected a probability in [0, 1)");
  }
  const auto params = detail::make_dropout_params(p, seed, offset);
  const std::size_t n = static_cast<std::size_t>(B * H * Nq * Nk);
  auto* keep = new std::uint8_t[n > 0 ? n : 1];
  nb::capsule owner(keep, [](void* data) noexcept { delete[] static_cast<std::uint8_t*>(data); });
  {
    nb::gil_scoped_release no_gil;
    std::size_t at = 0;
    for (std::int64_t bh = 0; bh < B * H; ++bh) {
      for (std::int64_t i = 0; i < Nq; ++i) {
        for (std::int64_t j = 0; j < Nk; ++j, ++at) {
          keep[at] = !params.enabled() ||
                     detail::dropout_keep(params, static_cast<std::uint32_t>(bh),
                                          static_cast<std::uint32_t>(i),
                                          static_cast<std::uint32_t>(j));
        }
      }
    }
  }
  const std::size_t shape[4] = {static_cast<std::size_t>(B), static_cast<std::size_t>(H),
                                static_cast<std::size_t>(Nq), static_cast<std::size_t>(Nk)};
  return MaskArray(keep, 4, shape, owner);
}

}  // namespace

void bind_dropout(nb::module_& m) {
  m.def("dropout_keep_mask", &dropout_keep_mask, "p"_a, "seed"_a, "offset"_a, "B"_a, "H"_a,
        "Nq"_a, "Nk"_a,
        "uint8 [B, H, Nq, Nk]: 1 where the attention element is kept by dropout with this\n"
        "(p, seed, offset); the same mask every flashpp backend applies.");
}

}  // namespace flashpp::python
