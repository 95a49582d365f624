// GenerationEngine: serves a non-autoregressive streaming decoder (a vocoder that turns speech codes into audio) to
// many requests at once. Each request's frames arrive piece by piece (async_chunk) and are decoded in chunks as soon as
// enough have arrived: first `first_chunk_frames` (a short first chunk for a quick first packet), then `chunk_frames`
// at a time, and whatever is left once the input ends. Each request owns a decoder stream (model/audio_decoder.h), so
// the audio of any chunking is the audio of decoding all frames at once; no left context is ever decoded twice.
//
// Each step() is one decoder call over some of the ready requests, chosen by
// engine/audio_chunk_schedule.h: first chunks ahead of running streams' later chunks (all of them
// together while they are short), later chunks by the time their stream's audio runs out, batch
// sizes from the captured buckets when given. One call per step lets the stage send a call's audio
// at once and take new input before the next call. A batch goes to the decoder's decode_batch()
// when the decoder batches (StreamingAudioDecoder::max_batch() > 1), so that its chunks share the
// decoder's kernel launches.
//
// Threads: one thread (the stage loop) calls everything. Errors: omni::Error as documented per
// call; a request whose frames cannot be decoded ends with an error output, the others go on.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/error.h"
#include "engine/audio_chunk_schedule.h"
#include "model/audio_chunking.h"
#include "model/audio_decoder.h"

namespace omni::engine {

// How requests' frames are cut into decoder calls (model/audio_chunking.h).
using AudioChunking = model::AudioChunking;

struct AudioOutput {
  std::string request_id;
  std::vector<float> audio;    // new samples, mono, at the decoder's sample rate
  bool finished = false;       // the request's last output: its input ended and all of it is decoded
  std::optional<Error> error;  // the request failed and is gone (finished is set too)
};

class GenerationEngine {
 public:
  // The engine's clock: the schedule's deadlines and the measured cost of decoder calls.
  using TimeSource = std::function<AudioClock::time_point()>;

  // The decoder must outlive the engine. kInvalidArgument when a chunk size, max_batch or a batch
  // size is below 1. `now` is the clock (tests script it).
  GenerationEngine(const model::StreamingAudioDecoder& decoder, AudioChunking chunking,
                   TimeSource now = AudioClock::now);

  // Starts a request; first_chunk_frames overrides the engine's for this request. `context`
  // (whole frames, frame-major) is left context: frames decoded ahead of the request's own, whose
  // audio is dropped (a voice clone's reference frames, which the request's frames continue, so
  // that the audio of its first frames is the audio they have after them). The context is decoded
  // here, in a call of its own, unless an earlier request had the same context: the engine keeps
  // the streams after the last chunking.reference_states distinct contexts (an LRU; decoders that
  // copy streams, StreamingAudioDecoder::copy_stream) and starts the request from a copy, which
  // continues bit for bit as the decoded context would. Errors: kInvalidArgument for a duplicate
  // id, a chunk size below 1, partial context frames, or context codes the decoder refuses.
  void add_request(const std::string& request_id, std::optional<int> first_chunk_frames = std::nullopt,
                   std::span<const int32_t> context = {});
  // Appends frames (frame-major codes, whole frames); `last` ends the request's input. Errors:
  // kNotFound for an unknown request, kInvalidArgument for partial frames or input after the end.
  void add_frames(const std::string& request_id, std::span<const int32_t> codes, bool last);
  // Drops a request and its stream; unknown ids are ignored.
  void abort(const std::string& request_id);

  size_t num_requests() const { return requests_.size(); }
  // Requests that started from a kept context's stream instead of decoding their context.
  uint64_t reused_contexts() const { return reused_contexts_; }
  // Whether step() would produce an output: some request has a chunk's worth of frames, or its
  // input ended.
  bool has_ready_work() const;
  // One decoder call: the next chunk of each request the schedule picks among the ready ones
  // (above); outputs in decode order. Empty when nothing is ready. A batch the decoder refuses
  // (undecodable codes) is decoded request by request, so that only the requests at fault end with
  // an error.
  std::vector<AudioOutput> step();

  const AudioChunking& chunking() const { return chunking_; }

 private:
  struct Request {
    std::unique_ptr<model::AudioDecoderStream> stream;
    std::vector<int32_t> pending;  // codes received and not yet decoded
    int first_chunk_frames = 1;
    int64_t base_frames = 0;  // frames the stream held when the request started: its left context
    bool input_ended = false;
    uint64_t arrival = 0;  // add_request order
    // When the stream's first audio left the engine: it plays from then on, in real time.
    AudioClock::time_point playback_start{};
    // Calls of first chunks that went ahead of this request's ready later chunk since the last call
    // of later chunks.
    int overtaken = 0;
  };

  // A stream that has decoded `context` (a copy of a kept one, or decoded now and kept).
  std::unique_ptr<model::AudioDecoderStream> stream_after(std::span<const int32_t> context);
  int64_t frames_needed(const Request& r) const;
  bool ready(const Request& r) const;
  // One decode call for `batch` (ready requests); appends their outputs and drops finished ones.
  void decode(const std::vector<std::map<std::string, Request>::iterator>& batch, std::vector<AudioOutput>& outputs);

  const model::StreamingAudioDecoder& decoder_;
  AudioChunking chunking_;
  TimeSource now_;
  ChunkScheduleLimits limits_;
  ChunkCallEstimates estimates_;
  AudioClock::duration frame_duration_;  // the audio of one frame
  uint64_t next_arrival_ = 0;
  std::map<std::string, Request> requests_;
  struct ContextState {
    std::vector<int32_t> context;
    std::unique_ptr<model::AudioDecoderStream> stream;  // never decoded into: requests get copies
  };
  std::list<ContextState> context_states_;  // most recently used first
  uint64_t reused_contexts_ = 0;
};

}  // namespace omni::engine
