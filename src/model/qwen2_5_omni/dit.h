// The DiT of Qwen2.5-Omni's token2wav (transformers' Qwen2_5OmniToken2WavDiTModel, weights
// `token2wav.code2wav_dit_model.*`): talker codes -> mel spectrogram [2 * codes, mel_dim] by flow
// matching with classifier-free guidance, conditioned on a speaker's x-vector and reference mel
// (spk_dict.pt, model/qwen2_5_omni/speaker_dict.h).
//
// One evaluation runs the conditional and the unconditional branch as one batch of 2 * M rows
// (the unconditional branch sees code 0 for every code, a zero x-vector and the ECAPA embedding of
// an all-zero reference mel). Each block: AdaLayerNormZero from the time embedding, attention
// whose first head alone is rotated by RoPE (consecutive pairs) and whose keys are limited to the
// query's block of `block_size` frames plus one block behind (look-backward layers) or ahead
// (look-ahead layers), then the modulated MLP. float32 through tensor/ops.h on the device the
// model is loaded on. Immutable after loading: several threads may evaluate it at once.
// Errors: kLoadFailed naming the file and tensor at load; kInvalidArgument for bad inputs.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "model/qwen2_5_omni/token2wav_config.h"
#include "model/qwen3_tts/speaker_encoder.h"
#include "model/safetensors.h"
#include "tensor/tensor.h"

namespace omni::model::qwen2_5_omni {

inline constexpr const char* kDitPrefix = "token2wav.code2wav_dit_model.";

// The released sampler's settings (Qwen2_5OmniToken2WavModel.forward's defaults).
struct DitSampling {
  int num_steps = 10;
  float guidance_scale = 0.5f;
  float sway_coefficient = -1.0f;
};

// What one request conditions every evaluation on, built once by Dit::condition().
struct DitConditioning {
  int64_t frames = 0;     // M = repeats * codes
  tensor::Tensor inputs;  // [2M, enc_dim + emb_dim + enc_emb_dim]: the input projection's columns after the mel
  tensor::Tensor rope_cos, rope_sin;  // [2M, head_dim / 2]: head 0's rotation at positions 0..M-1, twice
};

// Whether key block `key_block` is visible to query block `query_block` in a layer that looks
// `ahead` blocks forward and `backward` blocks back: -backward <= key - query <= ahead.
inline bool dit_block_visible(int64_t query_block, int64_t key_block, int ahead, int backward) {
  const int64_t diff = key_block - query_block;
  return diff >= -backward && diff <= ahead;
}

class Dit {
 public:
  Dit(const Checkpoint& checkpoint, DitConfig config, tensor::Device device = tensor::Device::cpu());
  ~Dit();

  const DitConfig& config() const { return config_; }

  // codes: n >= 1 talker codes in [0, num_embeds]; xvector [enc_emb_dim]; ref_mel [ref_frames,
  // mel_dim] row-major (the speaker's reference mel, long enough for the ECAPA's convolutions).
  DitConditioning condition(std::span<const int32_t> codes, std::span<const float> xvector,
                            std::span<const float> ref_mel, int64_t ref_frames) const;
  // One evaluation of the network at time t on x [M, mel_dim] (both branches see the same x):
  // [2M, mel_dim], the conditional rows then the unconditional.
  tensor::Tensor forward(const DitConditioning& c, const tensor::Tensor& x, float t) const;
  // The ODE function of the sampler: cond + guidance_scale * (cond - uncond), [M, mel_dim].
  tensor::Tensor velocity(const DitConditioning& c, const tensor::Tensor& x, float t, float guidance_scale) const;
  // Integrates from noise [M, mel_dim] (float32 on the model's device) at t = 0 to the mel at
  // t = 1: [M, mel_dim], time-major (transformers returns its transpose [1, mel_dim, M]).
  tensor::Tensor sample(const DitConditioning& c, const tensor::Tensor& noise, const DitSampling& sampling = {}) const;

 private:
  struct Linear {
    tensor::Tensor weight, bias;
  };
  struct Block {
    Linear modulation, q, k, v, out, ff_in, ff_out;
    int ahead = 0, backward = 0;
  };

  Linear load_linear(const Checkpoint& checkpoint, const std::string& name, int64_t out, int64_t in) const;
  tensor::Tensor apply(const Linear& l, const tensor::Tensor& x) const;
  // The sinusoidal time embedding through time_mlp, then SiLU (what every modulation reads): [1, H].
  tensor::Tensor time_features(float t) const;
  // The block's attention over normed [2M, H] into out [2M, inner_dim].
  void attention(const Block& block, const tensor::Tensor& normed, const DitConditioning& cond,
                 tensor::Tensor& out) const;

  DitConfig config_;
  tensor::Device device_;
  std::unique_ptr<qwen3_tts::SpeakerEncoder> ecapa_;
  tensor::Tensor code_table_;  // [num_embeds + 1, emb_dim]
  Linear time_in_, time_out_, input_proj_, norm_out_, proj_out_;
  std::vector<Block> blocks_;
  tensor::Tensor ones_;  // [H]
};

}  // namespace omni::model::qwen2_5_omni
