// Every op of tensor/ops.h against a float64 reference on random inputs, once per backend.
//
// Inputs and sizes are drawn fresh each run (sizes deliberately not multiples of anything); the
// seed is printed with every failure so a failing case can be replayed with OMNI_OPS_TEST_SEED.
// A backend joins by adding itself to backends() with its device and activation dtype. Inputs
// are rounded to that dtype before the float64 reference sees them, so the tolerances measure the
// op's own error: float32 ones from each test, widened per dtype to a few units of its last place
// (CTranslate2's per-dtype tolerances). CUDA backends skip, saying why, where no GPU is visible.
#include "tensor/ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "base/error.h"
#include "tensor/backend.h"
#include "tensor/sample_packed.h"

namespace omni::tensor {
namespace {

struct Backend {
  std::string name;
  Device device;
  DType dtype;  // of activations and weights
  // Floors under each test's float32 tolerances: about four units in the last place of dtype.
  double atol;
  double rtol;
};

// GoogleTest looks this name up to print test parameters.
// NOLINTNEXTLINE(readability-identifier-naming)
void PrintTo(const Backend& backend, std::ostream* os) { *os << backend.name; }

std::vector<Backend> backends() {
  return {Backend{"cpu", Device::cpu(), DType::kF32, 0.0, 0.0},
          Backend{"cuda_f32", Device::cuda(0), DType::kF32, 0.0, 0.0},
          Backend{"cuda_bf16", Device::cuda(0), DType::kBF16, 1e-5, 1.0 / 128},
          Backend{"cuda_f16", Device::cuda(0), DType::kF16, 1e-6, 1.0 / 512}};
}

// `value` as the nearest element of `dtype` (float32, bfloat16 or float16) would hold it.
float round_to(DType dtype, float value) {
  if (dtype == DType::kBF16) return bf16_to_f32(f32_to_bf16(value));
  if (dtype == DType::kF16) return f16_to_f32(f32_to_f16(value));
  return value;
}

// Host float32 -> device tensor of `dtype`; int tensors keep their type.
Tensor upload(const Tensor& host, const Backend& backend) {
  if (host.dtype() != DType::kF32 || backend.dtype == DType::kF32) return host.to(backend.device);
  Tensor narrow = Tensor::empty(host.shape(), backend.dtype);
  const float* src = host.data<float>();
  uint16_t* dst = narrow.data<uint16_t>();
  for (int64_t i = 0; i < host.numel(); ++i) {
    dst[i] = backend.dtype == DType::kBF16 ? f32_to_bf16(src[i]) : f32_to_f16(src[i]);
  }
  return narrow.to(backend.device);
}

// Device tensor -> host, 16-bit floats widened to float32.
Tensor download(const Tensor& dev) {
  Tensor host = dev.to(Device::cpu());
  if (host.dtype() != DType::kBF16 && host.dtype() != DType::kF16) return host;
  Tensor wide = Tensor::empty(host.shape(), DType::kF32);
  convert_to_f32(host.dtype(), host.raw(), wide.data<float>(), static_cast<size_t>(host.numel()));
  return wide;
}

uint64_t seed_for_test() {
  if (const char* fixed = std::getenv("OMNI_OPS_TEST_SEED")) return std::strtoull(fixed, nullptr, 10);
  return std::random_device{}() ^ (static_cast<uint64_t>(std::random_device{}()) << 32);
}

class OpsTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    if (GetParam().device.type == DeviceType::kCuda) {
      if (compiled_backends().find("cuda") == std::string::npos) GTEST_SKIP() << "this build has no CUDA backend";
      if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible to this process";
    }
    seed_ = seed_for_test();
    rng_.seed(seed_);
  }

  void TearDown() override {
    if (HasFailure()) std::printf("failed with %s\n", trace().c_str());
  }

  std::string trace() const { return "backend " + GetParam().name + ", OMNI_OPS_TEST_SEED=" + std::to_string(seed_); }

  int size(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  // Host float32 tensor of N(0, scale^2) values rounded to the backend's dtype, plus the same
  // values as doubles.
  Tensor random(const Shape& shape, std::vector<double>& values, double scale = 1.0) {
    Tensor t = Tensor::empty(shape, DType::kF32);
    std::normal_distribution<float> normal(0.0f, static_cast<float>(scale));
    values.resize(t.numel());
    for (int64_t i = 0; i < t.numel(); ++i) {
      t.data<float>()[i] = round_to(GetParam().dtype, normal(rng_));
      values[i] = t.data<float>()[i];
    }
    return t;
  }

  Tensor ints(const Shape& shape, const std::vector<int32_t>& values) {
    Tensor t = Tensor::empty(shape, DType::kI32);
    std::copy(values.begin(), values.end(), t.data<int32_t>());
    return t;
  }

  Tensor dev(const Tensor& host) { return upload(host, GetParam()); }
  // Zeroed output on the backend: floating ones (the default) in the backend's dtype.
  Tensor out(const Shape& shape, DType dtype = DType::kF32) { return upload(Tensor::zeros(shape, dtype), GetParam()); }

  // |got - want| <= atol + rtol * scale[i] for every element (scale defaults to |want|).
  void expect_close(const Tensor& got_dev, const std::vector<double>& want, double atol, double rtol,
                    const std::vector<double>& scale = {}) {
    Tensor got = download(got_dev);
    ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size())) << trace();
    atol = std::max(atol, GetParam().atol);
    rtol = std::max(rtol, GetParam().rtol);
    double worst = 0.0, max_error = 0.0, max_ratio = 0.0;
    int64_t worst_at = -1;
    for (size_t i = 0; i < want.size(); ++i) {
      const double s = scale.empty() ? std::abs(want[i]) : scale[i];
      const double error = std::abs(got.data<float>()[i] - want[i]);
      const double excess = error - (atol + rtol * s);
      max_error = std::max(max_error, error);
      if (atol + rtol * s > 0.0) max_ratio = std::max(max_ratio, error / (atol + rtol * s));
      if (excess > worst) {
        worst = excess;
        worst_at = static_cast<int64_t>(i);
      }
    }
    // OMNI_OPS_TEST_REPORT=1 prints the error of every comparison (scripts/gpu/run_on_gpu.sh sets it).
    if (std::getenv("OMNI_OPS_TEST_REPORT") != nullptr) {
      std::printf("[error] %s %s: max |error| %.3g, %.2f of the tolerance\n", GetParam().name.c_str(),
                  ::testing::UnitTest::GetInstance()->current_test_info()->name(), max_error, max_ratio);
    }
    EXPECT_LT(worst_at, 0) << "element " << worst_at << ": got " << got.data<float>()[std::max<int64_t>(worst_at, 0)]
                           << ", want " << want[std::max<int64_t>(worst_at, 0)] << " (shape "
                           << shape_to_string(got.shape()) << "), " << trace();
  }

  // padding_rows >= 0: every query is one token and the batch runs through paged_decode_attention
  // with that many padding rows after the real ones (which must come out zero), block tables as one
  // [rows, width] tensor (width = the longest table plus extra_width) on the backend.
  void check_paged_attention(int kv_heads, int group, int hd, int block, const std::vector<int>& context,
                             const std::vector<int>& query, int window, int padding_rows = -1, int extra_width = 0);

  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
};

// Ids may be on the op's device or on the host (uploaded by the dispatcher without a synchronisation).
TEST_P(OpsTest, EmbeddingCopiesTheRowsOfTheIds) {
  for (bool ids_on_host : {false, true}) {
    const int vocab = size(3, 301), hidden = size(1, 97), tokens = size(1, 29);
    std::vector<double> table;
    Tensor t = random({vocab, hidden}, table);
    std::vector<int32_t> ids(tokens);
    for (auto& id : ids) id = size(0, vocab - 1);
    Tensor o = out({tokens, hidden});
    const Tensor host_ids = ints({tokens}, ids);
    ops::embedding(dev(t), ids_on_host ? host_ids : dev(host_ids), o);
    std::vector<double> want;
    for (int32_t id : ids) want.insert(want.end(), table.begin() + id * hidden, table.begin() + (id + 1) * hidden);
    SCOPED_TRACE(ids_on_host ? "ids on the host" : "ids on the device");
    expect_close(o, want, 0.0, 0.0);
  }
}

// A token's rows may repeat and rows may be read by several tokens (a mixture-of-experts combine).
TEST_P(OpsTest, GatherWeightedSumAddsTheWeightedRowsOfEachToken) {
  for (bool index_on_host : {false, true}) {
    const int rows = size(2, 41), hidden = size(1, 67), tokens = size(1, 23), k = size(1, 4);
    std::vector<double> src, weights;
    Tensor s = random({rows, hidden}, src);
    Tensor w = random({tokens, k}, weights);
    std::vector<int32_t> index(tokens * k);
    for (auto& i : index) i = size(0, rows - 1);
    Tensor o = out({tokens, hidden});
    const Tensor host_index = ints({tokens, k}, index);
    ops::gather_weighted_sum(dev(s), index_on_host ? host_index : dev(host_index), dev(w), o);
    std::vector<double> want(static_cast<size_t>(tokens) * hidden, 0.0);
    for (int t = 0; t < tokens; ++t) {
      for (int j = 0; j < k; ++j) {
        for (int h = 0; h < hidden; ++h)
          want[t * hidden + h] += weights[t * k + j] * src[index[t * k + j] * hidden + h];
      }
    }
    SCOPED_TRACE(index_on_host ? "index on the host" : "index on the device");
    expect_close(o, want, 1e-6, 1e-5);
  }
  const Tensor bad = ints({1, 2}, {0, 3});
  Tensor o = out({1, 2});
  std::vector<double> unused;
  try {
    ops::gather_weighted_sum(dev(random({3, 2}, unused)), bad, dev(random({1, 2}, unused)), o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("index [0, 1] = 3 is outside src's 3 rows"), std::string::npos) << e.what();
  }
}

// Host ids are checked by the dispatcher before anything runs; ids already on a GPU by the kernel,
// whose error surfaces at the next synchronisation (here the download), with the same message.
// Either way the next valid call works.
TEST_P(OpsTest, EmbeddingRejectsIdsOutsideTheVocabulary) {
  std::vector<double> table;
  Tensor t = dev(random({7, 3}, table));
  for (bool ids_on_host : {true, false}) {
    SCOPED_TRACE(ids_on_host ? "ids on the host" : "ids on the device");
    const Tensor bad = ints({2}, {1, 7});
    Tensor o = out({2, 3});
    try {
      ops::embedding(t, ids_on_host ? bad : dev(bad), o);
      download(o);
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("token id 7 at index 1 is outside the vocabulary [0, 7)"), std::string::npos)
          << e.what();
    }
    Tensor good = out({1, 3});
    ops::embedding(t, dev(ints({1}, {6})), good);
    expect_close(good, {table[18], table[19], table[20]}, 0.0, 0.0);
  }
}

