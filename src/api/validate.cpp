#include "validate.hpp"

#include <cmath>
#include <sstream>
#include <string>

#include "../cuda/cuda_backend.hpp"

namespace flashpp::detail {
namespace {

[[noreturn]] void fail(ErrorCode code, const char* call, const std::string& name,
                       const std::string& expected, const std::string& got) {
  std::ostringstream m;
  m << call << ": " << name << ": expected " << expected << ", got " << got;
  throw Error(code, m.str());
}

std::string shape_string(const TensorView& t) {
  std::ostringstream s;
  s << "[";
  for (int i = 0; i < t.rank; ++i) s << (i ? ", " : "") << t.sizes[i];
  s << "]";
  return s.str();
}

std::string strides_string(const TensorView& t) {
  std::ostringstream s;
  s << "(";
  for (int i = 0; i < t.rank; ++i) s << (i ? ", " : "") << t.strides[i];
  s << ")";
  return s.str();
}

std::string device_string(const Device& d) {
  return d.type == DeviceType::cpu ? std::string("cpu")
                                   : std::string("cuda:") + std::to_string(d.index);
}

// Checks rank, non-negative sizes, last stride 1, non-negative strides, 64-bit offsets and
// non-null data; `names` describe the dimensions for messages.
void check_view(const char* call, const char* name, const TensorView& t, int rank,
                const char* dims) {
  if (t.rank != rank) {
    fail(ErrorCode::invalid_argument, call, name,
         "a " + std::to_string(rank) + "-d tensor " + dims,
         std::to_string(t.rank) + "-d tensor " + shape_string(t));
  }
  for (int i = 0; i < rank; ++i) {
    if (t.sizes[i] < 0) {
      fail(ErrorCode::invalid_argument, call, name, "non-negative sizes", shape_string(t));
    }
    if (t.strides[i] < 0) {
      fail(ErrorCode::invalid_argument, call, name, "non-negative strides",
           "strides " + strides_string(t));
    }
  }
  if (t.strides[rank - 1] != 1 && t.sizes[rank - 1] > 1) {
    fail(ErrorCode::invalid_argument, call, name,
         "the last dimension contiguous (last stride 1)", "strides " + strides_string(t));
  }
  // The largest element offset and byte offset must fit in int64.
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  std::int64_t numel = 1;
  bool any_zero = false;
  for (int i = 0; i < rank; ++i) any_zero = any_zero || t.sizes[i] == 0;
  if (any_zero) return;  // nothing addressed: data may be null
  std::int64_t max_offset = 0;
  for (int i = 0; i < rank; ++i) {
    const std::int64_t extent = t.sizes[i] - 1;
    if (t.strides[i] != 0 && extent > (kMax - max_offset) / t.strides[i]) {
      fail(ErrorCode::invalid_argument, call, name,
           "element offsets that fit in 64 bits", "sizes " + shape_string(t) + " strides " +
                                                       strides_string(t));
    }
    max_offset += extent * t.strides[i];
    if (t.sizes[i] > kMax / numel) {
      fail(ErrorCode::invalid_argument, call, name, "an element count that fits in 64 bits",
           shape_string(t));
    }
    numel *= t.sizes[i];
  }
  if (max_offset > kMax / 8) {
    fail(ErrorCode::invalid_argument, call, name, "byte offsets that fit in 64 bits",
         "sizes " + shape_string(t) + " strides " + strides_string(t));
  }
  if (t.data == nullptr) {
    fail(ErrorCode::invalid_argument, call, name, "non-null data for a non-empty tensor",
         "nullptr with shape " + shape_string(t));
  }
}

void check_output_strides(const char* call, const char* name, const TensorView& t) {
  // An empty tensor has no elements that could alias (and make_bnhd gives N = 0 views a
  // zero batch stride).
  for (int i = 0; i < t.rank; ++i) {
    if (t.sizes[i] == 0) return;
  }
  for (int i = 0; i < t.rank; ++i) {
    if (t.sizes[i] > 1 && t.strides[i] == 0) {
      fail(ErrorCode::invalid_argument, call, name,
           "non-zero strides on an output (a zero stride makes elements alias)",
           "strides " + strides_string(t));
    }
  }
}

bool valid_dtype(DType d) {
  return d == DType::f32 || d == DType::f16 || d == DType::bf16 || d == DType::f64 ||
         d == DType::e4m3;
}

// A descale view of options: empty (factor 1), or float32 [B, Hkv] on the tensors' device.
void check_descale(const char* call, const char* name, const TensorView& t, const Problem& p) {
  if (t.empty()) return;
  if (p.dtype != DType::e4m3) {
    fail(ErrorCode::invalid_argument, call, name,
         "an empty view (descale factors apply to e4m3 inputs only)",
         std::string("a descale with inputs of dtype ") + to_string(p.dtype));
  }
  check_view(call, name, t, 2, "[B, Hkv] float32");
  if (t.sizes[0] != p.B || t.sizes[1] != p.Hkv) {
    fail(ErrorCode::invalid_argument, call, name,
         "shape [" + std::to_string(p.B) + ", " + std::to_string(p.Hkv) + "] (batch, kv heads)",
         shape_string(t));
  }
  if (t.dtype != DType::f32) {
    fail(ErrorCode::invalid_argument, call, name, "dtype f32", to_string(t.dtype));
  }
  if (!(t.device == p.device)) {
    fail(ErrorCode::invalid_argument, call, name,
         "device " + device_string(p.device) + " (the device of q)", device_string(t.device));
  }
}

}  // namespace

Problem validate_inputs(const char* call, const TensorView& q, const TensorView& k,
                        const TensorView& v, const Options& options) {
  check_view(call, "q", q, 4, "[B, Nq, Hq, D]");
  check_view(call, "k", k, 4, "[B, Nk, Hkv, D]");
  check_view(call, "v", v, 4, "[B, Nk, Hkv, D]");
  if (q.dtype == DType::i32) {  // a dtype of the library (indices), not one attention takes
    fail(ErrorCode::unsupported, call, "q", "dtype f32, f16, bf16 or e4m3", "dtype i32");
  }
  if (!valid_dtype(q.dtype)) {
    fail(ErrorCode::invalid_argument, call, "q", "dtype f32, f16, bf16 or e4m3",
         "dtype code " + std::to_string(static_cast<int>(q.dtype)));
  }
  for (const auto* pair : {&k, &v}) {
    const char* name = pair == &k ? "k" : "v";
    if (pair->dtype != q.dtype) {
      fail(ErrorCode::invalid_argument, call, name,
           std::string("dtype ") + to_string(q.dtype) + " (the dtype of q)",
           to_string(pair->dtype));
    }
    if (!(pair->device == q.device)) {
      fail(ErrorCode::invalid_argument, call, name,
           "device " + device_string(q.device) + " (the device of q)",
           device_string(pair->device));
    }
  }
  Problem p;
  p.B = q.sizes[0];
  p.Nq = q.sizes[1];
  p.Hq = q.sizes[2];
  p.D = q.sizes[3];
  p.Nk = k.sizes[1];
  p.Hkv = k.sizes[2];
  p.dtype = q.dtype;
  p.out_dtype = q.dtype;
  p.device = q.device;
  if (k.sizes[0] != p.B) {
    fail(ErrorCode::invalid_argument, call, "k", "batch " + std::to_string(p.B) + " (q's)",
         "shape " + shape_string(k));
  }
  if (k.sizes[3] != p.D) {
    fail(ErrorCode::invalid_argument, call, "k", "head dim " + std::to_string(p.D) + " (q's)",
         "shape " + shape_string(k));
  }
  if (v.sizes[0] != k.sizes[0] || v.sizes[1] != k.sizes[1] || v.sizes[2] != k.sizes[2] ||
      v.sizes[3] != k.sizes[3]) {
    fail(ErrorCode::invalid_argument, call, "v", "the shape of k " + shape_string(k),
         shape_string(v));
  }
  if (p.D == 0 && p.B * p.Hq * p.Nq > 0) {
    fail(ErrorCode::invalid_argument, call, "q", "head dim D >= 1", shape_string(q));
  }
  // Hq = 0 with Hkv > 0 is rejected too: no query head would write dk and dv.
  if (p.Hkv == 0 ? p.Hq != 0 : (p.Hq % p.Hkv != 0 || p.Hq == 0)) {
    fail(ErrorCode::invalid_argument, call, "k",
         "a number of kv heads that divides the " + std::to_string(p.Hq) + " query heads",
         std::to_string(p.Hkv) + " kv heads");
  }
  if (static_cast<std::uint64_t>(p.B) * static_cast<std::uint64_t>(p.Hq) > 0xFFFFFFFFull ||
      p.Nq > 0xFFFFFFFFll || p.Nk > 0xFFFFFFFFll) {
    fail(ErrorCode::invalid_argument, call, "q",
         "B*Hq, Nq and Nk each below 2^32", shape_string(q) + " with Nk " +
                                                 std::to_string(p.Nk));
  }

  // Options.
  const float scale = options.softmax_scale;
  if (std::isnan(scale) || scale <= 0.0f) {
    p.scale = p.D > 0 ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.D))) : 1.0f;
  } else if (!std::isfinite(scale)) {
    fail(ErrorCode::invalid_argument, call, "options.softmax_scale",
         "a finite positive scale (or NaN/0 for the default)", std::to_string(scale));
  } else {
    p.scale = scale;
  }
  if (!(options.softcap >= 0.0f) || !std::isfinite(options.softcap)) {
    fail(ErrorCode::invalid_argument, call, "options.softcap", "a finite value >= 0 (0 = off)",
         std::to_string(options.softcap));
  }
  p.softcap = options.softcap;
  if (!(options.dropout_p >= 0.0f && options.dropout_p < 1.0f)) {
    fail(ErrorCode::invalid_argument, call, "options.dropout_p", "a probability in [0, 1)",
         std::to_string(options.dropout_p));
  }
  p.dropout = make_dropout_params(options.dropout_p, options.seed, options.offset);

  for (const auto& [name, w] : {std::pair<const char*, std::int64_t>{"options.window_left",
                                                                      options.window_left},
                                {"options.window_right", options.window_right}}) {
    if (w < 0 && w != kUnbounded) {
      fail(ErrorCode::invalid_argument, call, name, "a key count >= 0, or -1 for unbounded",
           std::to_string(w));
    }
  }
  if (options.causal && options.window_right != kUnbounded && options.window_right != 0) {
    fail(ErrorCode::invalid_argument, call, "options.window_right",
         "-1 or 0 with causal=true (causal already hides every key right of the diagonal)",
         std::to_string(options.window_right));
  }
  if (options.alignment != Alignment::top_left && options.alignment != Alignment::bottom_right) {
    fail(ErrorCode::invalid_argument, call, "options.alignment", "top_left or bottom_right",
         "code " + std::to_string(static_cast<int>(options.alignment)));
  }
  p.mask.shift = options.alignment == Alignment::bottom_right ? p.Nk - p.Nq : 0;
  // Windows of kNoLimit (2^60) keys or more are unbounded; clamping keeps i + shift + right in
  // the mask arithmetic far from int64 overflow (a window of INT64_MAX would wrap).
  auto limit = [](std::int64_t w) { return w == kUnbounded || w > kNoLimit ? kNoLimit : w; };
  p.mask.left = limit(options.window_left);
  p.mask.right = limit(options.window_right);
  if (options.causal) p.mask.right = 0;

  // FP8 (e4m3) inputs: descales, and what the FP8 forward leaves out.
  check_descale(call, "options.q_descale", options.q_descale, p);
  check_descale(call, "options.k_descale", options.k_descale, p);
  check_descale(call, "options.v_descale", options.v_descale, p);
  if (p.dtype == DType::e4m3) {
    if (options.dropout_p > 0.0f) {
      fail(ErrorCode::unsupported, call, "options.dropout_p",
           "0 with e4m3 inputs (the FP8 forward has no dropout)", std::to_string(options.dropout_p));
    }
    if (options.softcap > 0.0f) {
      fail(ErrorCode::unsupported, call, "options.softcap",
           "0 with e4m3 inputs (the FP8 forward has no soft-capping)",
           std::to_string(options.softcap));
    }
  }
  return p;
}

