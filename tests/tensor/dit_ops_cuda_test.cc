// The fused diffusion-transformer ops of tensor/dit_ops.h on CUDA against the CPU (which runs the
// unfused sequence of ops.h), in float32 and bfloat16: inputs are rounded to the dtype first, so
// both backends see the same values. Tolerance: max |cuda - cpu| / max |cpu| within the case's
// bound (float32 rounding of the sums; in bfloat16 one rounding of each output, 2^-8 relative).
// In bfloat16 the fused kernel must also be no further from the CPU than the unfused CUDA sequence
// (which rounds after each op). Shapes take both the 16-byte path (Z-Image's 3840 columns, head
// size 128) and the element path (rows of an odd byte size). Skipped, saying why, without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "base/error.h"
#include "tensor/backend.h"
#include "tensor/convert.h"
#include "tensor/dit_ops.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"
#include "tensor/upload.h"

namespace omni::tensor {
namespace {

struct CudaCase {
  const char* name;
  DType dtype;
  double tol;
};

Tensor random_host(Shape shape, uint32_t seed, DType dtype, float scale = 1.0f, float offset = 0.0f) {
  Tensor t = Tensor::empty(std::move(shape), DType::kF32);
  uint32_t s = seed * 2654435761u + 11;
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    t.data<float>()[i] = offset + scale * (static_cast<float>(s >> 8) / 16777216.0f * 2.0f - 1.0f);
  }
  if (dtype != DType::kF32 && t.numel() > 0) {
    std::vector<uint16_t> half(static_cast<size_t>(t.numel()));
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

// max |got - want| / max |want|.
double relative_error(const Tensor& gpu, const Tensor& want) {
  const Tensor got = back_f32(gpu);
  EXPECT_EQ(got.shape(), want.shape());
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    EXPECT_TRUE(std::isfinite(got.data<float>()[i])) << "element " << i;
    diff = std::max(diff, std::abs(static_cast<double>(got.data<float>()[i]) - want.data<float>()[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want.data<float>()[i])));
  }
  return diff / scale;
}

class DitOpsCudaTest : public ::testing::TestWithParam<CudaCase> {
 protected:
  void SetUp() override {
    if (compiled_backends().find("cuda") == std::string::npos) GTEST_SKIP() << "this build has no CUDA backend";
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible to this process";
  }
  DType dtype() const { return GetParam().dtype; }
  Tensor gpu(const Tensor& host) const { return on_gpu(host, dtype()); }
  Tensor gpu_empty(const Shape& shape) const { return Tensor::empty(shape, dtype(), Device::cuda(0)); }
  // The fused result within the bound, and in 16-bit no further from the CPU than the unfused one.
  void expect_fused_close(const Tensor& fused, const Tensor& unfused, const Tensor& want, const std::string& what) {
    const double e_fused = relative_error(fused, want), e_unfused = relative_error(unfused, want);
    EXPECT_LE(e_fused, GetParam().tol) << what;
    if (dtype() != DType::kF32) EXPECT_LE(e_fused, e_unfused * 1.25 + 1e-7) << what << ": unfused " << e_unfused;
    std::printf("[dit_ops %s] %s: fused %.3g, unfused %.3g of max |cpu|\n", GetParam().name, what.c_str(), e_fused,
                e_unfused);
  }
};

TEST_P(DitOpsCudaTest, ModulatedRmsNormMatchesTheCpu) {
  for (const int64_t d : {int64_t{3840}, int64_t{36}}) {
    const int64_t rows = 37;
    const Tensor x = random_host({rows, d}, 1, dtype(), 3.0f, 0.5f), w = random_host({d}, 2, dtype(), 1.0f, 1.0f);
    const Tensor scale = random_host({d}, 3, dtype(), 0.5f, 1.0f);
    Tensor want = Tensor::empty({rows, d}, DType::kF32);
    ops::modulated_rms_norm(x, w, scale, 1e-6f, want);
    Tensor fused = gpu_empty({rows, d}), unfused = gpu_empty({rows, d});
    ops::modulated_rms_norm(gpu(x), gpu(w), gpu(scale), 1e-6f, fused);
    ops::rms_norm(gpu(x), gpu(w), 1e-6f, unfused);
    ops::mul_columns(unfused, gpu(scale), unfused);
    expect_fused_close(fused, unfused, want, "modulated_rms_norm D=" + std::to_string(d));
    Tensor in_place = gpu(x);
    ops::modulated_rms_norm(in_place, gpu(w), gpu(scale), 1e-6f, in_place);
    EXPECT_LE(relative_error(in_place, want), GetParam().tol) << "in place";
  }
}

TEST_P(DitOpsCudaTest, GatedRmsNormAddMatchesTheCpu) {
  for (const int64_t d : {int64_t{3840}, int64_t{36}}) {
    const int64_t rows = 41;
    const Tensor residual = random_host({rows, d}, 4, dtype(), 8.0f), y = random_host({rows, d}, 5, dtype(), 2.0f);
    const Tensor w = random_host({d}, 6, dtype(), 1.0f, 0.5f), gate = random_host({d}, 7, dtype(), 0.9f);
    Tensor want = residual.to(Device::cpu());
    ops::gated_rms_norm_add(want, y, w, gate, 1e-5f);
    Tensor fused = gpu(residual), unfused = gpu(residual), normed = gpu_empty({rows, d});
    const Tensor y_gpu = gpu(y);
    ops::gated_rms_norm_add(fused, y_gpu, gpu(w), gpu(gate), 1e-5f);
    ops::rms_norm(y_gpu, gpu(w), 1e-5f, normed);
    ops::add_scaled(unfused, normed, gpu(gate), unfused);
    expect_fused_close(fused, unfused, want, "gated_rms_norm_add D=" + std::to_string(d));
    EXPECT_EQ(relative_error(y_gpu, y), 0.0) << "y must not change";
  }
}

TEST_P(DitOpsCudaTest, QkvNormRotateMatchesTheCpu) {
  struct Case {
    int64_t tokens, heads, d;
    bool norms;
  };
  for (const Case c : {Case{33, 4, 128, true}, Case{29, 3, 16, true}, Case{7, 2, 10, false}}) {
    const Tensor qkv = random_host({c.tokens, 3 * c.heads * c.d}, 8, dtype(), 2.0f);
    const Tensor qn = c.norms ? random_host({c.d}, 9, dtype(), 0.5f, 1.0f) : Tensor();
    const Tensor kn = c.norms ? random_host({c.d}, 10, dtype(), 0.5f, 1.0f) : Tensor();
    Tensor cos = Tensor::empty({c.tokens, c.d / 2}, DType::kF32), sin = Tensor::empty({c.tokens, c.d / 2}, DType::kF32);
    for (int64_t i = 0; i < cos.numel(); ++i) {
      cos.data<float>()[i] = std::cos(0.37f * static_cast<float>(i));
      sin.data<float>()[i] = std::sin(0.37f * static_cast<float>(i));
    }
    const Shape heads{c.tokens, c.heads, c.d};
    Tensor want[3] = {Tensor::empty(heads, DType::kF32), Tensor::empty(heads, DType::kF32),
                      Tensor::empty(heads, DType::kF32)};
    ops::qkv_norm_rotate(qkv, qn, kn, 1e-5f, cos, sin, want[0], want[1], want[2]);
    // The unfused CUDA sequence: the three column blocks as their own products would write them.
    const Tensor qkv_gpu = gpu(qkv);
    const Tensor cos_gpu = on_gpu(cos, DType::kF32), sin_gpu = on_gpu(sin, DType::kF32);
    Tensor got[3] = {gpu_empty(heads), gpu_empty(heads), gpu_empty(heads)};
    ops::qkv_norm_rotate(qkv_gpu, c.norms ? gpu(qn) : Tensor(), c.norms ? gpu(kn) : Tensor(), 1e-5f, cos_gpu, sin_gpu,
                         got[0], got[1], got[2]);
    Tensor unfused[3];
    const Tensor host_qkv = qkv;
    for (int part = 0; part < 3; ++part) {
      Tensor block = Tensor::empty(heads, DType::kF32);
      const int64_t width = c.heads * c.d;
      for (int64_t t = 0; t < c.tokens; ++t) {
        std::copy_n(host_qkv.data<float>() + (t * 3 + part) * width, width, block.data<float>() + t * width);
      }
      unfused[part] = gpu(block);
    }
    if (c.norms) {
      ops::rms_norm(unfused[0], gpu(qn), 1e-5f, unfused[0]);
      ops::rms_norm(unfused[1], gpu(kn), 1e-5f, unfused[1]);
    }
    ops::rotate_pairs(unfused[0], cos_gpu, sin_gpu);
    ops::rotate_pairs(unfused[1], cos_gpu, sin_gpu);
    const char* names[] = {"q", "k", "v"};
    for (int part = 0; part < 3; ++part) {
      expect_fused_close(got[part], unfused[part], want[part],
                         std::string("qkv_norm_rotate ") + names[part] + " D=" + std::to_string(c.d));
    }
    EXPECT_EQ(relative_error(got[2], want[2]), 0.0) << "v is a copy";
    if (dtype() != DType::kF32) {
      // Angle tables in the dtype itself.
      Tensor same[3] = {gpu_empty(heads), gpu_empty(heads), gpu_empty(heads)};
      Tensor cos_t = gpu(cos), sin_t = gpu(sin);
      ops::qkv_norm_rotate(qkv_gpu, c.norms ? gpu(qn) : Tensor(), c.norms ? gpu(kn) : Tensor(), 1e-5f, cos_t, sin_t,
                           same[0], same[1], same[2]);
      EXPECT_LE(relative_error(same[0], want[0]), 2 * GetParam().tol);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, DitOpsCudaTest,
                         ::testing::Values(CudaCase{"f32", DType::kF32, 1e-5}, CudaCase{"bf16", DType::kBF16, 1.2e-2}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace omni::tensor
