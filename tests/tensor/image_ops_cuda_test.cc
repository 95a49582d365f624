// The image ops of tensor/ops.h on CUDA against the CPU backend, in float32 and bfloat16: the
// inputs are rounded to the dtype first, so both backends see the same values and the difference is
// the GPU's rounding of intermediate and final results (and the order of its sums). Shapes cover
// the paths the kernels take: several row chunks and more channels than threads in group_norm,
// 1x1 and 3x3 convolutions, several heads and one wide head (the VAE's mid-block) in attention.
// Skipped, saying why, where no GPU is visible.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "base/error.h"
#include "tensor/backend.h"
#include "tensor/convert.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"
#include "tensor/upload.h"

namespace omni::tensor {
namespace {

struct CudaCase {
  const char* name;
  DType dtype;
  double tol;  // max |cuda - cpu| / max |cpu|
};

// Uniform in [-scale, scale), rounded to `dtype` and back (so the CPU sees what the GPU gets).
Tensor random_host(Shape shape, uint32_t seed, DType dtype, float scale = 1.0f) {
  Tensor t = Tensor::empty(std::move(shape), DType::kF32);
  uint32_t s = seed * 2654435761u + 7;
  std::vector<uint16_t> half(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    t.data<float>()[i] = scale * (static_cast<float>(s >> 8) / 16777216.0f * 2.0f - 1.0f);
  }
  if (dtype != DType::kF32 && t.numel() > 0) {
    convert_elements(DType::kF32, t.raw(), dtype, half.data(), half.size());
    convert_elements(dtype, half.data(), DType::kF32, t.raw(), half.size());
  }
  return t;
}

Tensor on_gpu(const Tensor& host_f32, DType dtype) {
  Tensor out = Tensor::empty(host_f32.shape(), dtype, Device::cuda(0));
  copy_from_host({.memory = host_f32.raw()}, DType::kF32, static_cast<size_t>(host_f32.numel()), out, 0);
  return out;
}

Tensor back_f32(const Tensor& t) {
  const Tensor host = t.to(Device::cpu());
  if (host.dtype() == DType::kF32) return host;
  Tensor out = Tensor::empty(host.shape(), DType::kF32);
  convert_elements(host.dtype(), host.raw(), DType::kF32, out.raw(), static_cast<size_t>(host.numel()));
  return out;
}

Tensor cpu_empty(Shape shape) { return Tensor::empty(std::move(shape), DType::kF32); }

class ImageOpsCudaTest : public ::testing::TestWithParam<CudaCase> {
 protected:
  void SetUp() override {
    if (compiled_backends().find("cuda") == std::string::npos) GTEST_SKIP() << "this build has no CUDA backend";
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible to this process";
  }
  DType dtype() const { return GetParam().dtype; }
  Tensor gpu_empty(Shape shape) const { return Tensor::empty(std::move(shape), dtype(), Device::cuda(0)); }

