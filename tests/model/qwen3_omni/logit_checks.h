// What the tiny Qwen3-Omni thinker's reference tests share: the relative error of one position's
// logits, whether a CUDA device is there, and the check of every prompt position's error.
//
// In float32 every position must be within the tolerance. In bfloat16 the reference's own
// bfloat16 run sets the bar (scripts/reference/qwen3_omni_bf16_reference.py measured it, with
// transformers on the GPU): a bfloat16 run rounds the hidden states and router logits to 8
// significant bits, which alone moves some positions' logits by a few percent, and where the float32
// reference's k-th and (k+1)-th router logits are closer than that rounding the run may pick the
// other expert, and that position then differs by far more. So positions whose reference routing
// gap (the smallest over the MoE layers) is under kBfloat16TieGap are counted and reported but not
// held; every other position must be within 2e-2, or within kBfloat16Slack times the worst error
// transformers' bfloat16 run has at such positions of the same prompts, whichever is larger.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>
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

// What bfloat16 does to one reference, per prompt position (qwen3_omni_bf16_reference.py's files
// next to its logits): the float32 routing gap and transformers' own bfloat16 error.
struct Bfloat16Reference {
  std::vector<float> routing_gaps, transformers_errors;
};

// `name`: the files' suffix: "" for routing_gaps.npy / bf16_errors.npy, "_2" for routing_gaps_2.npy...
inline Bfloat16Reference load_bfloat16_reference(const std::filesystem::path& dir, const std::string& suffix = "") {
  const auto floats = [](const std::filesystem::path& file) {
    const tensor::Tensor t = tensor::load_npy(file);
    return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
  };
  return {floats(dir / ("routing_gaps" + suffix + ".npy")), floats(dir / ("bf16_errors" + suffix + ".npy"))};
}

inline constexpr double kBfloat16Tolerance = 2e-2;
// The smallest reference routing gap (router logits) a bfloat16 run is held to: a few times the
// rounding of logits of a few units.
inline constexpr double kBfloat16TieGap = 0.1;
// How far past transformers' own worst bfloat16 error ours may go (two implementations' rounding).
inline constexpr double kBfloat16Slack = 1.5;

class PositionErrors {
 public:
  // Every position within `tolerance`.
  static PositionErrors float32(double tolerance) { return PositionErrors(tolerance, false); }
  // The bfloat16 check of the header comment.
  static PositionErrors bfloat16() { return PositionErrors(kBfloat16Tolerance, true); }

  // `bf16`: what bfloat16 does to this prompt's reference (read for bfloat16 only).
  void add_prompt(const std::vector<double>& errors, const Bfloat16Reference& bf16, const std::string& prompt) {
    if (bfloat16_) {
      ASSERT_EQ(bf16.routing_gaps.size(), errors.size()) << prompt << ": a routing gap for each position";
      ASSERT_EQ(bf16.transformers_errors.size(), errors.size()) << prompt << ": transformers' error at each position";
    }
    for (size_t t = 0; t < errors.size(); ++t) {
      const std::string where = prompt + " position " + std::to_string(t);
      const bool tie = bfloat16_ && bf16.routing_gaps[t] < kBfloat16TieGap;
      ++positions_;
      if (!bfloat16_) EXPECT_LE(errors[t], tolerance_) << where;
      if (tie) {
        ++ties_;
      } else if (bfloat16_) {
        held_.push_back({errors[t], where});
        transformers_worst_ = std::max(transformers_worst_, double{bf16.transformers_errors[t]});
      }
      if (tie || errors[t] > tolerance_) {
        std::printf("  %s: error %.4f", where.c_str(), errors[t]);
        if (bfloat16_) {
          std::printf(", transformers' bf16 %.4f, routing gap %.4f%s", bf16.transformers_errors[t],
                      bf16.routing_gaps[t], tie ? " (near tie)" : "");
        }
        std::printf("\n");
      }
    }
  }

  // bfloat16: checks the held positions against the bound; near ties may be at most a quarter of
  // the positions, so that the check still says something. Call once all prompts are in.
  void check() const {
    if (!bfloat16_) return;  // add_prompt checked every position
    const double bound = std::max(tolerance_, kBfloat16Slack * transformers_worst_);
    double worst = 0.0;
    for (const auto& [error, where] : held_) {
      EXPECT_LE(error, bound) << where;
      worst = std::max(worst, error);
    }
    std::printf(
        "%zu positions, %zu near routing ties, worst error elsewhere %.4f (bound %.4f; transformers' bf16 "
        "worst there %.4f)\n",
        positions_, ties_, worst, bound, transformers_worst_);
    EXPECT_LE(4 * ties_, positions_) << "too many near routing ties to check";
  }

 private:
  PositionErrors(double tolerance, bool bfloat16) : tolerance_(tolerance), bfloat16_(bfloat16) {}

  double tolerance_;
  bool bfloat16_;
  size_t positions_ = 0, ties_ = 0;
  double transformers_worst_ = 0.0;
  std::vector<std::pair<double, std::string>> held_;
};

}  // namespace omni::model::qwen3_omni
