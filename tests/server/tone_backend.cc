#include "server/tone_backend.h"

#include <algorithm>

#include "runtime/test_runners/test_tone_runner.h"

namespace omni::testing {

namespace {

int64_t frame_count(const std::string& text, std::optional<int64_t> max_frames) {
  int64_t frames =
      std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
  return max_frames ? std::min(frames, *max_frames) : frames;
}

std::optional<int64_t> optional_int(const Json& object, const char* key) {
  return object.contains(key) ? std::optional<int64_t>(object[key].get<int64_t>()) : std::nullopt;
}

}  // namespace

ToneBackend::~ToneBackend() {
  for (std::thread& thread : threads_) thread.join();
}

std::vector<float> ToneBackend::expected_samples(const std::string& text, std::optional<int64_t> seed,
                                                 std::optional<int64_t> max_frames) {
  const double hz = runtime::tone_frequency(seed);
  std::vector<float> samples(static_cast<size_t>(frame_count(text, max_frames) * kToneSamplesPerFrame));
  for (size_t i = 0; i < samples.size(); ++i) {
    samples[i] = runtime::tone_sample(hz, kToneSampleRate, static_cast<int64_t>(i));
  }
  return samples;
}

void ToneBackend::submit(runtime::GenerationRequest request, runtime::EventSink sink) {
  auto live = std::make_shared<Live>();
  live->id = request.request_id;
  const Json info = request.additional_information;
  // The talker's sampling, where the speech route puts max_new_tokens (as max_tokens) and seed.
  const Json talker = request.sampling_params_list.empty() ? Json::object() : request.sampling_params_list[0];
  std::lock_guard lock(mutex_);
  submitted_.push_back(std::move(request));
  live_.push_back(live);
  threads_.emplace_back([this, live, info, talker, sink = std::move(sink)] {
    const std::string text = info.value("text", std::string());
    const std::vector<float> samples =
        expected_samples(text, optional_int(talker, "seed"), optional_int(talker, "max_tokens"));
    const size_t frames = samples.size() / kToneSamplesPerFrame;
    size_t chunk = static_cast<size_t>(info.value("initial_codec_chunk_frames", int64_t{1}));
    size_t done = 0;
    int completion = 0;
    while (true) {
      std::this_thread::sleep_for(chunk_delay_);
      runtime::ResponseEvent event;
      event.prompt_tokens = 0;
      if (live->aborted) {
        event.finish_reason = "abort";
        event.finished = true;
        sink(std::move(event));
        return;
      }
      if (text.starts_with("FAIL") && done > 0) {
        event.error = Error(ErrorCode::kInternal, "stage 1: the tone backend failed as asked");
        event.finished = true;
        sink(std::move(event));
        return;
      }
      size_t take = std::min(chunk, frames - done);
      event.audio.assign(samples.begin() + static_cast<std::ptrdiff_t>(done * kToneSamplesPerFrame),
                         samples.begin() + static_cast<std::ptrdiff_t>((done + take) * kToneSamplesPerFrame));
      event.audio_sample_rate = kToneSampleRate;
      done += take;
      completion += static_cast<int>(take);
      event.completion_tokens = completion;
      chunk = 2;
      if (done == frames) {
        event.finish_reason = "stop";
        event.finished = true;
      }
      const bool finished = event.finished;
      sink(std::move(event));
      if (finished) return;
    }
  });
}

void ToneBackend::abort(const std::string& request_id) {
  std::lock_guard lock(mutex_);
  aborted_.push_back(request_id);
  for (const auto& live : live_) {
    if (live->id == request_id) live->aborted = true;
  }
}

std::vector<runtime::GenerationRequest> ToneBackend::submitted() const {
  std::lock_guard lock(mutex_);
  return submitted_;
}

std::vector<std::string> ToneBackend::aborted() const {
  std::lock_guard lock(mutex_);
  return aborted_;
}

}  // namespace omni::testing
