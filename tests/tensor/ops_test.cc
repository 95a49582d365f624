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
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "tensor/backend.h"

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

  void check_paged_attention(int kv_heads, int group, int hd, int block, const std::vector<int>& context,
                             const std::vector<int>& query, int window);

  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
};

TEST_P(OpsTest, EmbeddingCopiesTheRowsOfTheIds) {
  const int vocab = size(3, 301), hidden = size(1, 97), tokens = size(1, 29);
  std::vector<double> table;
  Tensor t = random({vocab, hidden}, table);
  std::vector<int32_t> ids(tokens);
  for (auto& id : ids) id = size(0, vocab - 1);
  Tensor o = out({tokens, hidden});
  ops::embedding(dev(t), dev(ints({tokens}, ids)), o);
  std::vector<double> want;
  for (int32_t id : ids) want.insert(want.end(), table.begin() + id * hidden, table.begin() + (id + 1) * hidden);
  expect_close(o, want, 0.0, 0.0);
}

TEST_P(OpsTest, EmbeddingRejectsIdsOutsideTheVocabulary) {
  std::vector<double> table;
  Tensor t = random({7, 3}, table);
  Tensor o = out({2, 3});
  try {
    ops::embedding(dev(t), dev(ints({2}, {1, 7})), o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("token id 7 at index 1 is outside the vocabulary [0, 7)"), std::string::npos)
        << e.what();
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

// Fills a paged cache for sequences of the given context and query lengths (blocks handed out in
// a shuffled order, some left unused), runs paged_attention and compares with a float64 reference.
void OpsTest::check_paged_attention(int kv_heads, int group, int hd, int block, const std::vector<int>& context,
                                    const std::vector<int>& query, int window) {
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

TEST_P(OpsTest, StoreKvRejectsSlotsOutsideTheCache) {
  Tensor k_cache = out({2, 3, 1, 4}), v_cache = out({2, 3, 1, 4});
  std::vector<double> v;
  Tensor k = random({1, 1, 4}, v);
  EXPECT_THROW(ops::store_kv(dev(k), dev(k), dev(ints({1}, {6})), k_cache, v_cache), Error);
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

// The audio-decoder ops run on the cpu only (ops.h); elsewhere they must say so.
#define OMNI_SKIP_UNLESS_CPU()                                                                \
  if (GetParam().device.type != DeviceType::kCpu) {                                           \
    std::vector<double> unused;                                                               \
    Tensor o = out({2, 2});                                                                   \
    EXPECT_THROW(ops::clamp(dev(random({2, 2}, unused)), 0.0f, 1.0f, o), Error) << trace();   \
    GTEST_SKIP() << "the audio-decoder ops have no kernels on " << GetParam().name << " yet"; \
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
  OMNI_SKIP_UNLESS_CPU();
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
  OMNI_SKIP_UNLESS_CPU();
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
  OMNI_SKIP_UNLESS_CPU();
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
  OMNI_SKIP_UNLESS_CPU();
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
  OMNI_SKIP_UNLESS_CPU();
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
  OMNI_SKIP_UNLESS_CPU();
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

INSTANTIATE_TEST_SUITE_P(Backends, OpsTest, ::testing::ValuesIn(backends()),
                         [](const ::testing::TestParamInfo<Backend>& info) { return info.param.name; });

}  // namespace
}  // namespace omni::tensor
