// Qwen2_5OmniProcessor's audio step: the Whisper log-mel features (model/whisper_features.h) of
// each audio as the processor computes them with padding="max_length": every audio on its own,
// truncated to and zero-padded to the extractor's n_samples (chunk_length seconds, 300 for the
// released model), its valid frames (the feature attention mask) ceil(samples / hop_length).
//
// The padding past the audio only adds frames of silence, which neither change the frames that
// touch the audio nor raise its largest value (the clamp's reference), so an audio is padded to
// round_up(samples, hop) + n_fft zeros (at most n_samples) rather than the whole 300 s: the same
// valid frames at a fraction of the cost.
//
// Immutable after construction; any thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

#include "model/whisper_features.h"

namespace omni::model::qwen2_5_omni {

class AudioProcessor {
 public:
  // max_samples: n_samples of preprocessor_config.json (>= n_fft).
  AudioProcessor(const WhisperFeatureConfig& config, int64_t max_samples);
  // The settings of a checkpoint folder: load_whisper_feature_config's, n_samples (else
  // chunk_length * sampling_rate, else 300 s) from the same file. kLoadFailed naming the file and
  // field.
  static AudioProcessor load(const std::filesystem::path& dir);

  const WhisperFeatureConfig& config() const { return extractor_.config(); }
  int64_t max_samples() const { return max_samples_; }
  // The valid frames of an audio of `samples` samples.
  int64_t valid_frames(int64_t samples) const;
  // One LogMelFeatures per audio (mono, the config's rate), of which valid_frames are the audio's.
  // kInvalidArgument naming the audio (by index) that is empty or holds a non-finite sample.
  std::vector<LogMelFeatures> extract(std::span<const std::span<const float>> audios) const;

 private:
  WhisperFeatureExtractor extractor_;
  int64_t max_samples_ = 0;
};

}  // namespace omni::model::qwen2_5_omni
