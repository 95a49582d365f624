// The speaker embedder's scheduling (server/speaker_embedder.h): references worked on at once up
// to the encoder's concurrency, each job's result reaching its own callback, the caches by audio
// content, and bad audio naming its field. The encoder is a small function of the samples (the
// real encoders' numbers are the model tests' business); the decoding is FFmpeg's, as served.
#include "server/speaker_embedder.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <future>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/metrics.h"
#include "media/pcm16.h"
#include "media/wav_encoder.h"

namespace omni::server {
namespace {

constexpr int kRate = 16000;

// `seconds` of a tone at `hz`, as a WAV file's bytes.
std::string tone_wav(double seconds, double hz) {
  std::vector<float> samples(static_cast<size_t>(seconds * kRate));
  for (size_t i = 0; i < samples.size(); ++i) samples[i] = 0.5f * std::sin(2 * M_PI * hz * i / kRate);
  std::string pcm;
  media::append_pcm16_le(samples, pcm);
  return media::wav_header(kRate, static_cast<int64_t>(pcm.size())) + pcm;
}

// Counts the encoder runs in flight and their peak. A run is held until `wait_for_running` runs
// are in flight together, for at most `hold` (or not at all once `released`).
struct EncoderProbe {
  std::mutex mutex;
  std::condition_variable changed;
  int running = 0;
  int peak = 0;
  int runs = 0;
  bool released = false;
  std::chrono::milliseconds hold{10000};

  void enter_and_wait(int wait_for_running) {
    std::unique_lock lock(mutex);
    ++running;
    ++runs;
    peak = std::max(peak, running);
    changed.notify_all();
    changed.wait_for(lock, hold, [&] { return released || peak >= wait_for_running; });
    --running;
  }
};

VoiceEncoder probe_encoder(EncoderProbe& probe, int concurrency, int wait_for_running) {
  VoiceEncoder encoder;
  encoder.sample_rate = kRate;
  encoder.embedding_size = 2;
  encoder.codes_per_frame = 4;
  encoder.concurrency = concurrency;
  // The embedding: the samples' count and their sum of squares, so each reference gets its own.
  encoder.embed = [&probe, wait_for_running](std::span<const float> samples) {
    probe.enter_and_wait(wait_for_running);
    const double energy = std::inner_product(samples.begin(), samples.end(), samples.begin(), 0.0);
    return std::vector<float>{static_cast<float>(samples.size()), static_cast<float>(energy)};
  };
  encoder.reference_codes = [](std::span<const float> samples) {
    return std::vector<int32_t>(8, static_cast<int32_t>(samples.size() / 1000));
  };
  return encoder;
}

TEST(SpeakerEmbedderTest, WorksOnAsManyReferencesAtOnceAsItsConcurrency) {
  MetricsRegistry metrics;
  EncoderProbe probe;
  SpeakerEmbedder embedder(probe_encoder(probe, 3, 3), {}, ReferenceAudioLimits{}, 16, metrics);
  std::vector<std::promise<std::vector<float>>> results(3);
  for (int i = 0; i < 3; ++i) {
    embedder.submit_bytes(tone_wav(1.0 + i, 220), "ref_audio",
                          [&results, i](std::vector<float> e, std::exception_ptr error) {
                            if (error) {
                              results[i].set_exception(error);
                            } else {
                              results[i].set_value(std::move(e));
                            }
                          });
  }
  for (int i = 0; i < 3; ++i) {
    std::future<std::vector<float>> f = results[i].get_future();
    ASSERT_EQ(f.wait_for(std::chrono::seconds(20)), std::future_status::ready);
    const std::vector<float> embedding = f.get();
    ASSERT_EQ(embedding.size(), 2u);
    EXPECT_EQ(embedding[0], static_cast<float>((1 + i) * kRate));  // its own reference's samples
  }
  EXPECT_EQ(probe.peak, 3);  // all three ran at once: each waited for the others
  EXPECT_EQ(probe.runs, 3);
}

TEST(SpeakerEmbedderTest, OneAtATimeWithConcurrencyOne) {
  MetricsRegistry metrics;
  EncoderProbe probe;
  probe.hold = std::chrono::milliseconds(100);  // each run waits this long for a second one
  SpeakerEmbedder embedder(probe_encoder(probe, 1, 2), {}, ReferenceAudioLimits{}, 16, metrics);
  std::atomic<int> done = 0;
  for (int i = 0; i < 4; ++i) {
    embedder.submit_bytes(tone_wav(1.0, 100 + 50 * i), "ref_audio",
                          [&done](std::vector<float>, std::exception_ptr error) {
                            EXPECT_FALSE(error);
                            ++done;
                          });
  }
  for (int i = 0; i < 400 && done < 4; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  EXPECT_EQ(done, 4);
  EXPECT_EQ(probe.peak, 1);
  EXPECT_EQ(probe.runs, 4);
}

TEST(SpeakerEmbedderTest, CachesByContentAndNamesTheFieldOfBadAudio) {
  MetricsRegistry metrics;
  EncoderProbe probe;
  probe.released = true;
  SpeakerEmbedder embedder(probe_encoder(probe, 2, 1), {}, ReferenceAudioLimits{}, 16, metrics);
  const std::string wav = tone_wav(2.0, 440);
  const ReferenceVoice first = embedder.reference_now(wav, "ref_audio");
  const ReferenceVoice again = embedder.reference_now(wav, "ref_audio");
  EXPECT_EQ(probe.runs, 1);  // the second came from the caches
  EXPECT_EQ(first.embedding, again.embedding);
  EXPECT_EQ(first.codes, std::vector<int32_t>(8, 2 * kRate / 1000));
  EXPECT_EQ(again.codes, first.codes);
  EXPECT_EQ(embedder.cache_size(), 1u);
  EXPECT_EQ(embedder.codes_cache_size(), 1u);

  std::promise<std::string> message;
  embedder.submit_bytes(tone_wav(0.25, 440), "ref_audio", [&message](std::vector<float>, std::exception_ptr error) {
    try {
      if (error) std::rethrow_exception(error);
      message.set_value("no error");
    } catch (const std::exception& e) {
      message.set_value(e.what());
    }
  });
  std::future<std::string> f = message.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  EXPECT_EQ(f.get(), "'ref_audio': the reference audio is 0.25 s long; voice cloning needs at least 1 s");
}

TEST(SpeakerEmbedderTest, RefusesAConcurrencyBelowOne) {
  MetricsRegistry metrics;
  EncoderProbe probe;
  try {
    SpeakerEmbedder embedder(probe_encoder(probe, 0, 1), {}, ReferenceAudioLimits{}, 16, metrics);
    FAIL() << "accepted a concurrency of 0";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "voice cloning: the encoders' concurrency is 0; it must be at least 1");
  }
}

}  // namespace
}  // namespace omni::server
