// What the tiny Qwen3-Omni thinker's reference tests share: the relative error of one position's
// logits, whether a CUDA device is there, and the check of every prompt position's error.
//
// In float32 every position must be within the tolerance. In bfloat16 every position must be within
// 2e-2 except where the float32 reference nearly ties in routing: a bfloat16 run rounds the hidden
// states and router logits to 8 significant bits, so where the reference's k-th and (k+1)-th router
// logits are closer than that rounding it may pick the other expert, and that position then differs
// by far more than rounding. scripts/reference/qwen3_omni_routing_gaps.py measured each reference
// position's smallest gap (over the MoE layers) in float32; positions under kBfloat16TieGap are
// counted and reported but not held to the tolerance.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "tensor/backend.h"
#include "tensor/npy.h"

namespace omni::model::qwen3_omni {

// max |got - want| / max |want| over one position's n logits.
inline double relative_error(const float* got, const float* want, size_t n) {
  double err = 0.0, mag = 0.0;
  for (size_t i = 0; i < n; ++i) {
    err = std::max(err, std::abs(static_cast<double>(got[i]) - want[i]));
    mag = std::max(mag, std::abs(static_cast<double>(want[i])));
  }
  return err / mag;
}

// Each of n positions' relative error over its `vocab` logits.
inline std::vector<double> position_errors(const float* got, const float* want, int64_t n, int64_t vocab) {
  std::vector<double> errors(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) errors[t] = relative_error(got + t * vocab, want + t * vocab, vocab);
  return errors;
}

inline bool cuda_visible() {
  return tensor::compiled_backends().find("cuda") != std::string::npos && tensor::cuda_device_count() > 0;
}

// A reference's routing gaps, one per prompt position (routing_gaps*.npy next to its logits).
inline std::vector<float> load_routing_gaps(const std::filesystem::path& file) {
  const tensor::Tensor t = tensor::load_npy(file);
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

inline constexpr double kBfloat16Tolerance = 2e-2;
// The smallest reference routing gap (router logits) a bfloat16 run is held to: a few times the
// rounding of logits of a few units.
inline constexpr double kBfloat16TieGap = 0.1;

class PositionErrors {
 public:
  // Every position within `tolerance`.
  static PositionErrors float32(double tolerance) { return PositionErrors(tolerance, false); }
  // Every position whose routing gap is kBfloat16TieGap or more within kBfloat16Tolerance.
  static PositionErrors bfloat16() { return PositionErrors(kBfloat16Tolerance, true); }

  bool needs_routing_gaps() const { return bfloat16_; }

  // `gaps`: the reference's routing gaps of this prompt (needed for bfloat16 only).
  void add_prompt(const std::vector<double>& errors, const std::vector<float>& gaps, const std::string& prompt) {
    if (bfloat16_) ASSERT_EQ(gaps.size(), errors.size()) << prompt << ": routing gaps for each position";
    for (size_t t = 0; t < errors.size(); ++t) {
      const std::string where = prompt + " position " + std::to_string(t);
      const bool tie = bfloat16_ && gaps[t] < kBfloat16TieGap;
      if (!tie) EXPECT_LE(errors[t], tolerance_) << where;
      ++positions_;
      if (tie) ++ties_;
      if (tie || errors[t] > tolerance_) {
        std::printf("  %s: error %.4f, routing gap %.4f%s\n", where.c_str(), errors[t], bfloat16_ ? gaps[t] : 0.0,
                    tie ? " (near tie)" : "");
      }
      worst_ = std::max(worst_, tie ? 0.0 : errors[t]);
    }
  }

  // One line for the log (how many positions, how many near ties, the worst held error); near ties
  // may be at most a quarter of the positions, so that the check still says something.
  void report() const {
    std::printf("%zu positions, %zu near routing ties, worst error elsewhere %.4f (tolerance %.0e)\n", positions_,
                ties_, worst_, tolerance_);
    EXPECT_LE(4 * ties_, positions_) << "too many near routing ties to check";
  }

 private:
  PositionErrors(double tolerance, bool bfloat16) : tolerance_(tolerance), bfloat16_(bfloat16) {}

  double tolerance_;
  bool bfloat16_;
  size_t positions_ = 0, ties_ = 0;
  double worst_ = 0.0;
};

}  // namespace omni::model::qwen3_omni
