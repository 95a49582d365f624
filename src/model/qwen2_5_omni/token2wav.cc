#include "model/qwen2_5_omni/token2wav.h"

#include "base/json.h"
#include "model/seeded_normal.h"

namespace omni::model::qwen2_5_omni {

Token2Wav::Token2Wav(const Checkpoint& checkpoint, Token2WavConfig config, tensor::Device device)
    : config_(std::move(config)),
      dit_(checkpoint, config_.dit, device),
      bigvgan_(checkpoint, config_.bigvgan, device) {}

std::unique_ptr<Token2Wav> Token2Wav::load(const std::filesystem::path& dir, tensor::Device device,
                                           bool random_weights) {
  const std::filesystem::path path = dir / "config.json";
  Token2WavConfig config = parse_token2wav_config(read_json_file(path), path.string());
  return std::make_unique<Token2Wav>(random_weights ? Checkpoint::random(dir, 0) : Checkpoint::open(dir),
                                     std::move(config), device);
}

tensor::Tensor Token2Wav::seeded_noise(int64_t codes, uint64_t seed) const {
  return seeded_standard_normal({codes * config_.dit.repeats, config_.dit.mel_dim}, seed);
}

tensor::Tensor Token2Wav::mel(std::span<const int32_t> codes, const Speaker& speaker, const tensor::Tensor& noise,
                              const DitSampling& sampling) const {
  const DitConditioning c = dit_.condition(codes, speaker.xvector, speaker.ref_mel, speaker.ref_frames);
  return dit_.sample(c, noise, sampling);
}

std::vector<float> Token2Wav::synthesize(std::span<const int32_t> codes, const Speaker& speaker,
                                         const tensor::Tensor& noise, const DitSampling& sampling) const {
  const tensor::Tensor wave = bigvgan_.synthesize(mel(codes, speaker, noise, sampling)).to(tensor::Device::cpu());
  return {wave.data<float>(), wave.data<float>() + wave.numel()};
}

}  // namespace omni::model::qwen2_5_omni