TEST_P(OpsTest, RmsNormMatchesReferenceAndWorksInPlace) {
  const int rows = size(1, 23), d = size(2, 211);
  const double eps = 1e-6;
  std::vector<double> x, w;
  Tensor xt = random({rows, d}, x, 3.0);
  Tensor wt = random({d}, w);
  std::vector<double> want(x.size());
  for (int r = 0; r < rows; ++r) {
    double ms = 0.0;
    for (int i = 0; i < d; ++i) ms += x[r * d + i] * x[r * d + i];
    const double inv = 1.0 / std::sqrt(ms / d + eps);
    for (int i = 0; i < d; ++i) want[r * d + i] = x[r * d + i] * inv * w[i];
  }
  Tensor o = out({rows, d});
  ops::rms_norm(dev(xt), dev(wt), static_cast<float>(eps), o);
  expect_close(o, want, 1e-6, 1e-5);
  Tensor in_place = dev(xt);
  ops::rms_norm(in_place, dev(wt), static_cast<float>(eps), in_place);
  expect_close(in_place, want, 1e-6, 1e-5);
}

TEST_P(OpsTest, AddRmsNormUpdatesTheResidualAndNormalisesIt) {
  const int rows = size(1, 19), d = size(2, 301);
  const double eps = 1e-6;
  std::vector<double> x, r, w;
  Tensor xt = random({rows, d}, x, 2.0), rt = random({rows, d}, r, 2.0), wt = random({d}, w);
  std::vector<double> sum(x.size()), want(x.size()), sum_scale(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    sum[i] = x[i] + r[i];
    sum_scale[i] = std::abs(x[i]) + std::abs(r[i]);
  }
  for (int row = 0; row < rows; ++row) {
    double ms = 0.0;
    for (int i = 0; i < d; ++i) ms += sum[row * d + i] * sum[row * d + i];
    const double inv = 1.0 / std::sqrt(ms / d + eps);
    for (int i = 0; i < d; ++i) want[row * d + i] = sum[row * d + i] * inv * w[i];
  }
  Tensor residual = dev(rt), o = out({rows, d});
  ops::add_rms_norm(dev(xt), residual, dev(wt), static_cast<float>(eps), o);
  expect_close(residual, sum, 1e-6, 1e-6, sum_scale);
  // The rounding of the residual to the dtype carries into the normalised row: twice the tolerance.
  std::vector<double> twice(want.size());
  for (size_t i = 0; i < want.size(); ++i) twice[i] = 2.0 * std::abs(want[i]);
  expect_close(o, want, 1e-6, 1e-5, twice);
}

TEST_P(OpsTest, AddRmsNormRejectsAnOutputAliasingTheResidual) {
  std::vector<double> v;
  Tensor residual = dev(random({2, 4}, v));
  try {
    ops::add_rms_norm(dev(random({2, 4}, v)), residual, dev(random({4}, v)), 1e-6f, residual);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("add_rms_norm: out must not alias residual"), std::string::npos) << e.what();
  }
}

TEST_P(OpsTest, OpsRejectMixedDtypesNamingThem) {
  std::vector<double> v;
  Tensor x = dev(random({2, 3}, v));
  Tensor o = Tensor::zeros({2, 3}, DType::kI32, GetParam().device);
  try {
    ops::add(x, x, o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("add: out is int32 but a is " + std::string(dtype_name(GetParam().dtype))),
              std::string::npos)
        << e.what();
  }
}

// Reference x @ w^T + b with, per element, sum |x_k w_k| as the scale of the rounding error.
void reference_linear(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>* b, int m,
                      int n, int k, std::vector<double>& want, std::vector<double>& scale) {
  want.assign(m * n, 0.0);
  scale.assign(m * n, 0.0);
  for (int r = 0; r < m; ++r) {
    for (int c = 0; c < n; ++c) {
      double acc = b ? (*b)[c] : 0.0, mag = b ? std::abs((*b)[c]) : 0.0;
      for (int i = 0; i < k; ++i) {
        acc += x[r * k + i] * w[c * k + i];
        mag += std::abs(x[r * k + i] * w[c * k + i]);
      }
      want[r * n + c] = acc;
      scale[r * n + c] = mag;
    }
  }
}

TEST_P(OpsTest, LinearMatchesReferenceForOneTokenAndForMany) {
  for (int m : {1, size(2, 37)}) {
    for (bool with_bias : {false, true}) {
      const int n = size(1, 193), k = size(1, 263);
      std::vector<double> x, w, b, want, scale;
      Tensor xt = random({m, k}, x), wt = random({n, k}, w), bt = random({n}, b);
      reference_linear(x, w, with_bias ? &b : nullptr, m, n, k, want, scale);
      Tensor o = out({m, n});
      ops::linear(dev(xt), dev(wt), with_bias ? dev(bt) : Tensor(), o);
      SCOPED_TRACE("m=" + std::to_string(m) + " bias=" + std::to_string(with_bias));
      expect_close(o, want, 1e-6, 1e-5, scale);
    }
  }
}

TEST_P(OpsTest, MatmulMatchesReferenceWithAndWithoutTransposedB) {
  for (int m : {1, size(2, 41)}) {
    for (bool transpose_b : {false, true}) {
      const int n = size(1, 71), k = size(1, 131);
      std::vector<double> a, b, want, scale;
      Tensor at = random({m, k}, a);
      Tensor bt = random(transpose_b ? Shape{n, k} : Shape{k, n}, b);
      // Reference on b laid out as [n, k].
      std::vector<double> bn(n * k);
      for (int c = 0; c < n; ++c)
        for (int i = 0; i < k; ++i) bn[c * k + i] = transpose_b ? b[c * k + i] : b[i * n + c];
      reference_linear(a, bn, nullptr, m, n, k, want, scale);
      Tensor o = out({m, n});
      ops::matmul(dev(at), dev(bt), transpose_b, o);
      SCOPED_TRACE("m=" + std::to_string(m) + " transpose_b=" + std::to_string(transpose_b));
      expect_close(o, want, 1e-6, 1e-5, scale);
    }
  }
}

TEST_P(OpsTest, LinearRejectsMismatchedShapesNamingThem) {
  std::vector<double> v;
  Tensor o = out({2, 5});
  try {
    ops::linear(dev(random({2, 3}, v)), dev(random({5, 4}, v)), Tensor(), o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("linear: x [2, 3] does not match weight [5, 4]"), std::string::npos)
        << e.what();
  }
}

// The frequency slot -> stream assignment written the way Hugging Face builds it (whole-table
// slicing), independently of the kernel's per-slot rule.
std::vector<int> reference_streams(ops::RopeLayout layout, std::array<int, 3> section, int half) {
  std::vector<int> stream(half, 0);
  if (layout == ops::RopeLayout::kMropeSectioned) {
    int slot = 0;
    for (int s = 0; s < 3; ++s)
      for (int i = 0; i < section[s]; ++i) stream[slot++] = s;
  } else if (layout == ops::RopeLayout::kMropeInterleaved) {
    for (int s = 1; s < 3; ++s)
      for (int i = s; i < section[s] * 3; i += 3) stream[i] = s;
  }
  return stream;
}

TEST_P(OpsTest, RotaryEmbeddingMatchesReferenceForNeoxAndBothMrope) {
  for (auto layout : {ops::RopeLayout::kNeox, ops::RopeLayout::kMropeSectioned, ops::RopeLayout::kMropeInterleaved}) {
    const int tokens = size(1, 19), heads = size(1, 7), half = size(3, 37), hd = 2 * half;
    ops::RopeSpec spec;
    spec.layout = layout;
    spec.theta = std::uniform_real_distribution<float>(100.0f, 1e6f)(rng_);
    const int s1 = size(1, half / 3), s2 = size(0, half / 3);
    spec.mrope_section = {half - s1 - s2, s1, s2};
    const int streams = layout == ops::RopeLayout::kNeox ? 1 : 3;
    std::vector<int32_t> pos(streams * tokens);
    for (auto& p : pos) p = size(0, 999);
    std::vector<double> x;
    Tensor xt = random({tokens, heads, hd}, x);
    const std::vector<int> stream = reference_streams(layout, spec.mrope_section, half);
    std::vector<double> want(x.size()), scale(x.size());
    for (int t = 0; t < tokens; ++t) {
      for (int h = 0; h < heads; ++h) {
        const double* v = &x[(t * heads + h) * hd];
        for (int i = 0; i < half; ++i) {
          const double p = pos[stream[i] * tokens + t];
          const double angle = p * std::pow(static_cast<double>(spec.theta), -2.0 * i / hd);
          const size_t at = (t * heads + h) * hd + i;
          want[at] = v[i] * std::cos(angle) - v[i + half] * std::sin(angle);
          want[at + half] = v[i + half] * std::cos(angle) + v[i] * std::sin(angle);
          // float32 angles carry an error of a few ulp of the angle itself.
          scale[at] = scale[at + half] = std::hypot(v[i], v[i + half]) * (1.0 + angle * 1e-2);
        }
      }
    }
    Tensor xd = dev(xt);
    ops::rotary_embedding(xd, dev(ints(streams == 1 ? Shape{tokens} : Shape{3, tokens}, pos)), spec);
    SCOPED_TRACE("layout " + std::to_string(static_cast<int>(layout)) + " section [" +
                 std::to_string(spec.mrope_section[0]) + "," + std::to_string(s1) + "," + std::to_string(s2) + "]");
    expect_close(xd, want, 1e-6, 2e-5, scale);
  }
}

// Float positions (fractional M-RoPE positions, as Qwen3-Omni's 1.5 fps video gives) are host
// values that every backend rotates by as they are; a position that is not finite is refused.
TEST_P(OpsTest, RotaryEmbeddingTakesFloatHostPositions) {
  const int tokens = size(2, 9), heads = size(1, 3), half = 12, hd = 2 * half;
  ops::RopeSpec spec;
  spec.layout = ops::RopeLayout::kMropeInterleaved;
  spec.theta = 10000.0f;
  spec.mrope_section = {4, 4, 4};
  for (bool fractional : {false, true}) {
    std::vector<float> pos(3 * tokens);
    for (size_t i = 0; i < pos.size(); ++i)
      pos[i] = static_cast<float>(size(0, 200)) + (fractional ? 17.0f / 3.0f : 0.0f);
    Tensor positions = Tensor::empty({3, tokens}, DType::kF32);
    std::copy(pos.begin(), pos.end(), positions.data<float>());
    std::vector<double> x;
    Tensor xd = dev(random({tokens, heads, hd}, x));
    const std::vector<int> stream = reference_streams(spec.layout, spec.mrope_section, half);
    std::vector<double> want(x.size()), scale(x.size());
    for (int t = 0; t < tokens; ++t) {
      for (int h = 0; h < heads; ++h) {
        const double* v = &x[(t * heads + h) * hd];
        for (int i = 0; i < half; ++i) {
          const double angle = pos[stream[i] * tokens + t] * std::pow(10000.0, -2.0 * i / hd);
          const size_t at = (t * heads + h) * hd + i;
          want[at] = v[i] * std::cos(angle) - v[i + half] * std::sin(angle);
          want[at + half] = v[i + half] * std::cos(angle) + v[i] * std::sin(angle);
          scale[at] = scale[at + half] = std::hypot(v[i], v[i + half]) * (1.0 + angle * 1e-2);
        }
      }
    }
    ops::rotary_embedding(xd, positions, spec);
    SCOPED_TRACE(fractional ? "fractional" : "whole");
    expect_close(xd, want, 1e-6, 2e-5, scale);
  }
  Tensor bad = Tensor::zeros({3, tokens}, DType::kF32);
  bad.data<float>()[1] = std::numeric_limits<float>::infinity();
  Tensor xd = dev(Tensor::zeros({tokens, heads, hd}, DType::kF32));
  EXPECT_THROW(ops::rotary_embedding(xd, bad, spec), Error);
}