  void expect_close(const Tensor& gpu, const Tensor& cpu, const std::string& what) const {
    const Tensor got = back_f32(gpu);
    ASSERT_EQ(got.shape(), cpu.shape()) << what;
    double diff = 0, scale = 0;
    for (int64_t i = 0; i < cpu.numel(); ++i) {
      ASSERT_TRUE(std::isfinite(got.data<float>()[i])) << what << " element " << i;
      diff = std::max(diff, std::abs(static_cast<double>(got.data<float>()[i]) - cpu.data<float>()[i]));
      scale = std::max(scale, std::abs(static_cast<double>(cpu.data<float>()[i])));
    }
    EXPECT_LE(diff / scale, GetParam().tol) << what << ": max diff " << diff << " of max " << scale;
  }
};

TEST_P(ImageOpsCudaTest, Conv2dMatchesTheCpu) {
  struct Shape4 {
    int64_t h, w, cin, cout, k, pad, stride;
  };
  // 64 channels: the unfolding's 16-byte path; 3 and 1: its element path; stride 2: the audio
  // tower's front end.
  for (const Shape4 c : {Shape4{9, 11, 24, 16, 3, 1, 1}, Shape4{6, 5, 40, 8, 1, 0, 1}, Shape4{7, 7, 3, 5, 3, 0, 1},
                         Shape4{12, 10, 64, 24, 3, 1, 1}, Shape4{13, 10, 1, 16, 3, 1, 2},
                         Shape4{7, 9, 64, 24, 3, 1, 2}}) {
    const Tensor x = random_host({c.h, c.w, c.cin}, 1, dtype());
    const Tensor w = random_host({c.cout, c.cin, c.k, c.k}, 2, dtype(), 0.2f);
    const Tensor b = random_host({c.cout}, 3, dtype());
    const int64_t oh = (c.h + 2 * c.pad - c.k) / c.stride + 1, ow = (c.w + 2 * c.pad - c.k) / c.stride + 1;
    const int pad = static_cast<int>(c.pad), stride = static_cast<int>(c.stride);
    const std::string what = "conv2d k=" + std::to_string(c.k) + " stride " + std::to_string(c.stride);
    Tensor want = cpu_empty({oh, ow, c.cout});
    ops::conv2d(x, w, b, pad, stride, want);
    Tensor got = gpu_empty({oh, ow, c.cout});
    ops::conv2d(on_gpu(x, dtype()), on_gpu(w, dtype()), on_gpu(b, dtype()), pad, stride, got);
    expect_close(got, want, what);
    Tensor no_bias = gpu_empty({oh, ow, c.cout});
    ops::conv2d(on_gpu(x, dtype()), on_gpu(w, dtype()), Tensor(), pad, stride, no_bias);
    Tensor want_no_bias = cpu_empty({oh, ow, c.cout});
    ops::conv2d(x, w, Tensor(), pad, stride, want_no_bias);
    expect_close(no_bias, want_no_bias, what + " without bias");
  }
}

TEST_P(ImageOpsCudaTest, GroupNormMatchesTheCpu) {
  struct Case {
    int64_t n, c;
    int groups;
  };
  for (const Case c : {Case{300, 64, 32}, Case{70, 520, 8}, Case{1, 6, 3}}) {
    // An offset mean, as activations have: the variance must not cancel away.
    const Tensor x = random_host({c.n, c.c}, 4, dtype(), 3.0f);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] += 2.0f;
    const Tensor w = random_host({c.c}, 5, dtype()), b = random_host({c.c}, 6, dtype());
    Tensor want = cpu_empty({c.n, c.c});
    ops::group_norm(x, c.groups, w, b, 1e-6f, want);
    Tensor got = gpu_empty({c.n, c.c});
    ops::group_norm(on_gpu(x, dtype()), c.groups, on_gpu(w, dtype()), on_gpu(b, dtype()), 1e-6f, got);
    expect_close(got, want, "group_norm " + std::to_string(c.n) + "x" + std::to_string(c.c));
  }
}

TEST_P(ImageOpsCudaTest, ElementwiseOpsMatchTheCpu) {
  const Tensor x = random_host({37, 24}, 7, dtype(), 4.0f), scale = random_host({24}, 8, dtype());
  Tensor want = cpu_empty({37, 24});
  Tensor got = gpu_empty({37, 24});
  ops::silu(x, want);
  ops::silu(on_gpu(x, dtype()), got);
  expect_close(got, want, "silu");
  ops::tanh(x, want);
  ops::tanh(on_gpu(x, dtype()), got);
  expect_close(got, want, "tanh");
  ops::mul_columns(x, scale, want);
  ops::mul_columns(on_gpu(x, dtype()), on_gpu(scale, dtype()), got);
  expect_close(got, want, "mul_columns");
  Tensor in_place = on_gpu(x, dtype());
  ops::silu(in_place, in_place);
  ops::silu(x, want);
  expect_close(in_place, want, "silu in place");

  const Tensor img = random_host({5, 3, 7}, 9, dtype());
  Tensor up_want = cpu_empty({10, 6, 7});
  Tensor up = gpu_empty({10, 6, 7});
  ops::upsample_nearest2x(img, up_want);
  ops::upsample_nearest2x(on_gpu(img, dtype()), up);
  const Tensor up_got = back_f32(up);
  for (int64_t i = 0; i < up_want.numel(); ++i) ASSERT_EQ(up_got.data<float>()[i], up_want.data<float>()[i]) << i;
}

TEST_P(ImageOpsCudaTest, AttentionMatchesTheCpu) {
  struct Case {
    int64_t s, skv, heads, d;
  };
  for (const Case c : {Case{37, 45, 3, 32}, Case{70, 70, 1, 512}, Case{130, 130, 2, 128}, Case{1, 1, 1, 16}}) {
    const Tensor q = random_host({c.s, c.heads, c.d}, 10, dtype()), k = random_host({c.skv, c.heads, c.d}, 11, dtype());
    const Tensor v = random_host({c.skv, c.heads, c.d}, 12, dtype());
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.d)) * 3.0f;  // peaked rows, as trained models have
    Tensor want = cpu_empty({c.s, c.heads, c.d});
    ops::attention(q, k, v, scale, want);
    Tensor got = gpu_empty({c.s, c.heads, c.d});
    ops::attention(on_gpu(q, dtype()), on_gpu(k, dtype()), on_gpu(v, dtype()), scale, got);
    expect_close(got, want, "attention s=" + std::to_string(c.s) + " d=" + std::to_string(c.d));
  }
}

TEST_P(ImageOpsCudaTest, RotatePairsMatchesTheCpu) {
  const int64_t t = 29, heads = 3, d = 16;
  const Tensor x = random_host({t, heads, d}, 13, dtype());
  Tensor cos = cpu_empty({t, d / 2}), sin = cpu_empty({t, d / 2});
  for (int64_t i = 0; i < cos.numel(); ++i) {
    cos.data<float>()[i] = std::cos(0.37f * static_cast<float>(i));
    sin.data<float>()[i] = std::sin(0.37f * static_cast<float>(i));
  }
  Tensor want = random_host({t, heads, d}, 13, dtype());
  ops::rotate_pairs(want, cos, sin);
  // Angle tables in float32 under any x (how Z-Image rotates), and in x's own dtype.
  Tensor got = on_gpu(x, dtype());
  ops::rotate_pairs(got, on_gpu(cos, DType::kF32), on_gpu(sin, DType::kF32));
  expect_close(got, want, "rotate_pairs with float32 angles");
  if (dtype() == DType::kF32) return;
  Tensor same = on_gpu(x, dtype());
  ops::rotate_pairs(same, on_gpu(cos, dtype()), on_gpu(sin, dtype()));
  expect_close(same, want, "rotate_pairs with angles in x's dtype");
  EXPECT_THROW(ops::rotate_pairs(same, on_gpu(cos, dtype()), on_gpu(sin, DType::kF32)), Error);
}

INSTANTIATE_TEST_SUITE_P(Backends, ImageOpsCudaTest,
                         ::testing::Values(CudaCase{"f32", DType::kF32, 2e-5}, CudaCase{"bf16", DType::kBF16, 1.6e-2}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace omni::tensor
