// libFuzzer target for a checkpoint's preprocessor_config.json (model/whisper_features): the input,
// written as that file of a model folder, is read as a stage reads it, and, written as
// processor_config.json's `feature_extractor` (transformers 5's layout), read again. A config that
// is accepted then builds its extractor and computes the features of 0.1 s of a tone, when its
// n_fft is at most 1024 (larger ones are correct too, but building their tables takes long enough
// to slow the fuzzer down for nothing new).
//
// What must hold: anything malformed or out of range is an omni::Error naming the file and field;
// both layouts give the same config; an accepted config's sizes are within the documented bounds,
// and its features have mel_bins * frames finite values with valid_frames <= frames.
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/json.h"
#include "fuzz_guard.h"
#include "model/whisper_features.h"

namespace {

constexpr const char* kTarget = "whisper_config_fuzzer";
namespace fs = std::filesystem;
using omni::model::WhisperFeatureConfig;

fs::path make_folder(const char* name) {
  auto path = fs::temp_directory_path() / (std::string("omni-fuzz-") + name + "-" + std::to_string(getpid()));
  fs::create_directories(path);
  return path;
}

void write(const fs::path& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
}

bool same(const WhisperFeatureConfig& a, const WhisperFeatureConfig& b) {
  return a.feature_size == b.feature_size && a.sampling_rate == b.sampling_rate && a.hop_length == b.hop_length &&
         a.n_fft == b.n_fft && a.padding_value == b.padding_value;
}

void check_features(const WhisperFeatureConfig& config) {
  using namespace omni::model;
  omni::fuzz::require(config.feature_size >= 1 && config.feature_size <= kMaxWhisperMelBins &&
                          config.sampling_rate >= 1 && config.sampling_rate <= kMaxWhisperSamplingRate &&
                          config.n_fft >= 2 && config.n_fft <= kMaxWhisperFftSize && config.hop_length >= 1 &&
                          config.hop_length <= kMaxWhisperFftSize && std::isfinite(config.padding_value),
                      kTarget, "an accepted config is outside the documented bounds");
  if (config.n_fft > 1024) return;
  const WhisperFeatureExtractor extractor(config);
  // 0.1 s of a 440 Hz tone, at least n_fft / 2 + 1 samples (the least the transform takes).
  const size_t samples = std::max<size_t>(config.sampling_rate / 10, config.n_fft / 2 + 1);
  std::vector<float> tone(samples);
  for (size_t i = 0; i < samples; ++i) {
    tone[i] = 0.5f * static_cast<float>(std::sin(2 * std::numbers::pi * 440.0 * i / config.sampling_rate));
  }
  const std::span<const float> audio(tone);
  const std::vector<LogMelFeatures> features = extractor.extract(std::span<const std::span<const float>>(&audio, 1));
  omni::fuzz::require(features.size() == 1, kTarget, "one audio did not give one set of features");
  const LogMelFeatures& f = features[0];
  omni::fuzz::require(f.mel_bins == config.feature_size &&
                          f.frames == static_cast<int64_t>(samples) / config.hop_length &&
                          static_cast<int64_t>(f.values.size()) == f.mel_bins * f.frames && f.valid_frames >= 0 &&
                          f.valid_frames <= f.frames,
                      kTarget, "the features' shape does not follow the config");
  for (float v : f.values) omni::fuzz::require(std::isfinite(v), kTarget, "a feature is not finite");
}

void run(std::string_view text) {
  static const fs::path flat = make_folder("whisper-flat");
  static const fs::path nested = make_folder("whisper-nested");
  write(flat / "preprocessor_config.json", text);
  std::optional<WhisperFeatureConfig> config;
  omni::fuzz::expect_only_omni_errors(kTarget, [&] { config = omni::model::load_whisper_feature_config(flat); });
  const omni::Json parsed = omni::Json::parse(text, nullptr, false);
  if (parsed.is_discarded()) {
    omni::fuzz::require(!config, kTarget, "a file that is not JSON was accepted");
    return;
  }
  write(nested / "processor_config.json", omni::Json{{"feature_extractor", parsed}}.dump());
  std::optional<WhisperFeatureConfig> again;
  omni::fuzz::expect_only_omni_errors(kTarget, [&] { again = omni::model::load_whisper_feature_config(nested); });
  omni::fuzz::require(config.has_value() == again.has_value() && (!config || same(*config, *again)), kTarget,
                      "preprocessor_config.json and processor_config.json's feature_extractor read differently");
  if (config) omni::fuzz::expect_only_omni_errors(kTarget, [&] { check_features(*config); });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  run(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