// Each of the nh heads of x [tokens, nh, hd] normalised with w (when with_norm), then rotated (NeoX)
// at pos[t], in float64; scale is each element's magnitude before the rotation, its angle's error
// allowance folded in.
void norm_rope_reference(const std::vector<double>& x, const std::vector<double>& w, int tokens, int nh, int hd,
                         bool with_norm, double eps, float theta, const std::vector<int32_t>& pos,
                         std::vector<double>& want, std::vector<double>& scale) {
  const int half = hd / 2;
  want.assign(x.size(), 0.0);
  scale.assign(x.size(), 0.0);
  for (int t = 0; t < tokens; ++t) {
    for (int h = 0; h < nh; ++h) {
      const size_t row = (static_cast<size_t>(t) * nh + h) * hd;
      double ms = 0.0;
      for (int i = 0; i < hd; ++i) ms += x[row + i] * x[row + i];
      const double inv = with_norm ? 1.0 / std::sqrt(ms / hd + eps) : 1.0;
      for (int i = 0; i < half; ++i) {
        const double x1 = x[row + i] * inv * (with_norm ? w[i] : 1.0);
        const double x2 = x[row + i + half] * inv * (with_norm ? w[i + half] : 1.0);
        const double angle = pos[t] * std::pow(static_cast<double>(theta), -2.0 * i / hd);
        want[row + i] = x1 * std::cos(angle) - x2 * std::sin(angle);
        want[row + i + half] = x2 * std::cos(angle) + x1 * std::sin(angle);
        scale[row + i] = scale[row + i + half] = std::hypot(x1, x2) * (1.0 + angle * 1e-2);
      }
    }
  }
}

// Each head of q and of k normalised with its weight, then rotated (NeoX); without weights only rotated.
TEST_P(OpsTest, QkNormRopeMatchesNormThenRotation) {
  for (bool with_norm : {true, false}) {
    const int tokens = size(1, 13), heads = size(1, 9), kv_heads = size(1, 4), half = size(1, 70), hd = 2 * half;
    const double eps = 1e-6;
    const float theta = std::uniform_real_distribution<float>(1e3f, 1e6f)(rng_);
    std::vector<double> q, k, qw, kw;
    Tensor qt = random({tokens, heads, hd}, q, 2.0), kt = random({tokens, kv_heads, hd}, k, 2.0);
    Tensor qwt = random({hd}, qw), kwt = random({hd}, kw);
    std::vector<int32_t> pos(tokens);
    for (auto& p : pos) p = size(0, 4000);
    std::vector<double> want_q, scale_q, want_k, scale_k;
    norm_rope_reference(q, qw, tokens, heads, hd, with_norm, eps, theta, pos, want_q, scale_q);
    norm_rope_reference(k, kw, tokens, kv_heads, hd, with_norm, eps, theta, pos, want_k, scale_k);
    Tensor qd = dev(qt), kd = dev(kt);
    ops::qk_norm_rope(qd, kd, with_norm ? dev(qwt) : Tensor(), with_norm ? dev(kwt) : Tensor(), static_cast<float>(eps),
                      ints({tokens}, pos), theta);
    SCOPED_TRACE(with_norm ? "with q/k norm" : "rotation only");
    expect_close(qd, want_q, 1e-6, 2e-5, scale_q);
    expect_close(kd, want_k, 1e-6, 2e-5, scale_k);
  }
}

// The fused attention-input step against the same reference: q_out holds the normalised, rotated
// query heads; the caches hold, at each token's slot, its normalised, rotated key heads and its value
// heads as they were; slots no token names keep their zeros, and so does the slot a padding row (a
// negative device-resident slot) would have taken.
TEST_P(OpsTest, QkvNormRopeStoreWritesQueriesAndTheCaches) {
  const bool device_slots = GetParam().device.type != DeviceType::kCpu;
  for (bool with_norm : {true, false}) {
    const int tokens = size(1, 13), kv_heads = size(1, 4), heads = kv_heads * size(1, 3);
    const int hd = 2 * size(1, 70), all = heads + 2 * kv_heads, block = size(1, 5);
    const int num_blocks = (tokens + block - 1) / block + size(0, 2);
    const double eps = 1e-6;
    const float theta = std::uniform_real_distribution<float>(1e3f, 1e6f)(rng_);
    std::vector<double> qkv, qw, kw;
    Tensor qkvt = random({tokens, all, hd}, qkv, 2.0);
    Tensor qwt = random({hd}, qw), kwt = random({hd}, kw);
    std::vector<int32_t> pos(tokens), slots(static_cast<size_t>(num_blocks) * block);
    for (auto& p : pos) p = size(0, 4000);
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), rng_);
    slots.resize(tokens);
    if (device_slots && tokens > 1) slots.back() = -1;
    // The heads of qkv split into q [tokens, heads, hd], k and v [tokens, kv_heads, hd].
    const int64_t q_width = static_cast<int64_t>(heads) * hd, kv_width = static_cast<int64_t>(kv_heads) * hd;
    std::vector<double> q, k, v;
    for (int64_t t = 0; t < tokens; ++t) {
      const auto row = qkv.begin() + t * (q_width + 2 * kv_width);
      q.insert(q.end(), row, row + q_width);
      k.insert(k.end(), row + q_width, row + q_width + kv_width);
      v.insert(v.end(), row + q_width + kv_width, row + q_width + 2 * kv_width);
    }
    std::vector<double> want_q, scale_q, rotated_k, scale_rotated_k;
    norm_rope_reference(q, qw, tokens, heads, hd, with_norm, eps, theta, pos, want_q, scale_q);
    norm_rope_reference(k, kw, tokens, kv_heads, hd, with_norm, eps, theta, pos, rotated_k, scale_rotated_k);
    std::vector<double> want_k(static_cast<size_t>(static_cast<int64_t>(num_blocks) * block * kv_width), 0.0);
    std::vector<double> scale_k(want_k.size(), 0.0), want_v(want_k.size(), 0.0);
    for (int64_t t = 0; t < tokens; ++t) {
      if (slots[t] < 0) continue;
      const int64_t from = t * kv_width, to = slots[t] * kv_width;
      std::copy_n(rotated_k.begin() + from, kv_width, want_k.begin() + to);
      std::copy_n(scale_rotated_k.begin() + from, kv_width, scale_k.begin() + to);
      std::copy_n(v.begin() + from, kv_width, want_v.begin() + to);
    }
    Tensor q_out = out({tokens, heads, hd});
    Tensor k_cache = out({num_blocks, block, kv_heads, hd}), v_cache = out({num_blocks, block, kv_heads, hd});
    ops::qkv_norm_rope_store(dev(qkvt), with_norm ? dev(qwt) : Tensor(), with_norm ? dev(kwt) : Tensor(),
                             static_cast<float>(eps), ints({tokens}, pos), theta, dev(ints({tokens}, slots)), q_out,
                             k_cache, v_cache);
    SCOPED_TRACE(with_norm ? "with q/k norm" : "rotation only");
    expect_close(q_out, want_q, 1e-6, 2e-5, scale_q);
    expect_close(k_cache, want_k, 1e-6, 2e-5, scale_k);
    expect_close(v_cache, want_v, 0.0, 0.0);
  }
}

// Host slots fail at once, device slots at the next synchronisation (writing no K/V).
TEST_P(OpsTest, QkvNormRopeStoreRejectsMismatchedShapesAndSlotsNamingThem) {
  std::vector<double> unused;
  Tensor q_out = out({2, 4, 8}), k_cache = out({2, 3, 2, 8}), v_cache = out({2, 3, 2, 8});
  const Tensor positions = ints({2}, {0, 1});
  auto message = [&](const Tensor& qkv, const Tensor& slots) -> std::string {
    try {
      ops::qkv_norm_rope_store(qkv, Tensor(), Tensor(), 1e-6f, positions, 1e4f, slots, q_out, k_cache, v_cache);
      download(k_cache);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      return e.what();
    }
    return "no error";
  };
  // 4 query heads and 2 KV heads need 8 heads per row.
  EXPECT_NE(message(dev(random({2, 7, 8}, unused)), ints({2}, {0, 1}))
                .find("qkv_norm_rope_store: qkv [2, 7, 8] must be [tokens, heads + 2 * kv_heads, head_dim]"),
            std::string::npos);
  for (bool slots_on_host : {true, false}) {
    SCOPED_TRACE(slots_on_host ? "slots on the host" : "slots on the device");
    const Tensor slots = ints({2}, {0, 6});
    EXPECT_NE(message(dev(random({2, 8, 8}, unused)), slots_on_host ? slots : dev(slots))
                  .find("qkv_norm_rope_store: slot 6 of token 1 is outside the cache (6 slots)"),
              std::string::npos);
  }
}

