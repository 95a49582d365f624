#include "server/speaker_embedder.h"

#include <spdlog/spdlog.h>

#include "media/audio_decoder.h"
#include "server/openai_error.h"
#include "server/voice_store.h"

namespace omni::server {

SpeakerEmbedder::SpeakerEmbedder(VoiceEncoder encoder, MediaFetchOptions fetch, ReferenceAudioLimits limits,
                                 size_t cache_entries, MetricsRegistry& metrics)
    : encoder_(std::move(encoder)),
      fetch_(std::move(fetch)),
      limits_(limits),
      capacity_(cache_entries),
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
      worker_([this] { run(); }) {}

SpeakerEmbedder::~SpeakerEmbedder() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  worker_.join();
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

size_t SpeakerEmbedder::cache_size() const {
  std::lock_guard lock(cache_mutex_);
  return lru_.size();
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
    std::vector<float> embedding;
    std::exception_ptr error;
    try {
      const std::string bytes = job.is_reference ? fetch_media(job.input, job.field, fetch_) : std::move(job.input);
      embedding = embed_now(bytes, job.field);
    } catch (...) {
      error = std::current_exception();
    }
    job.done(std::move(embedding), error);
  }
}

std::vector<float> SpeakerEmbedder::embed_now(const std::string& bytes, const std::string& field) {
  const Key key{std::hash<std::string_view>{}(bytes), bytes.size()};
  {
    std::lock_guard lock(cache_mutex_);
    if (auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      hits_.add();
      return it->second->second;
    }
  }
  misses_.add();
  std::vector<float> embedding = embed_bytes(bytes, field);
  if (capacity_ == 0) return embedding;
  std::lock_guard lock(cache_mutex_);
  if (index_.find(key) == index_.end()) {
    lru_.emplace_front(key, embedding);
    index_[key] = lru_.begin();
    while (lru_.size() > capacity_) {
      index_.erase(lru_.back().first);
      lru_.pop_back();
    }
  }
  cache_entries_.set(static_cast<double>(lru_.size()));
  return embedding;
}

std::vector<float> SpeakerEmbedder::embed_bytes(const std::string& bytes, const std::string& field) {
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
  const std::vector<float> samples = media::resample_audio(audio.samples, audio.sample_rate, encoder_.sample_rate);
  std::lock_guard lock(encode_mutex_);
  std::vector<float> embedding = encoder_.embed(samples);
  if (embedding.size() != encoder_.embedding_size) {
    throw_error(ErrorCode::kInternal, "the speaker encoder gave {} values, expected {}", embedding.size(),
                encoder_.embedding_size);
  }
  return embedding;
}

void restore_uploaded_voices(VoiceStore& voices, SpeakerEmbedder& embedder) {
  for (const UploadedVoice& voice : voices.list()) {
    if (voice.embedding.size() == embedder.encoder().embedding_size) continue;
    std::optional<std::string> audio = voices.audio(voice.name);
    if (!audio) {
      spdlog::warn(
          "voices: '{}' has a speaker embedding of {} values, this model takes {}, and no audio to encode "
          "again; requests naming it will fail",
          voice.name, voice.embedding.size(), embedder.encoder().embedding_size);
      continue;
    }
    try {
      voices.update_embedding(voice.name, embedder.embed_now(*audio, "audio_sample"));
    } catch (const std::exception& e) {
      spdlog::warn("voices: cannot encode '{}' again: {}", voice.name, e.what());
    }
  }
}

}  // namespace omni::server
