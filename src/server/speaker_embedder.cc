#include "server/speaker_embedder.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "media/audio_decoder.h"
#include "server/openai_error.h"
#include "server/voice_store.h"

namespace omni::server {
namespace {

MetricFamily<Histogram>& encode_seconds(MetricsRegistry& metrics) {
  static const std::vector<double> kBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                               0.25,  0.5,    1.0,   2.5,  5.0,   10.0};
  return metrics.histogram("omnistage:voice_clone_encode_seconds",
                           "Time of a voice-clone reference's work on a cache miss: decode (decoding, checking and "
                           "resampling), speaker_encoder, speech_tokenizer_encoder.",
                           {"part"}, kBuckets);
}

// Runs `work` and observes its seconds in `histogram`.
template <typename Work>
auto timed(Histogram& histogram, Work&& work) {
  const auto start = std::chrono::steady_clock::now();
  auto result = work();
  histogram.observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return result;
}

}  // namespace

SpeakerEmbedder::SpeakerEmbedder(VoiceEncoder encoder, MediaFetchOptions fetch, ReferenceAudioLimits limits,
                                 size_t cache_entries, MetricsRegistry& metrics)
    : encoder_(std::move(encoder)),
      fetch_(std::move(fetch)),
      limits_(limits),
      capacity_(cache_entries),
      decode_seconds_(encode_seconds(metrics).with({"decode"})),
      speaker_encoder_seconds_(encode_seconds(metrics).with({"speaker_encoder"})),
      speech_tokenizer_encoder_seconds_(encode_seconds(metrics).with({"speech_tokenizer_encoder"})),
      cache_entries_(metrics
                         .gauge("omnistage:speaker_embedding_cache_entries",
                                "Speaker embeddings of reference audio held in the cache.", {})
                         .with({})),
      hits_(metrics
                .counter("omnistage:speaker_embedding_cache_hits_total",
                         "Voice-clone references whose speaker embedding came from the cache.", {})
                .with({})),
      misses_(metrics
                  .counter("omnistage:speaker_embedding_cache_misses_total",
                           "Voice-clone references that ran the speaker encoder.", {})
                  .with({})),
      codes_entries_(metrics
                         .gauge("omnistage:reference_codes_cache_entries",
                                "Codec frames of in-context voice-clone references held in the cache.", {})
                         .with({})),
      codes_hits_(metrics
                      .counter("omnistage:reference_codes_cache_hits_total",
                               "In-context voice-clone references whose codec frames came from the cache.", {})
                      .with({})),
      codes_misses_(metrics
                        .counter("omnistage:reference_codes_cache_misses_total",
                                 "In-context voice-clone references that ran the speech-tokenizer encoder.", {})
                        .with({})) {
  if (encoder_.concurrency < 1) {
    throw_error(ErrorCode::kInvalidArgument, "voice cloning: the encoders' concurrency is {}; it must be at least 1",
                encoder_.concurrency);
  }
  for (int i = 0; i < encoder_.concurrency; ++i) workers_.emplace_back([this] { run(); });
}

SpeakerEmbedder::~SpeakerEmbedder() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void SpeakerEmbedder::submit_reference(std::string reference, std::string field, Done done) {
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back({std::move(reference), true, std::move(field), std::move(done)});
  }
  wake_.notify_one();
}

void SpeakerEmbedder::submit_bytes(std::string bytes, std::string field, Done done) {
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back({std::move(bytes), false, std::move(field), std::move(done)});
  }
  wake_.notify_one();
}

void SpeakerEmbedder::submit_reference_with_codes(std::string reference, std::string field, ReferenceDone done) {
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back({std::move(reference), true, std::move(field), nullptr, std::move(done)});
  }
  wake_.notify_one();
}

void SpeakerEmbedder::submit_bytes_with_codes(std::string bytes, std::string field, ReferenceDone done) {
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back({std::move(bytes), false, std::move(field), nullptr, std::move(done)});
  }
  wake_.notify_one();
}

size_t SpeakerEmbedder::cache_size() const {
  std::lock_guard lock(cache_mutex_);
  return embeddings_.entries.size();
}

size_t SpeakerEmbedder::codes_cache_size() const {
  std::lock_guard lock(cache_mutex_);
  return codes_.entries.size();
}

void SpeakerEmbedder::run() {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (stopping_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    ReferenceVoice voice;
    std::exception_ptr error;
    try {
      const std::string bytes = job.is_reference ? fetch_media(job.input, job.field, fetch_) : std::move(job.input);
      if (job.reference_done) {
        voice = reference_now(bytes, job.field);
      } else {
        voice.embedding = embed_now(bytes, job.field);
      }
    } catch (...) {
      error = std::current_exception();
    }
    if (job.reference_done) {
      job.reference_done(std::move(voice), error);
    } else {
      job.done(std::move(voice.embedding), error);
    }
  }
}

SpeakerEmbedder::Key SpeakerEmbedder::key_of(const std::string& bytes) {
  return {std::hash<std::string_view>{}(bytes), bytes.size()};
}

std::vector<float> SpeakerEmbedder::embed_now(const std::string& bytes, const std::string& field) {
  const Key key = key_of(bytes);
  {
    std::lock_guard lock(cache_mutex_);
    if (const std::vector<float>* hit = embeddings_.find(key)) {
      hits_.add();
      return *hit;
    }
  }
  misses_.add();
  std::vector<float> embedding = embed_samples(reference_samples(bytes, field));
  std::lock_guard lock(cache_mutex_);
  embeddings_.put(key, embedding, capacity_);
  cache_entries_.set(static_cast<double>(embeddings_.entries.size()));
  return embedding;
}