void validate_fp8_output(const char* call, const TensorView& o, const TensorView& q,
                         Problem& problem) {
  if (o.dtype != DType::f16 && o.dtype != DType::bf16) {
    fail(ErrorCode::invalid_argument, call, "o", "dtype f16 or bf16 (the output of e4m3 inputs)",
         to_string(o.dtype));
  }
  problem.out_dtype = o.dtype;
  Problem like = problem;
  like.dtype = o.dtype;
  validate_like(call, "o", o, q, like, Role::output);
}

void validate_like(const char* call, const char* name, const TensorView& t,
                   const TensorView& like, const Problem& problem, Role role) {
  check_view(call, name, t, 4, "of the shape of its input");
  if (role == Role::output) check_output_strides(call, name, t);
  for (int i = 0; i < 4; ++i) {
    if (t.sizes[i] != like.sizes[i]) {
      fail(ErrorCode::invalid_argument, call, name, "shape " + shape_string(like),
           shape_string(t));
    }
  }
  if (t.dtype != problem.dtype) {
    fail(ErrorCode::invalid_argument, call, name,
         std::string("dtype ") + to_string(problem.dtype) + " (the dtype of q)",
         to_string(t.dtype));
  }
  if (!(t.device == problem.device)) {
    fail(ErrorCode::invalid_argument, call, name,
         "device " + device_string(problem.device) + " (the device of q)",
         device_string(t.device));
  }
}