// Fills a paged cache for sequences of the given context and query lengths (blocks handed out in
// a shuffled order, some left unused), runs paged_attention and compares with a float64 reference.
void OpsTest::check_paged_attention(int kv_heads, int group, int hd, int block, const std::vector<int>& context,
                                    const std::vector<int>& query, int window, int padding_rows, int extra_width) {
  const int heads = kv_heads * group;
  const int nseq = static_cast<int>(context.size());
  int total_q = 0, num_blocks = size(0, 5);
  for (int s = 0; s < nseq; ++s) {
    total_q += query[s];
    num_blocks += (context[s] + query[s] + block - 1) / block;
  }
  std::vector<int32_t> free_blocks(num_blocks);
  std::iota(free_blocks.begin(), free_blocks.end(), 0);
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng_);
  std::vector<std::vector<int32_t>> tables(nseq);
  std::vector<std::vector<double>> keys(nseq), values(nseq);  // [len, kv_heads, hd] per sequence
  Tensor k_cache = out({num_blocks, block, kv_heads, hd}), v_cache = out({num_blocks, block, kv_heads, hd});
  for (int s = 0; s < nseq; ++s) {
    const int len = context[s] + query[s];
    for (int b = 0; b < (len + block - 1) / block; ++b) {
      tables[s].push_back(free_blocks.back());
      free_blocks.pop_back();
    }
    Tensor kt = random({len, kv_heads, hd}, keys[s]), vt = random({len, kv_heads, hd}, values[s]);
    std::vector<int32_t> slots(len);
    for (int p = 0; p < len; ++p) slots[p] = tables[s][p / block] * block + p % block;
    ops::store_kv(dev(kt), dev(vt), dev(ints({len}, slots)), k_cache, v_cache);
  }
  std::vector<double> q;
  Tensor qt = random({total_q, heads, hd}, q);
  std::vector<ops::PagedSequence> seqs(nseq);
  std::vector<double> want(q.size()), scale(q.size());
  const double sm_scale = 1.0 / std::sqrt(static_cast<double>(hd));
  int row = 0;
  for (int s = 0; s < nseq; ++s) {
    seqs[s] = {row, query[s], context[s], tables[s]};
    for (int i = 0; i < query[s]; ++i, ++row) {
      const int p = context[s] + i;
      const int first = window > 0 ? std::max(0, p - window + 1) : 0;
      for (int h = 0; h < heads; ++h) {
        const int kvh = h / group;
        std::vector<double> w;
        for (int j = first; j <= p; ++j) {
          double dot = 0.0;
          for (int d = 0; d < hd; ++d) dot += q[(row * heads + h) * hd + d] * keys[s][(j * kv_heads + kvh) * hd + d];
          w.push_back(dot * sm_scale);
        }
        const double mx = *std::max_element(w.begin(), w.end());
        double sum = 0.0;
        for (double& x : w) sum += (x = std::exp(x - mx));
        for (int d = 0; d < hd; ++d) {
          double acc = 0.0, mag = 0.0;
          for (int j = first; j <= p; ++j) {
            acc += w[j - first] / sum * values[s][(j * kv_heads + kvh) * hd + d];
            mag = std::max(mag, std::abs(values[s][(j * kv_heads + kvh) * hd + d]));
          }
          want[(row * heads + h) * hd + d] = acc;
          scale[(row * heads + h) * hd + d] = mag;
        }
      }
    }
  }
  if (padding_rows >= 0) {
    // Padding rows: random queries, context -1, whatever table; their output must be zero.
    std::vector<double> unused;
    const int rows = total_q + padding_rows;
    Tensor padded_q = random({rows, heads, hd}, unused);
    std::copy_n(qt.data<float>(), qt.numel(), padded_q.data<float>());
    size_t width = 0;
    for (const auto& table : tables) width = std::max(width, table.size());
    width += static_cast<size_t>(extra_width);
    std::vector<int32_t> lens(rows, -1), flat(rows * width, 0);
    for (int s = 0; s < nseq; ++s) {
      lens[s] = context[s];
      std::copy(tables[s].begin(), tables[s].end(), flat.begin() + s * static_cast<int64_t>(width));
    }
    for (int r = nseq; r < rows; ++r) flat[r * width] = static_cast<int32_t>(size(0, num_blocks - 1));
    Tensor o = out({rows, heads, hd});
    ops::paged_decode_attention(dev(padded_q), k_cache, v_cache, dev(ints({rows}, lens)),
                                dev(ints({rows, static_cast<int64_t>(width)}, flat)), static_cast<float>(sm_scale),
                                window, o);
    want.resize(padded_q.numel(), 0.0);
    scale.resize(padded_q.numel(), 0.0);
    SCOPED_TRACE("decode, window " + std::to_string(window) + " heads " + std::to_string(heads) + "/" +
                 std::to_string(kv_heads) + " head_dim " + std::to_string(hd) + " padding " +
                 std::to_string(padding_rows) + " width " + std::to_string(width));
    expect_close(o, want, 1e-6, 2e-5, scale);
    return;
  }
  Tensor o = out({total_q, heads, hd});
  ops::paged_attention(dev(qt), k_cache, v_cache, seqs, static_cast<float>(sm_scale), window, o);
  SCOPED_TRACE("window " + std::to_string(window) + " heads " + std::to_string(heads) + "/" + std::to_string(kv_heads) +
               " head_dim " + std::to_string(hd) + " block " + std::to_string(block));
  expect_close(o, want, 1e-6, 2e-5, scale);
}

TEST_P(OpsTest, PagedAttentionMatchesReferenceWithGqaAndSlidingWindow) {
  for (int window : {0, size(1, 9)}) {
    const int nseq = size(1, 4);
    std::vector<int> context(nseq), query(nseq);
    for (int s = 0; s < nseq; ++s) {
      context[s] = size(0, 40);
      query[s] = size(1, 9);
    }
    check_paged_attention(size(1, 3), size(1, 4), size(1, 37), size(1, 7), context, query, window);
  }
}

// Qwen-like shapes: head_dim 128, groups of 8 and of 20 query heads per kv head (more than one
// block's worth of rows), long contexts with one new token each (the split, flash-decoding path)
// next to a prefill chunk.
TEST_P(OpsTest, PagedAttentionMatchesReferenceForDecodeAndPrefillShapes) {
  check_paged_attention(2, 8, 128, 16, {size(300, 700), size(1, 40), 0}, {1, 1, size(20, 70)}, 0);
  check_paged_attention(1, 20, 64, 16, {size(100, 300), 0}, {1, size(2, 30)}, size(16, 90));
}

// The shapes the specialised CUDA kernels take: decode (one new token) for head_dim 64/128/256 and
// groups of 1 to 8 query heads per kv head; prefill on the tensor cores (head_dim 64/128) with
// prompts spanning several 64-key tiles, partial tiles, sliding windows and decode in one batch.
TEST_P(OpsTest, PagedAttentionMatchesReferenceAcrossHeadSizesAndGroups) {
  for (int hd : {64, 128, 256}) {
    for (int group : {1, 2, 3, 5, 8})
      check_paged_attention(size(1, 2), group, hd, 16, {size(0, 200), size(0, 600)}, {1, 1}, 0);
  }
  check_paged_attention(2, 4, 128, 16, {0, size(1, 100)}, {size(100, 200), size(60, 130)}, 0);
  check_paged_attention(1, 1, 64, 32, {size(0, 50)}, {size(65, 150)}, size(10, 70));
  check_paged_attention(4, 2, 128, 16, {size(0, 100), 300, 0}, {1, size(2, 40), 1}, size(30, 200));
}

// The fixed-size decode form: device-resident context lengths and [rows, width] tables, padding
// rows zeroed, key splits chosen from the table width (long and short contexts in one batch, wide
// tables, GQA groups, sliding windows). On CUDA the head sizes are those its kernel takes.
TEST_P(OpsTest, PagedDecodeAttentionMatchesReferenceWithPaddingRows) {
  if (GetParam().device.type == DeviceType::kCuda && GetParam().dtype == DType::kF32) {
    GTEST_SKIP() << "the cuda decode kernel takes bfloat16/float16 only";
  }
  for (int hd : {16, 32, 64, 128}) {
    for (int group : {1, 2, 8}) {
      const int nseq = size(1, 5);
      std::vector<int> context(nseq), query(nseq, 1);
      for (int& c : context) c = size(0, 400);
      check_paged_attention(size(1, 2), group, hd, 16, context, query, 0, size(0, 3), size(0, 40));
    }
  }
  check_paged_attention(2, 4, 128, 16, {size(200, 500), 3}, {1, 1}, size(10, 90), 2, 8);
  check_paged_attention(1, 8, 64, 16, {0}, {1}, 0, 0, 200);
}

TEST_P(OpsTest, PagedDecodeAttentionRejectsATableTooNarrowForTheContext) {
  Tensor k_cache = out({4, 2, 1, 8}), v_cache = out({4, 2, 1, 8});
  std::vector<double> q;
  Tensor qt = random({1, 2, 8}, q);
  Tensor o = out({1, 2, 8});
  try {
    ops::paged_decode_attention(dev(qt), k_cache, v_cache, ints({1}, {2}), ints({1, 1}, {0}), 1.0f, 0, o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("paged_decode_attention: row 0 needs 2 blocks for 3 tokens, its block table "
                                         "has 1"),
              std::string::npos)
        << e.what();
  }
}

TEST_P(OpsTest, PagedAttentionRejectsAShortBlockTable) {
  Tensor k_cache = out({4, 2, 1, 8}), v_cache = out({4, 2, 1, 8});
  std::vector<double> q;
  Tensor qt = random({3, 2, 8}, q);
  const std::vector<int32_t> table = {0};
  std::vector<ops::PagedSequence> seqs = {{0, 3, 0, table}};
  Tensor o = out({3, 2, 8});
  try {
    ops::paged_attention(dev(qt), k_cache, v_cache, seqs, 1.0f, 0, o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sequence 0 needs 2 blocks for 3 tokens, its block table has 1"),
              std::string::npos)
        << e.what();
  }
}

// As for embedding ids: host slots fail at once, device slots at the next synchronisation, and a
// bad slot writes nothing (the cache keeps its zeros).
TEST_P(OpsTest, StoreKvRejectsSlotsOutsideTheCache) {
  for (bool slots_on_host : {true, false}) {
    SCOPED_TRACE(slots_on_host ? "slots on the host" : "slots on the device");
    Tensor k_cache = out({2, 3, 1, 4}), v_cache = out({2, 3, 1, 4});
    std::vector<double> v;
    Tensor k = dev(random({1, 1, 4}, v, 1.0));
    const Tensor slots = ints({1}, {6});
    try {
      ops::store_kv(k, k, slots_on_host ? slots : dev(slots), k_cache, v_cache);
      download(k_cache);
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("store_kv: slot 6 of token 0 is outside the cache (6 slots)"),
                std::string::npos)
          << e.what();
    }
    if (!slots_on_host) expect_close(k_cache, std::vector<double>(24, 0.0), 0.0, 0.0);
  }
}

TEST_P(OpsTest, SiluAndMulMatchesReference) {
  const int rows = size(1, 17), inter = size(1, 301);
  std::vector<double> x;
  Tensor xt = random({rows, 2 * inter}, x, 4.0);
  std::vector<double> want(rows * inter);
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < inter; ++i) {
      const double g = x[r * 2 * inter + i];
      want[r * inter + i] = g / (1.0 + std::exp(-g)) * x[r * 2 * inter + inter + i];
    }
  Tensor o = out({rows, inter});
  ops::silu_and_mul(dev(xt), o);
  expect_close(o, want, 1e-6, 1e-5);
}