ReferenceVoice SpeakerEmbedder::reference_now(const std::string& bytes, const std::string& field) {
  if (!encoder_.reference_codes) {
    throw_invalid_field(field, "'{}': this model has no speech-tokenizer encoder for in-context cloning", field);
  }
  const Key key = key_of(bytes);
  std::optional<std::vector<float>> embedding;
  std::optional<std::vector<int32_t>> codes;
  {
    std::lock_guard lock(cache_mutex_);
    if (const std::vector<float>* hit = embeddings_.find(key)) embedding = *hit;
    if (const std::vector<int32_t>* hit = codes_.find(key)) codes = *hit;
  }
  (embedding ? hits_ : misses_).add();
  (codes ? codes_hits_ : codes_misses_).add();
  if (embedding && codes) return {std::move(*embedding), std::move(*codes)};
  const std::vector<float> samples = reference_samples(bytes, field);
  if (!embedding) embedding = embed_samples(samples);
  if (!codes) codes = timed(speech_tokenizer_encoder_seconds_, [&] { return encoder_.reference_codes(samples); });
  if (encoder_.codes_per_frame == 0 || codes->empty() || codes->size() % encoder_.codes_per_frame != 0) {
    throw_error(ErrorCode::kInternal, "the speech-tokenizer encoder gave {} codes, not whole frames of {}",
                codes->size(), encoder_.codes_per_frame);
  }
  std::lock_guard lock(cache_mutex_);
  embeddings_.put(key, *embedding, capacity_);
  codes_.put(key, *codes, capacity_);
  cache_entries_.set(static_cast<double>(embeddings_.entries.size()));
  codes_entries_.set(static_cast<double>(codes_.entries.size()));
  return {std::move(*embedding), std::move(*codes)};
}

std::vector<float> SpeakerEmbedder::reference_samples(const std::string& bytes, const std::string& field) {
  return timed(decode_seconds_, [&] { return decode_reference(bytes, field); });
}

std::vector<float> SpeakerEmbedder::decode_reference(const std::string& bytes, const std::string& field) const {
  media::DecodedAudio audio;
  media::AudioDecodeLimits decode_limits;
  decode_limits.max_bytes = fetch_.max_bytes;
  decode_limits.max_seconds = limits_.max_seconds;
  try {
    audio = media::decode_audio(bytes, decode_limits);
  } catch (const Error& e) {
    throw_invalid_field(field, "'{}': {}", field, e.what());
  }
  const double seconds = audio.seconds();
  if (seconds < limits_.min_seconds) {
    throw_invalid_field(field, "'{}': the reference audio is {:.2f} s long; voice cloning needs at least {} s", field,
                        seconds, limits_.min_seconds);
  }
  if (seconds > limits_.max_seconds) {
    throw_invalid_field(field, "'{}': the reference audio is longer than the limit of {} s", field,
                        limits_.max_seconds);
  }
  return media::resample_audio(audio.samples, audio.sample_rate, encoder_.sample_rate);
}

std::vector<float> SpeakerEmbedder::embed_samples(std::span<const float> samples) {
  std::vector<float> embedding = timed(speaker_encoder_seconds_, [&] { return encoder_.embed(samples); });
  if (embedding.size() != encoder_.embedding_size) {
    throw_error(ErrorCode::kInternal, "the speaker encoder gave {} values, expected {}", embedding.size(),
                encoder_.embedding_size);
  }
  return embedding;
}

void restore_uploaded_voices(VoiceStore& voices, SpeakerEmbedder& embedder) {
  const VoiceEncoder& encoder = embedder.encoder();
  for (const UploadedVoice& voice : voices.list()) {
    const bool embedding_fits = voice.embedding.size() == encoder.embedding_size;
    const bool codes_fit = !encoder.reference_codes || !voice.has_audio ||
                           (!voice.ref_code.empty() && voice.ref_code.size() % encoder.codes_per_frame == 0);
    if (embedding_fits && codes_fit) continue;
    std::optional<std::string> audio = voices.audio(voice.name);
    if (!audio) {
      if (!embedding_fits) {
        spdlog::warn(
            "voices: '{}' has a speaker embedding of {} values, this model takes {}, and no audio to encode "
            "again; requests naming it will fail",
            voice.name, voice.embedding.size(), encoder.embedding_size);
      } else {
        spdlog::warn(
            "voices: '{}' has no reference codes and its audio file is missing; it clones from its "
            "speaker embedding only",
            voice.name);
      }
      continue;
    }
    try {
      if (encoder.reference_codes) {
        // A voice encoded again for another model needs that model's codes too.
        ReferenceVoice reference = embedder.reference_now(*audio, "audio_sample");
        voices.update_embedding(voice.name, std::move(reference.embedding));
        voices.update_ref_code(voice.name, std::move(reference.codes));
      } else {
        voices.update_embedding(voice.name, embedder.embed_now(*audio, "audio_sample"));
      }
    } catch (const std::exception& e) {
      spdlog::warn("voices: cannot encode '{}' again: {}", voice.name, e.what());
    }
  }
}

}  // namespace omni::server
