// Which ready chunks a streaming audio decoder stage decodes in its next decoder call (GenerationEngine::step).
// Streaming audio has two kinds of chunk with different clocks:
//   - a stream's first chunk (AudioChunking::first_chunk_frames): its client has no audio yet, so
//     every moment it waits is time to first packet; first chunks are short (one frame by default)
//     and many of them cost little more together than one alone (a decoder call is launch-bound);
//   - a later chunk: its client is playing the audio sent so far, so the chunk is due when that
//     audio runs out (its deadline = when the stream's first audio left + the audio's duration).
// The policy, per call:
//   1. A later chunk that is "at risk" — it can still meet its deadline if decoded now, but not if
//      a call of first chunks goes ahead of it — makes this a call of later chunks.
//   2. A later chunk that calls of first chunks have overtaken `kMaxOvertakes` times since the last
//      call of later chunks does too: while both kinds wait, calls of each kind alternate, so that
//      a steady stream of new requests cannot starve running ones (a later chunk waits at most one
//      call of first chunks per call of later chunks ahead of it by deadline).
//   3. Otherwise ready first chunks go first, all together in arrival order: as many as fit in the
//      frames of one full call of later chunks (max_batch × chunk_frames), so that a call of first
//      chunks is never more work than a call of later chunks, even past max_batch streams.
//   4. Otherwise later chunks, earliest deadline first, at most max_batch streams.
//   In a call of later chunks (1, 2 and 4), streams left over up to max_batch take ready first
//   chunks along, in arrival order (a first chunk is short; it need not wait for the next call).
// Batch sizes: with `batch_sizes` (decode_cudagraph_batch_sizes: the captured buckets), a call
// takes the largest bucket that the ready chunks fill, as vLLM-Omni's stateful graph path groups
// requests; fewer ready chunks than the smallest bucket go together as they are. Without buckets a
// call takes every chunk the limits above allow.
//
// A pure function of its inputs: no clock, no state (GenerationEngine keeps the state).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace omni::engine {

using AudioClock = std::chrono::steady_clock;

// Calls of first chunks that may go ahead of a ready later chunk before a call of later chunks.
inline constexpr int kMaxOvertakes = 1;

struct ChunkCandidate {
  bool first = false;    // the stream's first chunk (no audio of it has left yet)
  int64_t frames = 0;    // frames this chunk decodes
  uint64_t arrival = 0;  // the order the requests came in (smaller = earlier)
  // Later chunks: when the audio already sent for the stream runs out.
  AudioClock::time_point deadline{};
  int overtaken = 0;  // calls of first chunks that went ahead of it since the last call of later chunks
};

struct ChunkScheduleLimits {
  int max_batch = 4;             // decode_batch_max_size
  int decoder_max_batch = 1;     // the decoder's own limit (StreamingAudioDecoder::max_batch())
  int chunk_frames = 25;         // AudioChunking::chunk_frames: sizes the frame budget of a call of first chunks
  std::vector<int> batch_sizes;  // decode_cudagraph_batch_sizes, ascending, each <= max_batch; may be empty
};

// The expected seconds of one decoder call of each kind (0 while none has been measured).
struct ChunkCallEstimates {
  double first_call_seconds = 0;
  double later_call_seconds = 0;
};

struct ChunkCall {
  bool first_chunks = false;   // a call of first chunks (3. above)
  std::vector<size_t> chosen;  // indices into the candidates, in decode order
};

// The next call for `candidates` (the ready chunks; empty gives an empty call) at time `now`.
ChunkCall schedule_chunk_call(const std::vector<ChunkCandidate>& candidates, AudioClock::time_point now,
                              const ChunkScheduleLimits& limits, const ChunkCallEstimates& estimates);

// The number of streams a call takes out of `ready`: the largest of `batch_sizes` not above it, or
// `ready` itself when it is empty or smaller than every bucket.
size_t bucket_batch_size(size_t ready, const std::vector<int>& batch_sizes);

}  // namespace omni::engine