TEST_P(OpsTest, GeluMatchesReferenceExactAndTanh) {
  const int n = size(1, 999);
  std::vector<double> x;
  Tensor xt = random({n}, x, 3.0);
  std::vector<double> exact(n), tanh_approx(n);
  for (int i = 0; i < n; ++i) {
    exact[i] = 0.5 * x[i] * (1.0 + std::erf(x[i] / std::sqrt(2.0)));
    tanh_approx[i] = 0.5 * x[i] * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x[i] + 0.044715 * x[i] * x[i] * x[i])));
  }
  Tensor o = out({n});
  ops::gelu(dev(xt), ops::GeluApproximation::kNone, o);
  expect_close(o, exact, 1e-6, 1e-5);
  ops::gelu(dev(xt), ops::GeluApproximation::kTanh, o);
  expect_close(o, tanh_approx, 1e-6, 1e-5);
}

TEST_P(OpsTest, AddMatchesReference) {
  const int rows = size(1, 13), cols = size(1, 517);
  std::vector<double> a, b;
  Tensor at = random({rows, cols}, a), bt = random({rows, cols}, b);
  std::vector<double> want(a.size());
  for (size_t i = 0; i < a.size(); ++i) want[i] = a[i] + b[i];
  Tensor o = out({rows, cols});
  ops::add(dev(at), dev(bt), o);
  expect_close(o, want, 1e-6, 1e-6);
}

TEST_P(OpsTest, SoftmaxMatchesReference) {
  const int rows = size(1, 11), n = size(1, 1003);
  std::vector<double> x;
  Tensor xt = random({rows, n}, x, 10.0);
  std::vector<double> want(x.size());
  for (int r = 0; r < rows; ++r) {
    const double mx = *std::max_element(x.begin() + r * n, x.begin() + (r + 1) * n);
    double sum = 0.0;
    for (int i = 0; i < n; ++i) sum += std::exp(x[r * n + i] - mx);
    for (int i = 0; i < n; ++i) want[r * n + i] = std::exp(x[r * n + i] - mx) / sum;
  }
  Tensor o = out({rows, n});
  ops::softmax(dev(xt), o);
  expect_close(o, want, 1e-7, 1e-5);
}

TEST_P(OpsTest, ArgmaxAndTopKMatchReference) {
  const int rows = size(1, 9), n = size(2, 733), k = size(1, std::min(n, 50));
  std::vector<double> x;
  Tensor xt = random({rows, n}, x);
  Tensor am = out({rows}, DType::kI32), vals = out({rows, k}), idx = out({rows, k}, DType::kI32);
  ops::argmax(dev(xt), am);
  ops::top_k(dev(xt), k, vals, idx);
  Tensor am_h = download(am), idx_h = download(idx), vals_h = download(vals);
  for (int r = 0; r < rows; ++r) {
    std::vector<int> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return x[r * n + a] > x[r * n + b]; });
    EXPECT_EQ(am_h.data<int32_t>()[r], order[0]) << trace();
    for (int i = 0; i < k; ++i) {
      EXPECT_EQ(idx_h.data<int32_t>()[r * k + i], order[i]) << "row " << r << " rank " << i << ", " << trace();
      EXPECT_EQ(vals_h.data<float>()[r * k + i], static_cast<float>(x[r * n + order[i]])) << trace();
    }
  }
}

TEST_P(OpsTest, ArgmaxAndTopKBreakTiesTowardsTheLowerIndex) {
  Tensor x = Tensor::empty({1, 5}, DType::kF32);
  const float row[] = {1.0f, 3.0f, 2.0f, 3.0f, 2.0f};
  std::copy(row, row + 5, x.data<float>());
  Tensor am = out({1}, DType::kI32), vals = out({1, 4}), idx = out({1, 4}, DType::kI32);
  ops::argmax(dev(x), am);
  ops::top_k(dev(x), 4, vals, idx);
  EXPECT_EQ(download(am).data<int32_t>()[0], 1);
  Tensor ih = download(idx);
  EXPECT_EQ(std::vector<int32_t>(ih.data<int32_t>(), ih.data<int32_t>() + 4), (std::vector<int32_t>{1, 3, 2, 4}));
}

// Vocabulary-length rows (split across blocks on CUDA): the maximum in any slice, ties between
// slices to the lower index, rows whose length is not a whole number of 16-byte chunks.
TEST_P(OpsTest, ArgmaxOfVocabularyRowsTiesAcrossSlicesToTheLowerIndex) {
  for (int n : {151936, 100003}) {
    const int rows = 4;
    std::vector<double> x;
    Tensor xt = random({rows, n}, x);
    float* v = xt.data<float>();
    const int64_t at[rows][2] = {{5000, n - 9000}, {n - 1, -1}, {0, n - 1}, {77777, 77778}};
    for (int r = 0; r < rows; ++r) {
      for (int64_t i : at[r]) {
        if (i >= 0) v[r * int64_t{n} + i] = 100.0f;
      }
    }
    Tensor am = out({rows}, DType::kI32);
    ops::argmax(dev(xt), am);
    const Tensor got = download(am);
    for (int r = 0; r < rows; ++r)
      EXPECT_EQ(got.data<int32_t>()[r], at[r][0]) << "n " << n << " row " << r << ", " << trace();
  }
}

// Penalties are applied to the logits in place (float64 reference), and greedy rows take the
// argmax of what is left.
TEST_P(OpsTest, SampleGreedyTakesTheArgmaxOfThePenalisedLogits) {
  const int rows = size(2, 9), vocab = size(20, 400);
  std::vector<double> x;
  Tensor xt = random({rows, vocab}, x, 2.0);
  std::vector<ops::SamplingParams> params(rows);
  std::vector<std::vector<int32_t>> prompts(rows), outputs(rows);
  std::vector<double> want = x;
  for (int r = 0; r < rows; ++r) {
    auto& p = params[r];
    p.temperature = 0.0f;
    if (r % 2 == 1) continue;  // odd rows: no penalty
    p.repetition_penalty = 1.5f;
    p.presence_penalty = 0.25f;
    p.frequency_penalty = 0.5f;
    for (int i = size(1, 30); i > 0; --i) prompts[r].push_back(size(0, vocab - 1));
    for (int i = size(1, 30); i > 0; --i) outputs[r].push_back(size(0, 9));  // repeats
    p.prompt_tokens = prompts[r];
    p.output_tokens = outputs[r];
    std::vector<int> count(vocab, 0), in_prompt(vocab, 0);
    for (int32_t t : outputs[r]) ++count[t];
    for (int32_t t : prompts[r]) in_prompt[t] = 1;
    for (int t = 0; t < vocab; ++t) {
      double& v = want[static_cast<size_t>(r) * vocab + t];
      if (count[t] > 0 || in_prompt[t]) v = v > 0 ? v / 1.5 : v * 1.5;
      v -= 0.5 * count[t] + (count[t] > 0 ? 0.25 : 0.0);
    }
  }
  Tensor logits = dev(xt), ids = out({rows}, DType::kI32);
  ops::sample(logits, params, ids);
  std::vector<double> scale(want.size());
  for (size_t i = 0; i < want.size(); ++i) scale[i] = std::abs(x[i]) + 1.0;
  expect_close(logits, want, 1e-6, 1e-6, scale);
  const Tensor got = download(logits), got_ids = download(ids);
  for (int r = 0; r < rows; ++r) {
    const float* row = got.data<float>() + static_cast<size_t>(r) * vocab;
    EXPECT_EQ(got_ids.data<int32_t>()[r], std::max_element(row, row + vocab) - row) << "row " << r << ", " << trace();
  }
}

// A row's id depends on its logits and (seed, step) only: alone, in a batch, in another order, with
// the ids on the host or on the device.
TEST_P(OpsTest, SampleIsAPureFunctionOfTheRowAndItsSeed) {
  const int rows = size(3, 12), vocab = size(50, 3000);
  std::vector<double> x;
  Tensor xt = random({rows, vocab}, x, 3.0);
  std::vector<ops::SamplingParams> params(rows);
  for (int r = 0; r < rows; ++r) {
    auto& p = params[r];
    p.temperature = std::uniform_real_distribution<float>(0.5f, 1.5f)(rng_);
    p.top_k = r % 3 == 0 ? 0 : size(1, 60);
    p.top_p = r % 2 == 0 ? 1.0f : std::uniform_real_distribution<float>(0.3f, 1.0f)(rng_);
    p.min_p = r % 4 == 1 ? 0.05f : 0.0f;
    p.seed = rng_();
    p.step = size(0, 1000);
  }
  Tensor ids = out({rows}, DType::kI32);
  Tensor batch_logits = dev(xt);
  ops::sample(batch_logits, params, ids);
  const Tensor batch = download(ids);
  for (int r = rows - 1; r >= 0; --r) {
    Tensor row = dev(xt).slice_rows(r, r + 1);
    Tensor alone = Tensor::empty({1}, DType::kI32);  // on the host
    ops::sample(row, std::span(params).subspan(r, 1), alone);
    EXPECT_EQ(alone.data<int32_t>()[0], batch.data<int32_t>()[r]) << "row " << r << ", " << trace();
  }
  // Successive steps of one seed are fresh draws: over 1000 equally likely ids, 16 steps that all
  // repeated one id would mean the counter is ignored.
  Tensor flat = Tensor::empty({16, 1000}, DType::kF32);
  std::fill(flat.data<float>(), flat.data<float>() + flat.numel(), 0.5f);
  std::vector<ops::SamplingParams> steps(16);
  for (int i = 0; i < 16; ++i) {
    steps[i].seed = 99;
    steps[i].step = i;
  }
  Tensor flat_dev = dev(flat), step_ids = Tensor::empty({16}, DType::kI32);
  ops::sample(flat_dev, steps, step_ids);
  const int32_t* drawn = step_ids.data<int32_t>();
  EXPECT_GT(std::set<int32_t>(drawn, drawn + 16).size(), 8u) << trace();
}

