// TEST ONLY: a ServingBackend that answers speech requests with a known tone, as a TTS pipeline
// would: one 1920-sample frame per character of additional_information.text (at most the talker's
// sampling_params_list[0].max_tokens), delivered from its own thread in chunks
// (initial_codec_chunk_frames, default 1, then 2 frames per event), samples from
// runtime::tone_sample() with the talker's seed (sampling_params_list[0].seed). A text
// starting with "FAIL" ends with an error event after the first chunk.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/serving_backend.h"

namespace omni::testing {

inline constexpr int kToneSampleRate = 24000;
inline constexpr int kToneSamplesPerFrame = 1920;

class ToneBackend : public runtime::ServingBackend {
 public:
  explicit ToneBackend(std::chrono::milliseconds chunk_delay = std::chrono::milliseconds(1))
      : chunk_delay_(chunk_delay) {}
  ~ToneBackend() override;

  void submit(runtime::GenerationRequest request, runtime::EventSink sink) override;
  void abort(const std::string& request_id) override;
  bool healthy() const override { return true; }

  std::vector<runtime::GenerationRequest> submitted() const;
  std::vector<std::string> aborted() const;

  // The samples a request with this text, seed and cap produces.
  static std::vector<float> expected_samples(const std::string& text, std::optional<int64_t> seed,
                                             std::optional<int64_t> max_frames = std::nullopt);

 private:
  struct Live {
    std::string id;
    std::atomic<bool> aborted{false};
  };

  std::chrono::milliseconds chunk_delay_;
  mutable std::mutex mutex_;
  std::vector<runtime::GenerationRequest> submitted_;
  std::vector<std::string> aborted_;
  std::vector<std::shared_ptr<Live>> live_;
  std::vector<std::thread> threads_;
};

}  // namespace omni::testing
