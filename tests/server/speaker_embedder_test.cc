// SpeakerEmbedder's two threads (server/speaker_embedder.h): answers come in submission order
// whatever each job needed (an encoder run, a cache hit, an error), the same new audio submitted
// twice in a row runs the encoders once (the second finds the first's result), and the cache
// counters and the encode-time histogram count what really happened. The encoders are stand-ins
// that count their calls and wait until the test lets them go, so the worker is ahead of them.
#include "server/speaker_embedder.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "base/metrics.h"

namespace omni::server {
namespace {

// A 16-bit mono WAV of `seconds` of a tone at 16 kHz; `pitch` makes different audio.
std::string tone_wav(double seconds, double pitch) {
  const uint32_t rate = 16000, n = static_cast<uint32_t>(seconds * rate);
  std::string data;
  for (uint32_t i = 0; i < n; ++i) {
    const auto v = static_cast<int16_t>(3000.0 * std::sin(i * pitch));
    data.append(reinterpret_cast<const char*>(&v), 2);
  }
  auto u32 = [](uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); };
  auto u16 = [](uint16_t v) { return std::string(reinterpret_cast<const char*>(&v), 2); };
  return "RIFF" + u32(36 + static_cast<uint32_t>(data.size())) + "WAVEfmt " + u32(16) + u16(1) + u16(1) + u32(rate) +
         u32(rate * 2) + u16(2) + u16(16) + "data" + u32(static_cast<uint32_t>(data.size())) + data;
}

double metric(const MetricsRegistry& metrics, const std::string& series) {
  const std::string text = metrics.render_prometheus();
  std::smatch match;
  const std::regex line("\n" + std::regex_replace(series, std::regex(R"([{}"\\])"), R"(\$&)") + " ([0-9.e+-]+)");
  return std::regex_search(text, match, line) ? std::stod(match[1]) : -1;
}

class SpeakerEmbedderTest : public ::testing::Test {
 protected:
  SpeakerEmbedderTest() {
    VoiceEncoder encoder;
    encoder.sample_rate = 16000;
    encoder.embedding_size = 2;
    encoder.embed = [this](std::span<const float> samples) {
      ++embeds_;
      hold();
      return std::vector<float>{static_cast<float>(samples.size()), samples[samples.size() / 2]};
    };
    encoder.codes_per_frame = 2;
    encoder.reference_codes = [this](std::span<const float> samples) {
      ++encodes_;
      hold();
      return std::vector<int32_t>{static_cast<int32_t>(samples.size()), 7};
    };
    ReferenceAudioLimits limits;
    limits.min_seconds = 0.1;
    embedder_ = std::make_unique<SpeakerEmbedder>(std::move(encoder), MediaFetchOptions{}, limits, 8, metrics_);
  }

  ~SpeakerEmbedderTest() override {
    release();  // a failed test may have left the encoders held
    embedder_.reset();
  }

  // Submits `bytes` for embedding and codes; the answer's index in order_ is its place.
  void submit(const std::string& bytes, int id) {
    embedder_->submit_bytes_with_codes(bytes, "ref_audio", [this, id](ReferenceVoice voice, std::exception_ptr error) {
      std::lock_guard lock(mutex_);
      order_.push_back(id);
      voices_.push_back(error ? ReferenceVoice{} : std::move(voice));
      errors_.push_back(static_cast<bool>(error));
      done_.notify_all();
    });
  }
  // The encoders' stand-ins wait here until release().
  void hold() {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [this] { return released_; });
  }
  void release() {
    std::lock_guard lock(mutex_);
    released_ = true;
    done_.notify_all();
  }
  void wait_for(size_t answers) {
    std::unique_lock lock(mutex_);
    ASSERT_TRUE(done_.wait_for(lock, std::chrono::seconds(30), [&] { return order_.size() >= answers; }));
  }

  MetricsRegistry metrics_;
  std::atomic<int> embeds_{0}, encodes_{0};
  std::mutex mutex_;
  std::condition_variable done_;
  std::vector<int> order_;
  std::vector<ReferenceVoice> voices_;
  std::vector<bool> errors_;
  bool released_ = false;
  std::unique_ptr<SpeakerEmbedder> embedder_;
};

TEST_F(SpeakerEmbedderTest, AnswersInOrderAndEncodesNewAudioOnce) {
  const std::string a = tone_wav(0.5, 0.05), b = tone_wav(0.6, 0.07);
  submit(a, 0);            // new: both encoders
  submit(a, 1);            // decoded before 0 is encoded, so a miss when looked up first
  submit("not audio", 2);  // an error at once, answered after 0 and 1
  submit(b, 3);            // new
  // The worker decodes 0, 1 and 3 while the encoders still hold 0.
  for (int i = 0; i < 3000 && metric(metrics_, "omnistage:voice_clone_encode_seconds_count{part=\"decode\"}") < 3;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  {
    std::lock_guard lock(mutex_);
    EXPECT_TRUE(order_.empty()) << "an answer came before the first job's";
  }
  release();
  wait_for(4);
  submit(a, 4);  // a hit when looked up: no decode
  wait_for(5);
  EXPECT_EQ(order_, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(errors_, (std::vector<bool>{false, false, true, false, false}));
  // Each new audio ran each encoder once: 1 found 0's result when its turn came.
  EXPECT_EQ(embeds_.load(), 2);
  EXPECT_EQ(encodes_.load(), 2);
  EXPECT_EQ(voices_[0].embedding, voices_[1].embedding);
  EXPECT_EQ(voices_[0].codes, voices_[4].codes);
  EXPECT_EQ(voices_[0].embedding[0], 8000.0f);  // 0.5 s at 16 kHz
  EXPECT_EQ(voices_[3].embedding[0], 9600.0f);
  EXPECT_EQ(voices_[3].codes, (std::vector<int32_t>{9600, 7}));
  EXPECT_EQ(metric(metrics_, "omnistage:speaker_embedding_cache_misses_total"), 2);
  EXPECT_EQ(metric(metrics_, "omnistage:speaker_embedding_cache_hits_total"), 2);
  EXPECT_EQ(metric(metrics_, "omnistage:reference_codes_cache_misses_total"), 2);
  EXPECT_EQ(metric(metrics_, "omnistage:reference_codes_cache_hits_total"), 2);
  EXPECT_EQ(metric(metrics_, "omnistage:speaker_embedding_cache_entries"), 2);
  // The histogram times what ran: three decodes (0, 1 and 3: 1 missed when looked up), two runs
  // of each encoder.
  EXPECT_EQ(metric(metrics_, "omnistage:voice_clone_encode_seconds_count{part=\"decode\"}"), 3);
  EXPECT_EQ(metric(metrics_, "omnistage:voice_clone_encode_seconds_count{part=\"speaker_encoder\"}"), 2);
  EXPECT_EQ(metric(metrics_, "omnistage:voice_clone_encode_seconds_count{part=\"speech_tokenizer_encoder\"}"), 2);
  EXPECT_GT(metric(metrics_, "omnistage:voice_clone_encode_seconds_sum{part=\"speaker_encoder\"}"), 0.0);
}

TEST_F(SpeakerEmbedderTest, TheSynchronousPathUsesTheSameCache) {
  release();
  const std::string a = tone_wav(0.5, 0.05);
  const ReferenceVoice first = embedder_->reference_now(a, "audio_sample");
  EXPECT_EQ(first.codes, (std::vector<int32_t>{8000, 7}));
  submit(a, 0);
  wait_for(1);
  EXPECT_EQ(voices_[0].embedding, first.embedding);
  EXPECT_EQ(embeds_.load(), 1);
  EXPECT_EQ(encodes_.load(), 1);
  EXPECT_EQ(embedder_->embed_now(a, "audio_sample"), first.embedding);
  EXPECT_EQ(embeds_.load(), 1);
}

}  // namespace
}  // namespace omni::server