// Many seeds over one row: ids only from the candidates that top-k, top-p and min-p keep, with
// frequencies near their renormalised probabilities (computed here in float64).
TEST_P(OpsTest, SampleDrawsFromTheFilteredDistribution) {
  const std::vector<float> logits = {2.0f, 1.5f, 1.25f, 1.0f, 0.5f, 0.25f, 0.0f, -0.5f, -1.0f, -2.0f, -3.0f, -4.0f};
  const int vocab = static_cast<int>(logits.size()), draws = 4000;
  struct Case {
    float temperature;
    int top_k;
    float top_p, min_p;
  };
  for (const Case c : {Case{1.0f, 6, 0.8f, 0.1f}, Case{2.0f, 0, 1.0f, 0.0f}, Case{0.7f, 3, 1.0f, 0.0f},
                       Case{1.0f, 0, 0.6f, 0.0f}, Case{1.5f, 0, 1.0f, 0.3f}}) {
    // The documented rules in float64: k largest, probability floor, then the top_p nucleus.
    std::vector<double> w(vocab);
    for (int i = 0; i < vocab; ++i) w[i] = std::exp((logits[i] - logits[0]) / c.temperature);
    std::vector<bool> kept(vocab, true);
    for (int i = 0; i < vocab; ++i) {
      if (c.top_k > 0 && i >= c.top_k) kept[i] = false;  // logits are sorted, no ties
      if (w[i] < c.min_p) kept[i] = false;
    }
    double total = 0.0;
    for (int i = 0; i < vocab; ++i) total += kept[i] ? w[i] : 0.0;
    double mass = 0.0;
    for (int i = 0; i < vocab; ++i) {
      if (!kept[i]) continue;
      if (mass >= c.top_p * total) kept[i] = false;
      mass += w[i];
    }
    double kept_total = 0.0;
    for (int i = 0; i < vocab; ++i) kept_total += kept[i] ? w[i] : 0.0;

    Tensor host = Tensor::empty({draws, vocab}, DType::kF32);
    for (int64_t r = 0; r < draws; ++r) std::copy(logits.begin(), logits.end(), host.data<float>() + r * vocab);
    std::vector<ops::SamplingParams> params(draws);
    for (int r = 0; r < draws; ++r) {
      params[r].temperature = c.temperature;
      params[r].top_k = c.top_k;
      params[r].top_p = c.top_p;
      params[r].min_p = c.min_p;
      params[r].seed = 1000 + r;
    }
    Tensor x = dev(host), ids = out({draws}, DType::kI32);
    ops::sample(x, params, ids);
    const Tensor got = download(ids);
    std::vector<int> count(vocab, 0);
    for (int r = 0; r < draws; ++r) {
      const int32_t id = got.data<int32_t>()[r];
      ASSERT_TRUE(id >= 0 && id < vocab && kept[id]) << "drew " << id << " outside the kept set, " << trace();
      ++count[id];
    }
    for (int i = 0; i < vocab; ++i) {
      const double expected = kept[i] ? w[i] / kept_total : 0.0;
      // 4000 draws: one standard deviation is at most 0.008.
      EXPECT_NEAR(static_cast<double>(count[i]) / draws, expected, 0.035)
          << "token " << i << " with temperature " << c.temperature << " top_k " << c.top_k << " top_p " << c.top_p
          << " min_p " << c.min_p << ", " << trace();
    }
  }
}

// Flat distributions, where thousands of tokens decide the cut-offs (the CUDA kernel's bisection
// path): 1500 tokens at logit 1, 2500 at 0 and 1000 at -50, interleaved.
TEST_P(OpsTest, SampleFindsCutOffsAmongThousandsOfCandidates) {
  const int vocab = 5000, draws = 1000;
  std::vector<float> logits(vocab);
  for (int i = 0; i < vocab; ++i) logits[i] = i % 10 < 3 ? 1.0f : i % 10 < 8 ? 0.0f : -50.0f;
  struct Case {
    int top_k;
    float top_p;
    float high_fraction;  // of the draws from the logit-1 tokens; the rest from logit 0
  };
  const double e = std::exp(1.0);
  for (const Case c :
       {Case{0, 0.5f, 1.0f}, Case{1500, 1.0f, 1.0f}, Case{0, 0.7f, static_cast<float>(1500 * e / (1500 * e + 2500))},
        Case{4000, 1.0f, static_cast<float>(1500 * e / (1500 * e + 2500))}}) {
    Tensor host = Tensor::empty({draws, vocab}, DType::kF32);
    for (int64_t r = 0; r < draws; ++r) std::copy(logits.begin(), logits.end(), host.data<float>() + r * vocab);
    std::vector<ops::SamplingParams> params(draws);
    for (int r = 0; r < draws; ++r) {
      params[r].top_k = c.top_k;
      params[r].top_p = c.top_p;
      params[r].seed = 77 + r;
    }
    Tensor x = dev(host), ids = out({draws}, DType::kI32);
    ops::sample(x, params, ids);
    const Tensor got = download(ids);
    int high = 0;
    for (int r = 0; r < draws; ++r) {
      const float v = logits[got.data<int32_t>()[r]];
      ASSERT_NE(v, -50.0f) << "top_k " << c.top_k << " top_p " << c.top_p << ", " << trace();
      if (c.high_fraction == 1.0f) ASSERT_EQ(v, 1.0f) << "top_k " << c.top_k << " top_p " << c.top_p << ", " << trace();
      high += v == 1.0f;
    }
    EXPECT_NEAR(static_cast<double>(high) / draws, c.high_fraction, 0.05)
        << "top_k " << c.top_k << " top_p " << c.top_p << ", " << trace();
  }
}

// Nearly flat logits where top-k keeps few of thousands of candidates (the Qwen3-TTS code
// predictor's draw: 2048 codes, top-k 50, temperature 0.9, top-p 0.8): every draw is in the
// float64 reference's kept set, at its frequency.
TEST_P(OpsTest, SampleTopKOfFewAmongThousandsOfNearlyFlatLogits) {
  const int vocab = 2048, draws = 4000, top_k = 50;
  const float temperature = 0.9f, top_p = 0.8f;
  std::vector<double> x;
  Tensor row = random({1, vocab}, x, 0.5);
  std::vector<int> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return x[a] > x[b]; });
  // The kernels' cut-offs are thresholds on the value, so ties with the k-th (and the last
  // nucleus) value are kept too: the bf16 and f16 backends round many of these logits together.
  std::vector<double> w(vocab);
  for (int i = 0; i < vocab; ++i) w[i] = std::exp((x[i] - x[order[0]]) / temperature);
  const double kth = x[order[top_k - 1]];
  double total = 0.0;
  for (int i = 0; i < vocab; ++i) total += x[i] >= kth ? w[i] : 0.0;
  double mass = 0.0, cut = kth;
  for (int r = 0; r < vocab; ++r) {
    mass += w[order[r]];
    if (mass >= top_p * total) {
      cut = std::max(kth, x[order[r]]);
      break;
    }
  }
  std::vector<bool> kept(vocab);
  double kept_total = 0.0;
  for (int i = 0; i < vocab; ++i) {
    kept[i] = x[i] >= cut;
    kept_total += kept[i] ? w[i] : 0.0;
  }
  Tensor host = Tensor::empty({draws, vocab}, DType::kF32);
  for (int64_t r = 0; r < draws; ++r)
    std::copy(row.data<float>(), row.data<float>() + vocab, host.data<float>() + r * vocab);
  std::vector<ops::SamplingParams> params(draws);
  for (int r = 0; r < draws; ++r) {
    params[r].temperature = temperature;
    params[r].top_k = top_k;
    params[r].top_p = top_p;
    params[r].seed = 5000 + r;
  }
  Tensor logits = dev(host), ids = out({draws}, DType::kI32);
  ops::sample(logits, params, ids);
  const Tensor got = download(ids);
  std::vector<int> count(vocab, 0);
  for (int r = 0; r < draws; ++r) {
    const int32_t id = got.data<int32_t>()[r];
    ASSERT_TRUE(id >= 0 && id < vocab && kept[id]) << "drew " << id << " outside the kept set, " << trace();
    ++count[id];
  }
  for (int i = 0; i < vocab; ++i) {
    if (kept[i]) EXPECT_NEAR(static_cast<double>(count[i]) / draws, w[i] / kept_total, 0.03) << i << ", " << trace();
  }
}

TEST_P(OpsTest, SampleRejectsBadParamsNamingTheRowAndField) {
  std::vector<double> x;
  Tensor logits = dev(random({2, 5}, x));
  Tensor ids = out({2}, DType::kI32);
  std::vector<ops::SamplingParams> params(2);
  params[1].top_p = 0.0f;
  try {
    ops::sample(logits, params, ids);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sample: row 1: top_p = 0 must be in (0, 1]"), std::string::npos) << e.what();
  }
  params[1].top_p = 1.0f;
  const std::vector<int32_t> output = {1, 5};
  params[0].frequency_penalty = 0.5f;
  params[0].output_tokens = output;
  try {
    ops::sample(logits, params, ids);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sample: row 0: output_tokens[1] = 5 is outside the vocabulary [0, 5)"),
              std::string::npos)
        << e.what();
  }
}

// Rows that do not depend on the split of the input, bit for bit, are the CPU's promise (ops.h);
// cuBLASLt picks its algorithm by the shape of a product.
#define OMNI_SKIP_UNLESS_CPU()                                                                         \
  if (GetParam().device.type != DeviceType::kCpu) {                                                    \
    GTEST_SKIP() << "bit-identical rows across splits are the cpu's promise, not " << GetParam().name; \
  }

// Reference causal-free ("valid") convolution of time-major x [t_in, c_in] with weight
// [c_out, c_in / groups, k]; scale gets sum |terms| per element.
void reference_conv1d(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>* b,
                      int t_in, int c_in, int c_out, int k, int dilation, int groups, std::vector<double>& want,
                      std::vector<double>& scale) {
  const int t_out = t_in - (k - 1) * dilation;
  const int per_group = c_in / groups, out_per_group = c_out / groups;
  want.assign(t_out * c_out, 0.0);
  scale.assign(t_out * c_out, 0.0);
  for (int t = 0; t < t_out; ++t) {
    for (int o = 0; o < c_out; ++o) {
      double acc = b ? (*b)[o] : 0.0, mag = b ? std::abs((*b)[o]) : 0.0;
      const int g = o / out_per_group;
      for (int i = 0; i < per_group; ++i) {
        for (int j = 0; j < k; ++j) {
          const double term = w[(o * per_group + i) * k + j] * x[(t + j * dilation) * c_in + g * per_group + i];
          acc += term;
          mag += std::abs(term);
        }
      }
      want[t * c_out + o] = acc;
      scale[t * c_out + o] = mag;
    }
  }
}

TEST_P(OpsTest, Conv1dMatchesReferenceWithDilationGroupsAndBias) {
  for (bool depthwise : {false, true}) {
    for (bool with_bias : {false, true}) {
      const int c_in = size(1, 37), c_out = depthwise ? c_in : size(1, 41), k = size(1, 7), dilation = size(1, 9);
      const int t_in = (k - 1) * dilation + size(1, 70);
      const int groups = depthwise ? c_in : 1;
      std::vector<double> x, w, b, want, scale;
      Tensor xt = random({t_in, c_in}, x), wt = random({c_out, c_in / groups, k}, w), bt = random({c_out}, b);
      reference_conv1d(x, w, with_bias ? &b : nullptr, t_in, c_in, c_out, k, dilation, groups, want, scale);
      Tensor o = out({t_in - (k - 1) * dilation, c_out});
      ops::conv1d(dev(xt), dev(wt), with_bias ? dev(bt) : Tensor(), dilation, groups, o);
      SCOPED_TRACE("depthwise=" + std::to_string(depthwise) + " k=" + std::to_string(k) +
                   " dilation=" + std::to_string(dilation));
      expect_close(o, want, 1e-6, 1e-5, scale);
    }
  }
}

