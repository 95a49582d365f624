// The model <-> engine contract for non-autoregressive decoders that turn frames of codes into
// audio (code2wav stages): a stream of frames is decoded piece by piece, each stream carrying
// its own state, so that decoding in chunks gives the audio of decoding all frames at once.
//
// Ownership and threads: a decoder is immutable after loading (its weights) and may serve many
// streams; a stream belongs to one caller and is used by one thread at a time. Streams do not
// refer to each other, so one thread may interleave chunks of many streams.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace omni::model {

// A stream's state (what earlier frames left behind for the next ones); opaque to the engine.
class AudioDecoderStream {
 public:
  virtual ~AudioDecoderStream() = default;
  // Frames decoded so far.
  virtual int64_t frames() const = 0;
};

// One stream's part of a batched decode: the next frames of `stream` and where its samples go.
struct AudioDecodeItem {
  AudioDecoderStream* stream = nullptr;
  std::span<const int32_t> codes;
  std::vector<float>* audio = nullptr;
};

class StreamingAudioDecoder {
 public:
  virtual ~StreamingAudioDecoder() = default;

  virtual int codes_per_frame() const = 0;
  virtual int samples_per_frame() const = 0;
  virtual int sample_rate() const = 0;

  virtual std::unique_ptr<AudioDecoderStream> open_stream() const = 0;
  // A stream that continues exactly as `stream` would (its state copied, nothing shared), or
  // nullptr when the decoder cannot copy its streams (this default).
  virtual std::unique_ptr<AudioDecoderStream> copy_stream(const AudioDecoderStream& /*stream*/) const {
    return nullptr;
  }
  // Decodes the next frames of `stream`: `codes` holds whole frames, frame-major
  // (codes_per_frame() each); appends samples_per_frame() mono samples per frame to `audio`.
  // Throws omni::Error(kInvalidArgument) for codes it cannot decode (naming the frame and the
  // codebook); the stream is then unchanged.
  virtual void decode(AudioDecoderStream& stream, std::span<const int32_t> codes, std::vector<float>& audio) const = 0;
  // What decode() does for each item, for several distinct streams at once, so that a decoder
  // that can batch them shares its work (kernel launches) between the streams; each stream's
  // samples are those it would get alone (bit for bit, or within float rounding on a GPU). A
  // decoder that batches checks the codes of every item before any stream moves, so that on
  // kInvalidArgument (naming the item, its frame and codebook) no stream has changed; this default
  // decodes the items one by one and gives no such promise. At most max_batch() items per call.
  virtual void decode_batch(std::span<const AudioDecodeItem> items) const {
    for (const AudioDecodeItem& item : items) decode(*item.stream, item.codes, *item.audio);
  }
  // 1: the decoder does not batch (the engine then calls decode() per stream).
  virtual int max_batch() const { return 1; }
};

}  // namespace omni::model
