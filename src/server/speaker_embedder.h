// Speaker embeddings of reference audio for voice cloning (POST /v1/audio/speech `ref_audio`, voice
// uploads), computed off the connections' executors by the model's speaker encoder and cached by
// audio content.
//
// A job takes a media reference (server/media_fetch.h) or the bytes themselves, fetches them,
// looks the bytes up in the cache (a bounded LRU keyed by a 64-bit hash and the length of the
// encoded bytes, so a repeated clone skips fetching nothing but decoding and the encoder), else
// decodes them (media/audio_decoder.h: any format FFmpeg reads, soxr-resampled to the encoder's
// rate), checks the duration and runs the encoder. Jobs run in order of submission on the
// embedder's own threads, VoiceEncoder::concurrency of them at once: one where the encoders
// spread over the CPU's cores, more where they run on a GPU, so that one reference's decoding on
// the CPU overlaps another's encoders and the GPU is handed the next work without waiting.
//
// In-context cloning (ref_audio with ref_text) needs the reference's codec frames too
// (submit_reference_with_codes): the model's speech-tokenizer encoder computes them from the same
// decoded samples, and a second LRU of the same capacity and key keeps them.
//
// Metrics (in the registry given): omnistage:speaker_embedding_cache_entries (gauge),
// omnistage:speaker_embedding_cache_hits_total, omnistage:speaker_embedding_cache_misses_total, and
// for the reference codes omnistage:reference_codes_cache_entries (gauge),
// omnistage:reference_codes_cache_hits_total, omnistage:reference_codes_cache_misses_total, and the
// time of each cache miss's work, omnistage:voice_clone_encode_seconds{part="decode"|"speaker_encoder"|
// "speech_tokenizer_encoder"} (decode: decoding, checking and resampling the reference).
// Errors reach `done` as an exception: InvalidField (400) naming the field for bad, too short or
// too long audio; what the encoder throws otherwise.
// Threads: submit() from any thread; `done` runs on one of the embedder's threads. The destructor
// finishes the jobs in progress and drops the queued ones without calling them.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "base/metrics.h"
#include "server/media_fetch.h"

namespace omni::server {

// The served model's speaker encoder, as the serve command wires it in (the server never loads
// weights): samples at `sample_rate` -> an embedding of `embedding_size` floats.
struct VoiceEncoder {
  int sample_rate = 0;
  size_t embedding_size = 0;
  std::function<std::vector<float>(std::span<const float> samples)> embed;
  // In-context cloning: samples -> codec frames of codes_per_frame codes (frame-major); empty when
  // the model has no speech-tokenizer encoder.
  size_t codes_per_frame = 0;
  std::function<std::vector<int32_t>(std::span<const float> samples)> reference_codes;
  // References worked on at once (both functions are called from that many threads).
  int concurrency = 1;
  explicit operator bool() const { return static_cast<bool>(embed); }
};

// What in-context cloning takes from one reference.
struct ReferenceVoice {
  std::vector<float> embedding;
  std::vector<int32_t> codes;  // frame-major
};

struct ReferenceAudioLimits {
  double min_seconds = 1.0;   // shorter references give no usable speaker embedding
  double max_seconds = 60.0;  // longer ones cost encoder time for nothing
};

class SpeakerEmbedder {
 public:
  using Done = std::function<void(std::vector<float> embedding, std::exception_ptr error)>;
  using ReferenceDone = std::function<void(ReferenceVoice voice, std::exception_ptr error)>;

  SpeakerEmbedder(VoiceEncoder encoder, MediaFetchOptions fetch, ReferenceAudioLimits limits, size_t cache_entries,
                  MetricsRegistry& metrics);
  ~SpeakerEmbedder();
  SpeakerEmbedder(const SpeakerEmbedder&) = delete;
  SpeakerEmbedder& operator=(const SpeakerEmbedder&) = delete;

  const VoiceEncoder& encoder() const { return encoder_; }
  // `reference`: a media reference (data URL, base64, http(s) or file URL); `field` names it in errors.
  void submit_reference(std::string reference, std::string field, Done done);
  // `bytes`: an audio file's bytes.
  void submit_bytes(std::string bytes, std::string field, Done done);
  // The embedding and the codec frames of a media reference (in-context cloning; needs
  // encoder().reference_codes).
  void submit_reference_with_codes(std::string reference, std::string field, ReferenceDone done);
  // The embedding and the codec frames of `bytes`, an audio file's bytes (voice uploads on a
  // checkpoint that clones in context; needs encoder().reference_codes).
  void submit_bytes_with_codes(std::string bytes, std::string field, ReferenceDone done);
  // The embedding of `bytes` on the calling thread (voices restored at start-up).
  std::vector<float> embed_now(const std::string& bytes, const std::string& field);
  // The embedding and codes of `bytes` on the calling thread.
  ReferenceVoice reference_now(const std::string& bytes, const std::string& field);
  size_t cache_size() const;
  size_t codes_cache_size() const;

 private:
  struct Job {
    std::string input;
    bool is_reference = false;
    std::string field;
    Done done;
    ReferenceDone reference_done;  // set: the job wants the codes too
  };
  using Key = std::pair<uint64_t, size_t>;
  // A bounded LRU by audio content; the caller holds cache_mutex_.
  template <typename V>
  struct Lru {
    std::list<std::pair<Key, V>> entries;  // most recent first
    std::map<Key, typename std::list<std::pair<Key, V>>::iterator> index;
    const V* find(const Key& key) {
      auto it = index.find(key);
      if (it == index.end()) return nullptr;
      entries.splice(entries.begin(), entries, it->second);
      return &it->second->second;
    }
    void put(const Key& key, V value, size_t capacity) {
      if (capacity == 0 || index.count(key)) return;
      entries.emplace_front(key, std::move(value));
      index[key] = entries.begin();
      while (entries.size() > capacity) {
        index.erase(entries.back().first);
        entries.pop_back();
      }
    }
  };

  void run();
  static Key key_of(const std::string& bytes);
  // The decoded, checked and resampled samples of `bytes`.
  std::vector<float> reference_samples(const std::string& bytes, const std::string& field);
  std::vector<float> decode_reference(const std::string& bytes, const std::string& field) const;
  std::vector<float> embed_samples(std::span<const float> samples);

  const VoiceEncoder encoder_;
  const MediaFetchOptions fetch_;
  const ReferenceAudioLimits limits_;
  const size_t capacity_;
  Histogram& decode_seconds_;
  Histogram& speaker_encoder_seconds_;
  Histogram& speech_tokenizer_encoder_seconds_;
  Gauge& cache_entries_;
  Counter& hits_;
  Counter& misses_;

  Gauge& codes_entries_;
  Counter& codes_hits_;
  Counter& codes_misses_;

  mutable std::mutex cache_mutex_;
  Lru<std::vector<float>> embeddings_;
  Lru<std::vector<int32_t>> codes_;

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

class VoiceStore;

// At start-up: voices whose stored embedding does not fit the encoder (uploaded for another
// model) are encoded again from their stored audio, or skipped with a warning when they have none.
// On a checkpoint with a speech-tokenizer encoder, a voice with audio whose stored reference codes
// are missing or do not fit (stored before, or for another model) gets them computed again.
void restore_uploaded_voices(VoiceStore& voices, SpeakerEmbedder& embedder);

}  // namespace omni::server
