#include "model/whisper_features.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "base/error.h"
#include "model/hf_config.h"
#include "model/mel_spectrogram.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"

namespace omni::model {
namespace {

namespace fs = std::filesystem;
using tensor::DType;
using tensor::Tensor;

// Frames transformed per block (bounds the scratch for long audio).
constexpr int64_t kFrameBlock = 512;

}  // namespace

WhisperFeatureConfig parse_whisper_feature_config(const Json& config, const std::string& source) {
  if (!config.is_object()) throw_error(ErrorCode::kLoadFailed, "{}: must be a JSON object", source);
  auto type = config.find("feature_extractor_type");
  if (type != config.end() && !type->is_null() && !type->is_string()) {
    throw_error(ErrorCode::kLoadFailed, "{}: 'feature_extractor_type' must be a string, got {}", source, type->dump());
  }
  if (type != config.end() && type->is_string() && type->get<std::string>() != "WhisperFeatureExtractor") {
    throw_error(ErrorCode::kUnsupported, "{}: feature_extractor_type '{}' is not supported (WhisperFeatureExtractor)",
                source, type->get<std::string>());
  }
  WhisperFeatureConfig c;
  c.feature_size = bounded_int(config, "feature_size", c.feature_size, 1, kMaxWhisperMelBins, source);
  c.sampling_rate = bounded_int(config, "sampling_rate", c.sampling_rate, 1, kMaxWhisperSamplingRate, source);
  c.hop_length = bounded_int(config, "hop_length", c.hop_length, 1, kMaxWhisperFftSize, source);
  c.n_fft = bounded_int(config, "n_fft", c.n_fft, 2, kMaxWhisperFftSize, source);
  if (auto it = config.find("padding_value"); it != config.end() && !it->is_null()) {
    // Read as a double: a value past float's range does not convert (undefined behaviour).
    if (!it->is_number() || !(std::abs(it->get<double>()) <= std::numeric_limits<float>::max())) {
      throw_error(ErrorCode::kLoadFailed, "{}: 'padding_value' must be a finite float32 number, got {}", source,
                  it->dump());
    }
    c.padding_value = static_cast<float>(it->get<double>());
  }
  if (auto it = config.find("dither"); it != config.end() && !it->is_null()) {
    if (!it->is_number()) throw_error(ErrorCode::kLoadFailed, "{}: 'dither' must be a number", source);
    if (it->get<double>() != 0.0) {
      throw_error(ErrorCode::kUnsupported, "{}: dither {} is not supported (only 0: no noise is added)", source,
                  it->get<double>());
    }
  }
  return c;
}

WhisperFeatureConfig load_whisper_feature_config(const fs::path& dir) {
  const fs::path flat = dir / "preprocessor_config.json";
  if (fs::exists(flat)) return parse_whisper_feature_config(read_json_file(flat), flat.string());
  const fs::path nested = dir / "processor_config.json";
  if (fs::exists(nested)) {
    const Json processor = read_json_file(nested);
    auto fe = processor.find("feature_extractor");
    if (fe == processor.end()) {
      throw_error(ErrorCode::kLoadFailed, "{}: missing field 'feature_extractor'", nested.string());
    }
    return parse_whisper_feature_config(*fe, nested.string() + ": feature_extractor");
  }
  throw_error(ErrorCode::kLoadFailed,
              "{}: no preprocessor_config.json or processor_config.json (the audio features' "
              "settings)",
              dir.string());
}

WhisperFeatureExtractor::WhisperFeatureExtractor(const WhisperFeatureConfig& config) : config_(config) {
  const int n = config_.n_fft;
  bins_ = n / 2 + 1;
  // The periodic Hann window, in float32 as torch.hann_window.
  std::vector<float> window(n);
  for (int i = 0; i < n; ++i) window[i] = static_cast<float>(0.5 - 0.5 * std::cos(2.0 * std::numbers::pi * i / n));
  // The window is folded into the transform: row i holds w[i] cos(2 pi k i / n), then -w[i] sin(...).
  dft_.resize(static_cast<size_t>(n) * 2 * bins_);
  for (int i = 0; i < n; ++i) {
    for (int k = 0; k < bins_; ++k) {
      const double angle = 2.0 * std::numbers::pi * static_cast<double>((static_cast<int64_t>(k) * i) % n) / n;
      dft_[static_cast<size_t>(i) * 2 * bins_ + k] = static_cast<float>(window[i] * std::cos(angle));
      dft_[static_cast<size_t>(i) * 2 * bins_ + bins_ + k] = static_cast<float>(-window[i] * std::sin(angle));
    }
  }
  // The Slaney-scale, Slaney-normalised filters over 0 Hz .. sampling_rate / 2, transposed to [bins, mels].
  const int mels = config_.feature_size;
  const std::vector<double> bank =
      slaney_mel_filterbank(config_.sampling_rate, n, mels, 0.0, config_.sampling_rate / 2.0);
  filters_.assign(static_cast<size_t>(bins_) * mels, 0.0f);
  for (int k = 0; k < bins_; ++k) {
    for (int m = 0; m < mels; ++m) {
      filters_[static_cast<size_t>(k) * mels + m] = static_cast<float>(bank[static_cast<size_t>(m) * bins_ + k]);
    }
  }
}

std::vector<LogMelFeatures> WhisperFeatureExtractor::extract(std::span<const std::span<const float>> audios) const {
  const int64_t n = config_.n_fft, hop = config_.hop_length, half = n / 2, mels = config_.feature_size;
  int64_t longest = 0;
  for (size_t a = 0; a < audios.size(); ++a) {
    const int64_t len = static_cast<int64_t>(audios[a].size());
    if (len <= half) {
      throw_error(ErrorCode::kInvalidArgument, "audio {} has {} samples; its features need at least {} ({} ms)", a, len,
                  half + 1, (half + 1) * 1000 / config_.sampling_rate);
    }
    for (float x : audios[a]) {
      if (!std::isfinite(x)) throw_error(ErrorCode::kInvalidArgument, "audio {} holds a non-finite sample", a);
    }
    longest = std::max(longest, len);
  }
  const int64_t frames = longest / hop;
  // The attention mask at every hop-th sample, one column fewer when the transform drops a frame.
  const int64_t mask_columns = (longest + hop - 1) / hop - (longest % hop != 0 ? 1 : 0);

  std::vector<LogMelFeatures> out;
  std::vector<float> padded(static_cast<size_t>(longest + 2 * half));
  std::vector<float> block(static_cast<size_t>(kFrameBlock * n)),
      spectrum(static_cast<size_t>(kFrameBlock * 2 * bins_));
  std::vector<float> power(static_cast<size_t>(kFrameBlock * bins_)), mel(static_cast<size_t>(kFrameBlock * mels));
  Tensor dft = Tensor::borrow(const_cast<float*>(dft_.data()), {n, 2 * bins_}, DType::kF32);
  Tensor filters = Tensor::borrow(const_cast<float*>(filters_.data()), {bins_, mels}, DType::kF32);
  for (size_t a = 0; a < audios.size(); ++a) {
    const std::span<const float> audio = audios[a];
    const int64_t len = static_cast<int64_t>(audio.size());
    float* x = padded.data() + half;
    std::copy(audio.begin(), audio.end(), x);
    std::fill(x + len, x + longest, config_.padding_value);
    for (int64_t i = 1; i <= half; ++i) {  // reflect padding, the edge sample not repeated
      x[-i] = x[i];
      x[longest - 1 + i] = x[longest - 1 - i];
    }

    LogMelFeatures f;
    f.mel_bins = mels;
    f.frames = frames;
    f.valid_frames = std::min((len + hop - 1) / hop, mask_columns);
    f.values.resize(static_cast<size_t>(mels * frames));
    for (int64_t first = 0; first < frames; first += kFrameBlock) {
      const int64_t rows = std::min(kFrameBlock, frames - first);
      for (int64_t r = 0; r < rows; ++r) {
        const float* frame = padded.data() + (first + r) * hop;
        std::copy(frame, frame + n, block.data() + r * n);
      }
      Tensor frames_t = Tensor::borrow(block.data(), {rows, n}, DType::kF32);
      Tensor spectrum_t = Tensor::borrow(spectrum.data(), {rows, 2 * bins_}, DType::kF32);
      tensor::ops::matmul(frames_t, dft, /*transpose_b=*/false, spectrum_t);
      for (int64_t r = 0; r < rows; ++r) {
        const float* s = spectrum.data() + r * 2 * bins_;
        for (int k = 0; k < bins_; ++k) {
          const float magnitude = std::hypot(s[k], s[bins_ + k]);
          power[r * bins_ + k] = magnitude * magnitude;
        }
      }
      Tensor power_t = Tensor::borrow(power.data(), {rows, bins_}, DType::kF32);
      Tensor mel_t = Tensor::borrow(mel.data(), {rows, mels}, DType::kF32);
      tensor::ops::matmul(power_t, filters, /*transpose_b=*/false, mel_t);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t m = 0; m < mels; ++m) {
          f.values[m * frames + first + r] = std::log10(std::max(mel[r * mels + m], 1e-10f));
        }
      }
    }
    const float ceiling = frames > 0 ? *std::max_element(f.values.begin(), f.values.end()) : 0.0f;
    for (float& v : f.values) v = (std::max(v, ceiling - 8.0f) + 4.0f) / 4.0f;
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace omni::model
