// BigVGAN's anti-aliased SnakeBeta (transformers' TorchActivation1d(SnakeBeta) in Qwen2.5-Omni's
// vocoder): upsample x2 with a 12-tap Kaiser-windowed sinc filter, SnakeBeta at the doubled rate,
// low-pass with the same filter and keep every second sample. Both resampling steps pad by
// repeating the edge samples, as the reference does.
//
// Written with tensor/ops.h over time-major rows [T, C]: the upsampling is the transposed
// convolution split into its two phases (one depthwise convolution over the edge-padded input
// duplicated side by side, whose [T, 2C] output read as [2T, C] interleaves them), the
// downsampling a depthwise convolution of the padded signal whose even rows are gathered.
// Immutable after construction; apply() may run on several threads at once.
#pragma once

#include <vector>

#include "tensor/tensor.h"

namespace omni::model::qwen2_5_omni {

// kaiser_sinc_filter1d: `kernel_size` taps of sinc(2 cutoff t) * Kaiser window (beta from the
// transition band `half_width`), t centred on the filter (half-integer for an even size), scaled to
// sum to 1. cutoff in (0, 0.5], kernel_size >= 2 (kInvalidArgument otherwise).
std::vector<float> kaiser_sinc_filter(double cutoff, double half_width, int kernel_size);

// The resampling filters of every activation: ratio 2, 12 taps, cutoff 0.25, half width 0.3.
inline constexpr int kAliasFreeTaps = 12;

class AliasFreeSnakeBeta {
 public:
  // alpha, beta [C]: SnakeBeta's log-space parameters (`…act.alpha`, `…act.beta`), on `device`.
  AliasFreeSnakeBeta(tensor::Tensor alpha, tensor::Tensor beta, tensor::Device device);

  int64_t channels() const { return alpha_.dim(0); }
  // x [T, C] float32 on the device (T >= 1): [T, C].
  tensor::Tensor apply(const tensor::Tensor& x) const;

 private:
  tensor::Device device_;
  tensor::Tensor alpha_, beta_;
  tensor::Tensor up_weight_;    // [2C, 1, 7]: the even output phase for channels 0..C-1, the odd one for C..2C-1
  tensor::Tensor down_weight_;  // [C, 1, 12]
};

}  // namespace omni::model::qwen2_5_omni