void validate_lse(const char* call, const TensorView& lse, const Problem& problem,
                  Backend backend) {
  check_view(call, "lse", lse, 3, "[B, Hq, Nq] float32");
  check_output_strides(call, "lse", lse);
  if (lse.sizes[0] != problem.B || lse.sizes[1] != problem.Hq || lse.sizes[2] != problem.Nq) {
    fail(ErrorCode::invalid_argument, call, "lse",
         "shape [" + std::to_string(problem.B) + ", " + std::to_string(problem.Hq) + ", " +
             std::to_string(problem.Nq) + "]",
         shape_string(lse));
  }
  const bool ok = lse.dtype == DType::f32 ||
                  (lse.dtype == DType::f64 && backend == Backend::cpu_reference);
  if (!ok) {
    fail(ErrorCode::invalid_argument, call, "lse", "dtype f32", to_string(lse.dtype));
  }
  if (!(lse.device == problem.device)) {
    fail(ErrorCode::invalid_argument, call, "lse",
         "device " + device_string(problem.device) + " (the device of q)",
         device_string(lse.device));
  }
}

Backend choose_backend(const char* call, const Problem& problem, const Options& options,
                       Direction direction) {
  Backend b = options.backend;
  if (b == Backend::automatic) {
    b = problem.device.type == DeviceType::cuda ? Backend::cuda : Backend::cpu;
  }
  if (direction == Direction::backward && problem.dtype == DType::e4m3) {
    fail(ErrorCode::unsupported, call, "q",
         "dtype f32, f16 or bf16 (a backward through an FP8 forward is not supported: "
         "e4m3 is a forward-only dtype)",
         "e4m3");
  }
  switch (b) {
    case Backend::cpu:
    case Backend::cpu_reference:
      if (problem.device.type != DeviceType::cpu) {
        fail(ErrorCode::invalid_argument, call, "options.backend",
             "tensors on the cpu for a CPU backend", "tensors on " + device_string(problem.device));
      }
      if (b == Backend::cpu && problem.dtype == DType::f64) {
        fail(ErrorCode::unsupported, call, "q",
             "dtype f32, f16 or bf16 (f64 is for Backend::cpu_reference only)", "f64");
      }
      break;
    case Backend::cuda: {
      if (problem.device.type != DeviceType::cuda) {
        fail(ErrorCode::invalid_argument, call, "options.backend",
             "tensors on a CUDA device for the CUDA backend",
             "tensors on " + device_string(problem.device));
      }
      std::string why = flashpp::cuda::unsupported_reason(problem, direction == Direction::backward);
      if (!why.empty()) throw Error(ErrorCode::unsupported, std::string(call) + ": " + why);
      break;
    }
    default:
      fail(ErrorCode::invalid_argument, call, "options.backend",
           "automatic, cpu, cuda or cpu_reference",
           "code " + std::to_string(static_cast<int>(b)));
  }
  return b;
}

void validate_workspace(const char* call, const Workspace& ws, std::size_t needed) {
  if (ws.data == nullptr && ws.bytes == 0) return;  // flashpp allocates
  if (ws.data == nullptr) {
    fail(ErrorCode::invalid_argument, call, "workspace", "non-null data with bytes > 0",
         "nullptr with " + std::to_string(ws.bytes) + " bytes");
  }
  if (ws.bytes < needed) {
    fail(ErrorCode::invalid_argument, call, "workspace",
         "at least " + std::to_string(needed) + " bytes", std::to_string(ws.bytes) + " bytes");
  }
}

}  // namespace flashpp::detail

namespace flashpp::detail {

void fail_argument(ErrorCode code, const char* call, const std::string& name,
                   const std::string& expected, const std::string& got) {
  fail(code, call, name, expected, got);
}
void check_tensor(const char* call, const char* name, const TensorView& t, int rank,
                  const char* dims) {
  check_view(call, name, t, rank, dims);
}
void check_output_tensor(const char* call, const char* name, const TensorView& t) {
  check_output_strides(call, name, t);
}
std::string shape_of(const TensorView& t) { return shape_string(t); }
std::string device_name(const Device& d) { return device_string(d); }

}  // namespace flashpp::detail
