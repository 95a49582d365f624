// Whisper's log-mel features, as Hugging Face's WhisperFeatureExtractor computes them for the
// processors of the Qwen audio models (Qwen3-Omni, Qwen2.5-Omni): from mono float32 audio at the
// extractor's sampling rate, a centred short-time Fourier transform (periodic Hann window of n_fft,
// hop hop_length, reflect padding of n_fft / 2 at both ends, the last frame dropped), the power
// spectrum through a Slaney-scale, Slaney-normalised mel filterbank (0 Hz to sampling_rate / 2),
// log10 of it clamped below at 1e-10, then at (the audio's largest value - 8), mapped by
// (x + 4) / 4.
//
// Audios of one request are processed together, as the processor does with padding="longest":
// each is zero-padded (padding_value) to the longest one's samples before its transform, so every
// audio has the same number of frames, and an audio's valid frames (its attention mask) are
// ceil(samples / hop) of them, one fewer when the padded length is not a whole number of hops
// and the audio is the longest (the frame the transform drops). A lone audio has
// floor(samples / hop) valid frames.
//
// Immutable after construction; any thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "base/json.h"

namespace omni::model {

struct WhisperFeatureConfig {
  int feature_size = 80;  // mel bins
  int sampling_rate = 16000;
  int hop_length = 160;
  int n_fft = 400;
  float padding_value = 0.0f;
};

// Bounds on a config's sizes: far above any Whisper-style extractor's (80 or 128 mel bins, 16 kHz,
// n_fft 400, hop 160), low enough that the extractor's tables stay small (the transform table is
// n_fft * (n_fft + 2) floats: 64 MiB at the largest n_fft).
inline constexpr int kMaxWhisperMelBins = 1024;
inline constexpr int kMaxWhisperSamplingRate = 384000;
inline constexpr int kMaxWhisperFftSize = 4096;  // n_fft and hop_length

// The feature extractor's fields of a preprocessor_config.json object (`source` names it in
// errors). Throws omni::Error(kLoadFailed) naming the field for a value of the wrong type or range
// (feature_size 1..kMaxWhisperMelBins, sampling_rate 1..kMaxWhisperSamplingRate, n_fft
// 2..kMaxWhisperFftSize, hop_length 1..kMaxWhisperFftSize, padding_value a finite float32),
// and kUnsupported for a feature extractor other than WhisperFeatureExtractor or a non-zero
// `dither` (random noise, which no reference could reproduce). A flat preprocessor_config.json's
// `do_normalize` is the image processor's (WhisperFeatureExtractor takes it only as a call
// argument, which the Qwen processors leave unset) and is not read.
WhisperFeatureConfig parse_whisper_feature_config(const Json& config, const std::string& source);

// The config of a checkpoint folder: preprocessor_config.json, else processor_config.json's
// `feature_extractor` object (what transformers 5 writes). kLoadFailed when neither exists.
WhisperFeatureConfig load_whisper_feature_config(const std::filesystem::path& dir);

// One audio's features: values [mel_bins, frames] row-major, of which the first valid_frames are
// the audio's own.
struct LogMelFeatures {
  int64_t mel_bins = 0;
  int64_t frames = 0;
  int64_t valid_frames = 0;
  std::vector<float> values;
};

class WhisperFeatureExtractor {
 public:
  explicit WhisperFeatureExtractor(const WhisperFeatureConfig& config);

  const WhisperFeatureConfig& config() const { return config_; }
  // The features of `audios` processed together (see above), one per audio, in order. Throws
  // omni::Error(kInvalidArgument) naming the audio (by index) when it is shorter than n_fft / 2 + 1
  // samples (the reflect padding needs that many) or holds a non-finite sample.
  std::vector<LogMelFeatures> extract(std::span<const std::span<const float>> audios) const;
  // Valid frames of a lone audio of `samples` samples.
  int64_t frames_for(int64_t samples) const { return samples / config_.hop_length; }

 private:
  WhisperFeatureConfig config_;
  int bins_ = 0;                // n_fft / 2 + 1
  std::vector<float> dft_;      // [n_fft, 2 * bins]: cos then -sin of each bin, for one product per frame block
  std::vector<float> filters_;  // [bins, mel_bins]
};

}  // namespace omni::model
