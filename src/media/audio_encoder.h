// Streaming audio encoders: mono float32 samples in, the bytes of an audio file out, as soon as
// they are final. One implementation per format (wav_encoder.h, pcm_encoder.h, flac_encoder.h,
// mp3_encoder.h, opus_encoder.h, aac_encoder.h); make_audio_encoder() picks one by format.
//
// Two modes. Streaming: encode() returns every byte that will not change, so a server can send
// audio while it is still being generated; container fields that need the total length say
// "unknown" (WAV sizes 0xFFFFFFFF, FLAC STREAMINFO total samples 0 and no MD5). File: the output
// may be held until finish(), which returns the whole file with exact lengths. The bytes never
// depend on how the samples were split across encode() calls, and apart from those length fields
// a stream and a file of the same samples are identical (WAV, FLAC) or equal byte for byte (PCM,
// MP3, Opus, AAC).
//
// Threads: an encoder is used by one thread at a time. Errors: omni::Error, kInvalidArgument
// for options a format cannot take (naming the format and the value), kInternal when the codec
// library fails.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace omni::media {

enum class AudioFormat { kWav, kPcm, kFlac, kMp3, kOpus, kAac };

// "wav", "pcm", "flac", "mp3", "opus", "aac" (OpenAI's response_format values).
std::string_view audio_format_name(AudioFormat format);
// Every format, in the order above.
const std::vector<AudioFormat>& audio_formats();
// Throws omni::Error(kInvalidArgument) naming the value and the allowed ones.
AudioFormat audio_format_from_name(std::string_view name);
// The HTTP Content-Type of a response in this format ("audio/wav", "audio/pcm"…).
std::string_view audio_content_type(AudioFormat format);

struct AudioEncoderOptions {
  int sample_rate = 24000;  // of the input; every format but Opus keeps it in the output
  bool streaming = false;
};

class AudioEncoder {
 public:
  virtual ~AudioEncoder() = default;

  // Adds mono samples (nominally in [-1, 1]; values outside are clipped, NaN reads as 0) and
  // returns the output bytes that became final, possibly none.
  virtual std::string encode(std::span<const float> samples) = 0;
  // Flushes the codec and returns the rest of the output. Call once; encode() and finish() after
  // it throw omni::Error(kInternal).
  virtual std::string finish() = 0;
};

std::unique_ptr<AudioEncoder> make_audio_encoder(AudioFormat format, const AudioEncoderOptions& options);

}  // namespace omni::media