// A stream computes later rows from the last (k - 1) * dilation rows of earlier input; the rows it
// gets must equal those of one call over everything, bit for bit, for any split (this is what
// makes the streaming codec decoder exact).
TEST_P(OpsTest, Conv1dRowsDoNotDependOnHowTheInputIsSplit) {
  OMNI_SKIP_UNLESS_CPU();
  for (bool depthwise : {false, true}) {
    const int c_in = size(8, 96), c_out = depthwise ? c_in : size(1, 130), k = size(1, 7), dilation = size(1, 3);
    const int span = (k - 1) * dilation, t_out = size(30, 700);
    std::vector<double> v;
    Tensor x = random({span + t_out, c_in}, v), w = random({c_out, depthwise ? 1 : c_in, k}, v), b = random({c_out}, v);
    const int groups = depthwise ? c_in : 1;
    Tensor whole = out({t_out, c_out});
    ops::conv1d(x, w, b, dilation, groups, whole);
    for (int first : {1, size(2, t_out - 2), t_out - 1}) {
      Tensor head = out({first, c_out}), tail = out({t_out - first, c_out});
      ops::conv1d(x.slice_rows(0, first + span), w, b, dilation, groups, head);
      ops::conv1d(x.slice_rows(first, t_out + span), w, b, dilation, groups, tail);
      EXPECT_EQ(std::memcmp(head.raw(), whole.raw(), head.nbytes()), 0) << "split at " << first << ", " << trace();
      EXPECT_EQ(std::memcmp(tail.raw(), whole.slice_rows(first, t_out).raw(), tail.nbytes()), 0)
          << "split at " << first << ", " << trace();
    }
  }
}

TEST_P(OpsTest, Conv1dRejectsGroupedConvolutionsThatAreNotDepthwise) {
  std::vector<double> v;
  Tensor o = out({5, 4});
  try {
    ops::conv1d(dev(random({5, 4}, v)), dev(random({4, 2, 1}, v)), Tensor(), 1, 2, o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("conv1d: groups = 2 with 4 input and 4 output channels"), std::string::npos)
        << e.what();
  }
  Tensor short_out = out({1, 3});
  EXPECT_THROW(ops::conv1d(dev(random({2, 3}, v)), dev(random({3, 3, 3}, v)), Tensor(), 1, 1, short_out), Error);
}

// Full transposed convolution of x [t_in, c_in] (weight [c_in, c_out, k]), positions
// [context * stride, t_in * stride).
void reference_conv_transpose1d(const std::vector<double>& x, const std::vector<double>& w,
                                const std::vector<double>* b, int t_in, int c_in, int c_out, int k, int stride,
                                int context, std::vector<double>& want, std::vector<double>& scale) {
  // With k < stride the untrimmed output ends before t_in * stride; the gap holds only the bias.
  const int full = std::max((t_in - 1) * stride + k, t_in * stride);
  std::vector<double> y(full * c_out, 0.0), mag(full * c_out, 0.0);
  for (int t = 0; t < t_in; ++t)
    for (int j = 0; j < k; ++j)
      for (int o = 0; o < c_out; ++o)
        for (int i = 0; i < c_in; ++i) {
          const double term = x[t * c_in + i] * w[(i * c_out + o) * k + j];
          y[(t * stride + j) * c_out + o] += term;
          mag[(t * stride + j) * c_out + o] += std::abs(term);
        }
  want.clear();
  scale.clear();
  for (int p = context * stride; p < t_in * stride; ++p) {
    for (int o = 0; o < c_out; ++o) {
      want.push_back(y[p * c_out + o] + (b ? (*b)[o] : 0.0));
      scale.push_back(mag[p * c_out + o] + (b ? std::abs((*b)[o]) : 0.0));
    }
  }
}

TEST_P(OpsTest, ConvTranspose1dMatchesReferenceTrimmedOnTheRight) {
  for (int stride : {1, 2, size(3, 8)}) {
    for (int k : {stride, 2 * stride, size(1, 3 * stride)}) {
      const int c_in = size(1, 29), c_out = size(1, 31), t_in = size(1, 40), context = size(0, t_in);
      const bool with_bias = size(0, 1) == 1;
      std::vector<double> x, w, b, want, scale;
      Tensor xt = random({t_in, c_in}, x), wt = random({c_in, c_out, k}, w), bt = random({c_out}, b);
      reference_conv_transpose1d(x, w, with_bias ? &b : nullptr, t_in, c_in, c_out, k, stride, context, want, scale);
      Tensor o = out({(t_in - context) * stride, c_out});
      ops::conv_transpose1d(dev(xt), dev(wt), with_bias ? dev(bt) : Tensor(), stride, context, o);
      SCOPED_TRACE("stride=" + std::to_string(stride) + " k=" + std::to_string(k) + " t_in=" + std::to_string(t_in) +
                   " context=" + std::to_string(context));
      expect_close(o, want, 1e-6, 1e-5, scale);
    }
  }
}

TEST_P(OpsTest, ConvTranspose1dRowsDoNotDependOnHowTheInputIsSplit) {
  OMNI_SKIP_UNLESS_CPU();
  const int stride = size(2, 8), k = 2 * stride, c_in = size(8, 200), c_out = size(8, 100), t_in = size(20, 300);
  const int overlap = (k - 1) / stride;  // earlier rows that reach a chunk's first position
  std::vector<double> v;
  Tensor x = random({t_in, c_in}, v), w = random({c_in, c_out, k}, v), b = random({c_out}, v);
  Tensor whole = out({t_in * stride, c_out});
  ops::conv_transpose1d(x, w, b, stride, 0, whole);
  for (int first : {1, size(2, t_in - 2), t_in - 1}) {
    Tensor tail = out({(t_in - first) * stride, c_out});
    ops::conv_transpose1d(x.slice_rows(first - overlap, t_in), w, b, stride, overlap, tail);
    EXPECT_EQ(std::memcmp(tail.raw(), whole.slice_rows(first * stride, t_in * stride).raw(), tail.nbytes()), 0)
        << "split at " << first << ", " << trace();
  }
}

TEST_P(OpsTest, SnakeBetaMatchesReferenceWithLogSpaceParameters) {
  const int rows = size(1, 50), channels = size(1, 97);
  std::vector<double> x, alpha, beta;
  Tensor xt = random({rows, channels}, x, 3.0), at = random({channels}, alpha, 0.5), bt = random({channels}, beta, 0.5);
  std::vector<double> want(x.size()), scale(x.size());
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < channels; ++c) {
      const double v = x[r * channels + c], s = std::sin(std::exp(alpha[c]) * v);
      want[r * channels + c] = v + s * s / (std::exp(beta[c]) + 1e-9);
      // sin of a float32 argument: the argument's rounding moves sin by up to |arg| ulp.
      scale[r * channels + c] = std::abs(v) + std::abs(std::exp(alpha[c]) * v) / (std::exp(beta[c]) + 1e-9);
    }
  Tensor o = dev(xt);
  ops::snake_beta(o, dev(at), dev(bt), o);
  expect_close(o, want, 1e-6, 1e-5, scale);
}

TEST_P(OpsTest, LayerNormMatchesReference) {
  const int rows = size(1, 23), d = size(2, 301);
  const double eps = 1e-6;
  std::vector<double> x, w, b;
  Tensor xt = random({rows, d}, x, 3.0), wt = random({d}, w), bt = random({d}, b);
  for (int i = 0; i < rows * d; ++i) xt.data<float>()[i] += 5.0f, x[i] = xt.data<float>()[i];  // a mean to remove
  std::vector<double> want(x.size()), scale(x.size());
  for (int r = 0; r < rows; ++r) {
    double mean = 0.0, var = 0.0;
    for (int i = 0; i < d; ++i) mean += x[r * d + i] / d;
    for (int i = 0; i < d; ++i) var += (x[r * d + i] - mean) * (x[r * d + i] - mean) / d;
    for (int i = 0; i < d; ++i) {
      const double normed = (x[r * d + i] - mean) / std::sqrt(var + eps);
      want[r * d + i] = normed * w[i] + b[i];
      scale[r * d + i] = (std::abs(normed) + 1.0) * std::abs(w[i]) + std::abs(b[i]);
    }
  }
  Tensor o = out({rows, d});
  ops::layer_norm(dev(xt), dev(wt), dev(bt), static_cast<float>(eps), o);
  expect_close(o, want, 1e-6, 1e-5, scale);
}

TEST_P(OpsTest, AddScaledAndClampMatchReference) {
  const int rows = size(1, 13), d = size(1, 517);
  std::vector<double> a, b, s;
  Tensor at = random({rows, d}, a), bt = random({rows, d}, b), st = random({d}, s);
  std::vector<double> want(a.size()), clamped(a.size()), scale(a.size());
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < d; ++i) {
      want[r * d + i] = a[r * d + i] + b[r * d + i] * s[i];
      scale[r * d + i] = std::abs(a[r * d + i]) + std::abs(b[r * d + i] * s[i]);
      clamped[r * d + i] = std::min(std::max(a[r * d + i], -0.5), 0.25);
    }
  Tensor o = out({rows, d});
  ops::add_scaled(dev(at), dev(bt), dev(st), o);
  expect_close(o, want, 1e-7, 1e-6, scale);
  ops::clamp(dev(at), -0.5f, 0.25f, o);
  expect_close(o, clamped, 0.0, 0.0);
}

TEST_P(OpsTest, AddRowScaledScalesEachRowOfTheBranch) {
  const int rows = size(1, 13), d = size(1, 517);
  std::vector<double> a, b, s;
  Tensor at = random({rows, d}, a), bt = random({rows, d}, b), st = random({rows}, s);
  std::vector<double> want(a.size()), scale(a.size());
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < d; ++i) {
      want[r * d + i] = a[r * d + i] + b[r * d + i] * s[r];
      scale[r * d + i] = std::abs(a[r * d + i]) + std::abs(b[r * d + i] * s[r]);
    }
  Tensor o = out({rows, d});
  ops::add_row_scaled(dev(at), dev(bt), dev(st), o);
  expect_close(o, want, 1e-7, 1e-6, scale);
  Tensor in_place = dev(at);
  ops::add_row_scaled(in_place, dev(bt), dev(st), in_place);
  expect_close(in_place, want, 1e-7, 1e-6, scale);
  EXPECT_THROW(ops::add_row_scaled(dev(at), dev(bt), dev(random({rows + 1}, s)), o), Error);
}

