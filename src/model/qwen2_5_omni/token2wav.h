// Qwen2.5-Omni's token2wav stage model (transformers' Qwen2_5OmniToken2WavModel): talker codes
// -> mel by the DiT's flow-matching sampler (model/qwen2_5_omni/dit.h) -> 24 kHz waveform by
// BigVGAN (model/qwen2_5_omni/bigvgan.h), conditioned on one of spk_dict.pt's speakers.
//
// Always float32, as transformers forces it. Immutable after loading: several threads may
// synthesise at once. Errors: kNotFound / kLoadFailed naming the file, field or tensor at load;
// kInvalidArgument for bad codes, noise or an unknown speaker.
#pragma once

#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "model/qwen2_5_omni/bigvgan.h"
#include "model/qwen2_5_omni/dit.h"
#include "model/qwen2_5_omni/speaker_dict.h"
#include "model/qwen2_5_omni/token2wav_config.h"
#include "model/safetensors.h"

namespace omni::model::qwen2_5_omni {

class Token2Wav {
 public:
  Token2Wav(const Checkpoint& checkpoint, Token2WavConfig config, tensor::Device device = tensor::Device::cpu());
  // The checkpoint folder `dir`: config.json's token2wav_config and the token2wav.* weights
  // (random ones of the same shapes with random_weights: `--load-format dummy`).
  static std::unique_ptr<Token2Wav> load(const std::filesystem::path& dir,
                                         tensor::Device device = tensor::Device::cpu(), bool random_weights = false);

  const Token2WavConfig& config() const { return config_; }
  const Dit& dit() const { return dit_; }
  const BigVgan& bigvgan() const { return bigvgan_; }

  // The sampler's starting noise for `codes` codes when a request gives a seed: [repeats * codes,
  // mel_dim] standard normals (model/seeded_normal.h; not torch's generator).
  tensor::Tensor seeded_noise(int64_t codes, uint64_t seed) const;
  // codes -> mel [repeats * codes, mel_dim] from `noise` of that shape (on any device).
  tensor::Tensor mel(std::span<const int32_t> codes, const Speaker& speaker, const tensor::Tensor& noise,
                     const DitSampling& sampling = {}) const;
  // codes -> the waveform [repeats * codes * hop] on the host.
  std::vector<float> synthesize(std::span<const int32_t> codes, const Speaker& speaker, const tensor::Tensor& noise,
                                const DitSampling& sampling = {}) const;

 private:
  Token2WavConfig config_;
  Dit dit_;
  BigVgan bigvgan_;
};

}  // namespace omni::model::qwen2_5_omni
