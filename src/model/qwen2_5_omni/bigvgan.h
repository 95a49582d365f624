// The BigVGAN vocoder of Qwen2.5-Omni's token2wav (transformers' Qwen2_5OmniToken2WavBigVGANModel,
// weights `token2wav.code2wav_bigvgan_model.*`): the DiT's log-mel [M, mel_dim] -> waveform
// [M * hop] at 24 kHz, clamped to [-1, 1].
//
// The mel is mapped to decibels, clamped at -115 dB and scaled to [-1, 1]; conv_pre (k7); per
// upsampling stage a ConvTranspose1d and the mean of the stage's AMP blocks (three residual pairs
// of anti-aliased SnakeBeta -> dilated conv -> anti-aliased SnakeBeta -> conv); the post
// activation, conv_post (k7, no bias) and the clamp. float32 through tensor/ops.h over time-major
// rows on the device the model is loaded on. Immutable after loading: synthesize() may run on
// several threads at once. Errors: kLoadFailed naming the file and tensor; kInvalidArgument for
// a mel of the wrong shape.
#pragma once

#include <string>
#include <vector>

#include "model/qwen2_5_omni/alias_free_activation.h"
#include "model/qwen2_5_omni/token2wav_config.h"
#include "model/safetensors.h"
#include "tensor/tensor.h"

namespace omni::model::qwen2_5_omni {

inline constexpr const char* kBigVganPrefix = "token2wav.code2wav_bigvgan_model.";

class BigVgan {
 public:
  BigVgan(const Checkpoint& checkpoint, BigVganConfig config, tensor::Device device = tensor::Device::cpu());

  const BigVganConfig& config() const { return config_; }
  // mel [M >= 1, mel_dim] float32 (on any device): the waveform [M * hop] on the model's device.
  tensor::Tensor synthesize(const tensor::Tensor& mel) const;

 private:
  // A Conv1d with `padding` zeros on both sides, weight tap-major for ops::unfold_rows.
  struct Conv {
    tensor::Tensor weight;  // [C_out, k * C_in]
    tensor::Tensor bias;    // [C_out] or undefined
    int kernel = 1, dilation = 1, padding = 0;
  };
  struct Upsample {
    tensor::Tensor weight;  // [C_in, C_out, k] (ConvTranspose1d)
    tensor::Tensor bias;
    int stride = 1, kernel = 1, padding = 0;
  };
  struct AmpBlock {
    std::vector<Conv> convs1, convs2;             // 3 each
    std::vector<AliasFreeSnakeBeta> activations;  // 6: before each conv
  };

  Conv load_conv(const Checkpoint& checkpoint, const std::string& name, int out, int in, int k, int dilation,
                 int padding, bool bias) const;
  AliasFreeSnakeBeta load_activation(const Checkpoint& checkpoint, const std::string& name, int channels) const;
  tensor::Tensor conv(const Conv& c, const tensor::Tensor& x) const;
  tensor::Tensor upsample(const Upsample& u, const tensor::Tensor& x) const;
  tensor::Tensor amp_block(const AmpBlock& block, const tensor::Tensor& x) const;

  BigVganConfig config_;
  tensor::Device device_;
  tensor::Tensor mel_scale_, mel_shift_;  // the dB mapping as a diagonal Linear: [mel, mel], [mel]
  Conv conv_pre_, conv_post_;
  std::vector<Upsample> ups_;
  std::vector<AmpBlock> resblocks_;                  // stage * kernels + kernel index
  std::vector<AliasFreeSnakeBeta> activation_post_;  // one
};

}  // namespace omni::model::qwen2_5_omni