// Several sequences in one call (the packed streams of a batched decoder): each segment is its own
// sequence, against the reference of each alone.
TEST_P(OpsTest, Conv1dOverSegmentsConvolvesEachOnItsOwn) {
  for (bool depthwise : {false, true}) {
    const int c_in = size(1, 40), c_out = depthwise ? c_in : size(1, 33), k = size(2, 7), dilation = size(1, 4);
    const int groups = depthwise ? c_in : 1, span = (k - 1) * dilation;
    std::vector<int64_t> segments;
    for (int s = size(1, 5); s > 0; --s) segments.push_back(span + size(0, 30));
    std::vector<double> w, b;
    Tensor wt = random({c_out, c_in / groups, k}, w), bt = random({c_out}, b);
    std::vector<double> x, want, scale;
    int64_t rows = 0, out_rows = 0;
    for (int64_t seg : segments) {
      std::vector<double> xs, ws, ss;
      random({seg, c_in}, xs);
      reference_conv1d(xs, w, &b, static_cast<int>(seg), c_in, c_out, k, dilation, groups, ws, ss);
      x.insert(x.end(), xs.begin(), xs.end());
      want.insert(want.end(), ws.begin(), ws.end());
      scale.insert(scale.end(), ss.begin(), ss.end());
      rows += seg;
      out_rows += seg - span;
    }
    Tensor xt = Tensor::empty({rows, c_in}, DType::kF32);
    for (size_t i = 0; i < x.size(); ++i) xt.data<float>()[i] = static_cast<float>(x[i]);
    Tensor o = out({out_rows, c_out});
    ops::conv1d(dev(xt), dev(wt), dev(bt), dilation, groups, o, segments);
    SCOPED_TRACE("depthwise=" + std::to_string(depthwise) + " segments=" + std::to_string(segments.size()));
    expect_close(o, want, 1e-6, 1e-5, scale);
  }
  std::vector<double> v;
  Tensor o = out({1, 2});
  const std::vector<int64_t> short_segments = {1, 3};
  try {
    ops::conv1d(dev(random({4, 2}, v)), dev(random({2, 2, 3}, v)), Tensor(), 1, 1, o, short_segments);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("conv1d: segment 0 has 1 rows, fewer than the 2 rows of history"),
              std::string::npos)
        << e.what();
  }
}

TEST_P(OpsTest, ConvTranspose1dOverSegmentsTakesEachSegmentsContext) {
  const int stride = size(1, 6), k = 2 * stride, c_in = size(1, 37), c_out = size(1, 29), context = size(0, 1);
  std::vector<int64_t> segments;
  for (int s = size(1, 5); s > 0; --s) segments.push_back(context + size(0, 20));
  std::vector<double> w, b;
  Tensor wt = random({c_in, c_out, k}, w), bt = random({c_out}, b);
  std::vector<double> x, want, scale;
  int64_t rows = 0, out_rows = 0;
  for (int64_t seg : segments) {
    std::vector<double> xs, ws, ss;
    random({seg, c_in}, xs);
    reference_conv_transpose1d(xs, w, &b, static_cast<int>(seg), c_in, c_out, k, stride, context, ws, ss);
    x.insert(x.end(), xs.begin(), xs.end());
    want.insert(want.end(), ws.begin(), ws.end());
    scale.insert(scale.end(), ss.begin(), ss.end());
    rows += seg;
    out_rows += (seg - context) * stride;
  }
  Tensor xt = Tensor::empty({rows, c_in}, DType::kF32);
  for (size_t i = 0; i < x.size(); ++i) xt.data<float>()[i] = static_cast<float>(x[i]);
  Tensor o = out({out_rows, c_out});
  ops::conv_transpose1d(dev(xt), dev(wt), dev(bt), stride, context, o, segments);
  SCOPED_TRACE("stride=" + std::to_string(stride) + " context=" + std::to_string(context) +
               " segments=" + std::to_string(segments.size()));
  expect_close(o, want, 1e-6, 1e-5, scale);
}

// Streams with fewer new rows than their history keep part of the old one, shifted.
TEST_P(OpsTest, PrependHistoryLaysOutEachStreamAndKeepsItsLastRows) {
  const int h = size(0, 5), c = size(1, 19), streams = size(1, 4);
  std::vector<int64_t> rows;
  std::vector<std::vector<double>> old_history(streams), new_rows(streams);
  std::vector<Tensor> histories;
  int64_t total = 0;
  for (int s = 0; s < streams; ++s) {
    rows.push_back(size(0, 2 * h + 1));
    histories.push_back(dev(random({h, c}, old_history[s])));
    total += rows.back();
  }
  Tensor xt = Tensor::empty({total, c}, DType::kF32);
  int64_t at = 0;
  for (int s = 0; s < streams; ++s) {
    Tensor part = random({rows[s], c}, new_rows[s]);
    std::memcpy(xt.data<float>() + at * c, part.raw(), part.nbytes());
    at += rows[s];
  }
  Tensor o = out({total + int64_t{h} * streams, c});
  ops::prepend_history(dev(xt), rows, histories, o);
  std::vector<double> want;
  for (int s = 0; s < streams; ++s) {
    std::vector<double> segment(old_history[s]);
    segment.insert(segment.end(), new_rows[s].begin(), new_rows[s].end());
    want.insert(want.end(), segment.begin(), segment.end());
    const std::vector<double> kept(segment.end() - int64_t{h} * c, segment.end());
    SCOPED_TRACE("stream " + std::to_string(s) + " of " + std::to_string(streams) + ", h=" + std::to_string(h));
    expect_close(histories[s], kept, 0.0, 0.0);
  }
  expect_close(o, want, 0.0, 0.0);
  std::vector<Tensor> same = {histories[0], histories[0]};
  const std::vector<int64_t> two = {0, 0};
  Tensor none = out({int64_t{2} * h, c});
  if (h > 0) EXPECT_THROW(ops::prepend_history(dev(xt).slice_rows(0, 0), two, same, none), Error) << trace();
}

// Rows >= 0 take the source id, the others keep theirs; the ids may be a slice of a larger buffer.
TEST_P(OpsTest, SubstituteIdsTakesTheSourceIdsOfTheRowsGiven) {
  for (bool rows_on_host : {true, false}) {
    SCOPED_TRACE(rows_on_host ? "rows on the host" : "rows on the device");
    const Tensor source = dev(ints({3}, {70, 71, 72}));
    Tensor buffer = dev(ints({6}, {10, 11, 12, 13, 14, 15}));
    Tensor ids = buffer.slice_rows(0, 4);
    const Tensor rows = ints({4}, {2, -1, 0, 2});
    ops::substitute_ids(source, rows_on_host ? rows : dev(rows), ids);
    const Tensor got = download(buffer);
    EXPECT_EQ(std::vector<int32_t>(got.data<int32_t>(), got.data<int32_t>() + 6),
              (std::vector<int32_t>{72, 11, 70, 72, 14, 15}));
  }
}

TEST_P(OpsTest, SubstituteIdsRejectsHostRowsPastTheSource) {
  const Tensor source = dev(ints({2}, {5, 6}));
  Tensor ids = dev(ints({2}, {0, 0}));
  try {
    ops::substitute_ids(source, ints({2}, {1, 2}), ids);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("rows[1] = 2 is past the 2 source ids"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ops::substitute_ids(source, ints({3}, {0, 0, 0}), ids), Error) << "one row per id";
}

// sample_packed draws what sample() draws with the same params at step + step_offset, greedy rows
// included, reading the params from the device buffer that write_sampling_params fills.
TEST_P(OpsTest, SamplePackedMatchesSampleAtTheOffsetStep) {
  const int rows = size(2, 9), vocab = size(50, 3000);
  std::vector<double> x;
  Tensor xt = random({rows, vocab}, x, 3.0);
  std::vector<ops::SamplingParams> params(rows);
  for (int r = 0; r < rows; ++r) {
    auto& p = params[r];
    p.temperature = r % 4 == 0 ? 0.0f : std::uniform_real_distribution<float>(0.5f, 1.5f)(rng_);
    p.top_k = r % 3 == 0 ? 0 : size(1, 60);
    p.top_p = r % 2 == 0 ? 1.0f : std::uniform_real_distribution<float>(0.3f, 1.0f)(rng_);
    p.min_p = r % 4 == 1 ? 0.05f : 0.0f;
    p.seed = rng_();
    p.step = static_cast<uint64_t>(size(0, 1000)) + (r % 2 == 0 ? 0 : uint64_t{1} << 33);  // the high half too
  }
  Tensor packed = out({rows, ops::kPackedSamplingParamsWords}, DType::kI32);
  ops::write_sampling_params(params, packed);
  for (uint64_t offset : {uint64_t{0}, uint64_t{7}}) {
    std::vector<ops::SamplingParams> shifted = params;
    for (auto& p : shifted) p.step += offset;
    Tensor want_logits = dev(xt), want_ids = out({rows}, DType::kI32), got_ids = out({rows}, DType::kI32);
    ops::sample(want_logits, shifted, want_ids);
    ops::sample_packed(dev(xt), packed, offset, got_ids);
    const Tensor want = download(want_ids), got = download(got_ids);
    for (int r = 0; r < rows; ++r) {
      EXPECT_EQ(got.data<int32_t>()[r], want.data<int32_t>()[r])
          << "row " << r << ", offset " << offset << ", " << trace();
    }
  }
}

TEST_P(OpsTest, WriteSamplingParamsRefusesPenaltiesAndBadFields) {
  Tensor packed = out({2, ops::kPackedSamplingParamsWords}, DType::kI32);
  std::vector<ops::SamplingParams> params(2);
  params[1].presence_penalty = 0.5f;
  try {
    ops::write_sampling_params(params, packed);
    ADD_FAILURE() << "a penalty was accepted, " << trace();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("row 1 has a repetition, presence or frequency penalty"), std::string::npos)
        << e.what();
  }
  params[1].presence_penalty = 0.0f;
  params[0].top_p = 0.0f;
  try {
    ops::write_sampling_params(params, packed);
    ADD_FAILURE() << "top_p = 0 was accepted, " << trace();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("row 0: top_p = 0 must be in (0, 1]"), std::string::npos) << e.what();
  }
  Tensor short_buffer = out({1, ops::kPackedSamplingParamsWords}, DType::kI32);
  params[0].top_p = 1.0f;
  EXPECT_THROW(ops::write_sampling_params(params, short_buffer), Error) << trace();
  Tensor logits = out({2, 10}), ids = out({3}, DType::kI32);
  EXPECT_THROW(ops::sample_packed(logits, packed, 0, ids), Error) << trace();
}

INSTANTIATE_TEST_SUITE_P(Backends, OpsTest, ::testing::ValuesIn(backends()),
                         [](const ::testing::TestParamInfo<Backend>& info) { return info.param.name; });

}  // namespace
}  // namespace omni::tensor
