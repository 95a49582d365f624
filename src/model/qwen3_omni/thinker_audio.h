// The thinker's audio input, from waveforms to the rows that replace a prompt's audio
// placeholders: the checkpoint's Whisper features (preprocessor_config.json) and its audio tower
// (thinker.audio_tower.*, thinker_config.audio_config), as Qwen3OmniMoeProcessor and the thinker's
// get_audio_features compute them for the audios of one request together.
//
// Immutable after loading; encode() may be called from any thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "base/json.h"
#include "model/qwen3_omni/audio_encoder.h"
#include "model/whisper_features.h"
#include "tensor/tensor.h"

namespace omni::model::qwen3_omni {

struct EncodedAudio {
  std::vector<int64_t> rows_per_audio;  // the placeholder count of each audio
  tensor::Tensor rows;                  // [sum of rows_per_audio, thinker hidden] host float32
};

class ThinkerAudio {
 public:
  // Loads the feature settings of `dir` (config: its config.json) and the audio tower from `ckpt`
  // onto `placement`. kLoadFailed naming the file, field or tensor at fault.
  ThinkerAudio(const std::filesystem::path& dir, const Json& config, const Checkpoint& ckpt, Placement placement);

  // Mono float32 audio at this rate is what encode() takes.
  int sample_rate() const { return features_.config().sampling_rate; }
  // The rows of `audios` (mono, sample_rate()), processed together. kInvalidArgument naming the
  // audio (by index) that is too short or holds non-finite samples.
  EncodedAudio encode(std::span<const std::span<const float>> audios) const;

  const WhisperFeatureExtractor& features() const { return features_; }
  const AudioEncoder& encoder() const { return *encoder_; }

 private:
  WhisperFeatureExtractor features_;
  std::unique_ptr<AudioEncoder> encoder_;
};

}  // namespace omni::model::qwen3_omni
