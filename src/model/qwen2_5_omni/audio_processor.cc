#include "model/qwen2_5_omni/audio_processor.h"

#include <algorithm>
#include <string>

#include "base/error.h"
#include "base/json.h"

namespace omni::model::qwen2_5_omni {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kDefaultSeconds = 300;
// Far above any extractor's window (an hour at 384 kHz), low enough for int64 products.
constexpr int64_t kMaxSamples = int64_t{1} << 40;

// n_samples, else chunk_length * sampling_rate, of one feature extractor's settings.
int64_t max_samples_of(const Json& c, int sampling_rate, const std::string& source) {
  if (auto it = c.find("n_samples"); it != c.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > kMaxSamples) {
      throw_error(ErrorCode::kLoadFailed, "{}: 'n_samples' must be a positive integer, got {}", source, it->dump());
    }
    return it->get<int64_t>();
  }
  if (auto it = c.find("chunk_length"); it != c.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > kMaxSamples / sampling_rate) {
      throw_error(ErrorCode::kLoadFailed, "{}: 'chunk_length' must be a positive integer of seconds, got {}", source,
                  it->dump());
    }
    return it->get<int64_t>() * sampling_rate;
  }
  return kDefaultSeconds * sampling_rate;
}

}  // namespace

AudioProcessor::AudioProcessor(const WhisperFeatureConfig& config, int64_t max_samples)
    : extractor_(config), max_samples_(max_samples) {
  if (max_samples_ < config.n_fft) {
    throw_error(ErrorCode::kLoadFailed, "n_samples {} is shorter than the extractor's window n_fft {}", max_samples_,
                config.n_fft);
  }
}

AudioProcessor AudioProcessor::load(const fs::path& dir) {
  const WhisperFeatureConfig whisper = load_whisper_feature_config(dir);
  const fs::path flat = dir / "preprocessor_config.json", nested = dir / "processor_config.json";
  int64_t max_samples = kDefaultSeconds * whisper.sampling_rate;
  if (fs::exists(flat)) {
    max_samples = max_samples_of(read_json_file(flat), whisper.sampling_rate, flat.string());
  } else {
    const Json processor = read_json_file(nested);
    max_samples = max_samples_of(processor.at("feature_extractor"), whisper.sampling_rate,
                                 nested.string() + ": feature_extractor");
  }
  return AudioProcessor(whisper, max_samples);
}

int64_t AudioProcessor::valid_frames(int64_t samples) const {
  const int64_t hop = config().hop_length;
  return (std::min(samples, max_samples_) + hop - 1) / hop;
}

std::vector<LogMelFeatures> AudioProcessor::extract(std::span<const std::span<const float>> audios) const {
  const int64_t hop = config().hop_length, n_fft = config().n_fft;
  std::vector<LogMelFeatures> out;
  std::vector<float> padded;
  for (size_t a = 0; a < audios.size(); ++a) {
    if (audios[a].empty()) throw_error(ErrorCode::kInvalidArgument, "audio {} has no samples", a);
    const int64_t samples = std::min<int64_t>(static_cast<int64_t>(audios[a].size()), max_samples_);
    const int64_t length = std::min(max_samples_, (samples + hop - 1) / hop * hop + n_fft);
    padded.assign(static_cast<size_t>(length), config().padding_value);
    std::copy(audios[a].begin(), audios[a].begin() + samples, padded.begin());
    const std::span<const float> one[1] = {padded};
    std::vector<LogMelFeatures> features;
    try {
      features = extractor_.extract(one);
    } catch (const Error& e) {
      throw_error(e.code(), "audio {}: {}", a, e.what());
    }
    features[0].valid_frames = std::min(valid_frames(samples), features[0].frames);
    out.push_back(std::move(features[0]));
  }
  return out;
}

}  // namespace omni::model::qwen2_5_omni
