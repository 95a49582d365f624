// The fused diffusion-transformer ops of tensor/dit_ops.h on the CPU: each gives the bits of the
// unfused sequence of ops.h it stands for (a CPU float32 forward is the same arithmetic fused or
// not), and bad arguments are kInvalidArgument naming the op and the argument.
#include "tensor/dit_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "base/error.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"

namespace omni::tensor {
namespace {

Tensor random(Shape shape, uint32_t seed, float scale = 1.0f, float offset = 0.0f) {
  Tensor t = Tensor::empty(std::move(shape), DType::kF32);
  uint32_t s = seed * 2654435761u + 3;
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    t.data<float>()[i] = offset + scale * (static_cast<float>(s >> 8) / 16777216.0f * 2.0f - 1.0f);
  }
  return t;
}

void expect_same_bits(const Tensor& a, const Tensor& b, const char* what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << what;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(DitOpsTest, ModulatedRmsNormIsRmsNormThenMulColumns) {
  const Tensor x = random({9, 40}, 1, 3.0f), w = random({40}, 2, 1.0f, 1.0f), scale = random({40}, 3, 0.5f, 1.0f);
  Tensor fused = Tensor::empty({9, 40}, DType::kF32), want = Tensor::empty({9, 40}, DType::kF32);
  ops::modulated_rms_norm(x, w, scale, 1e-6f, fused);
  ops::rms_norm(x, w, 1e-6f, want);
  ops::mul_columns(want, scale, want);
  expect_same_bits(fused, want, "modulated_rms_norm");
  EXPECT_NE(
      message_of([&] { ops::modulated_rms_norm(x, w, random({39}, 4), 1e-6f, fused); }).find("scale must be [40]"),
      std::string::npos);
}

TEST(DitOpsTest, GatedRmsNormAddIsRmsNormThenAddScaled) {
  const Tensor y = random({9, 40}, 5, 2.0f), w = random({40}, 6, 1.0f, 0.5f), gate = random({40}, 7, 0.9f);
  Tensor fused = random({9, 40}, 8, 4.0f), want = random({9, 40}, 8, 4.0f);
  const Tensor y_before = random({9, 40}, 5, 2.0f);
  ops::gated_rms_norm_add(fused, y, w, gate, 1e-5f);
  Tensor normed = Tensor::empty({9, 40}, DType::kF32);
  ops::rms_norm(y, w, 1e-5f, normed);
  ops::add_scaled(want, normed, gate, want);
  expect_same_bits(fused, want, "gated_rms_norm_add");
  expect_same_bits(y, y_before, "y unchanged");
  EXPECT_NE(message_of([&] { ops::gated_rms_norm_add(fused, fused, w, gate, 1e-5f); }).find("overlap"),
            std::string::npos);
  Tensor small = random({8, 40}, 9);
  EXPECT_NE(message_of([&] { ops::gated_rms_norm_add(small, y, w, gate, 1e-5f); }).find("residual must be [9, 40]"),
            std::string::npos);
}

TEST(DitOpsTest, QkvNormRotateSplitsNormalisesAndRotates) {
  const int64_t t = 5, heads = 2, d = 8, width = heads * d;
  const Tensor qkv = random({t, 3 * width}, 10, 2.0f);
  const Tensor qn = random({d}, 11, 0.5f, 1.0f), kn = random({d}, 12, 0.5f, 1.0f);
  Tensor cos = Tensor::empty({t, d / 2}, DType::kF32), sin = Tensor::empty({t, d / 2}, DType::kF32);
  for (int64_t i = 0; i < cos.numel(); ++i) {
    cos.data<float>()[i] = std::cos(0.7f * static_cast<float>(i));
    sin.data<float>()[i] = std::sin(0.7f * static_cast<float>(i));
  }
  Tensor q = Tensor::empty({t, heads, d}, DType::kF32), k = Tensor::empty({t, heads, d}, DType::kF32);
  Tensor v = Tensor::empty({t, heads, d}, DType::kF32);
  ops::qkv_norm_rotate(qkv, qn, kn, 1e-5f, cos, sin, q, k, v);
  // The three products' outputs, as separate tensors, through the unfused ops.
  Tensor want[3];
  for (int part = 0; part < 3; ++part) {
    want[part] = Tensor::empty({t, heads, d}, DType::kF32);
    for (int64_t r = 0; r < t; ++r) {
      std::memcpy(want[part].data<float>() + r * width, qkv.data<float>() + (r * 3 + part) * width,
                  width * sizeof(float));
    }
  }
  ops::rms_norm(want[0], qn, 1e-5f, want[0]);
  ops::rms_norm(want[1], kn, 1e-5f, want[1]);
  ops::rotate_pairs(want[0], cos, sin);
  ops::rotate_pairs(want[1], cos, sin);
  expect_same_bits(q, want[0], "q");
  expect_same_bits(k, want[1], "k");
  expect_same_bits(v, want[2], "v");
  // Head 1 of token 2's value: columns [2 * width + 16 * 2 + 8 ...] of row 2.
  EXPECT_EQ(v.data<float>()[(2 * heads + 1) * d + 3], qkv.data<float>()[2 * 3 * width + 2 * width + d + 3]);

  EXPECT_NE(message_of([&] { ops::qkv_norm_rotate(qkv, qn, Tensor(), 1e-5f, cos, sin, q, k, v); }).find("both"),
            std::string::npos);
  Tensor wrong = Tensor::empty({t, 3 * width - 1}, DType::kF32);
  EXPECT_NE(message_of([&] { ops::qkv_norm_rotate(wrong, qn, kn, 1e-5f, cos, sin, q, k, v); }).find("qkv must be"),
            std::string::npos);
  Tensor view = qkv.reshape({3 * t, heads, d}).slice_rows(0, t);
  EXPECT_NE(message_of([&] { ops::qkv_norm_rotate(qkv, qn, kn, 1e-5f, cos, sin, view, k, v); }).find("overlaps qkv"),
            std::string::npos);
}

}  // namespace
}  // namespace omni::tensor
