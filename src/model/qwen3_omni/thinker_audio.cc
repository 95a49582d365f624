#include "model/qwen3_omni/thinker_audio.h"

#include <string>

#include "base/error.h"
#include "model/safetensors.h"

namespace omni::model::qwen3_omni {
namespace {

AudioEncoderConfig audio_config_of(const std::filesystem::path& dir, const Json& config) {
  const std::string source = (dir / "config.json").string();
  auto thinker = config.find("thinker_config");
  if (thinker == config.end() || !thinker->is_object() || !thinker->contains("audio_config")) {
    throw_error(ErrorCode::kLoadFailed, "{}: missing field 'thinker_config.audio_config'", source);
  }
  return parse_audio_encoder_config((*thinker)["audio_config"], source + ": thinker_config.audio_config");
}

}  // namespace

ThinkerAudio::ThinkerAudio(const std::filesystem::path& dir, const Json& config, const Checkpoint& ckpt,
                           Placement placement)
    : features_(load_whisper_feature_config(dir)) {
  const AudioEncoderConfig audio = audio_config_of(dir, config);
  if (audio.num_mel_bins != features_.config().feature_size) {
    throw_error(ErrorCode::kLoadFailed, "{}: the audio tower reads {} mel bins, the features have {}", dir.string(),
                audio.num_mel_bins, features_.config().feature_size);
  }
  encoder_ = std::make_unique<AudioEncoder>(ckpt, audio, "thinker.audio_tower.", placement);
}

EncodedAudio ThinkerAudio::encode(std::span<const std::span<const float>> audios) const {
  const std::vector<LogMelFeatures> mel = features_.extract(audios);
  std::vector<AudioFeatures> inputs;
  EncodedAudio out;
  for (const LogMelFeatures& f : mel) {
    inputs.push_back({f.values.data(), f.valid_frames, f.frames});
    out.rows_per_audio.push_back(audio_output_length(f.valid_frames, encoder_->config().n_window));
  }
  out.rows = encoder_->encode(inputs);
  return out;
}

}  // namespace omni::model::qwen3_omni
