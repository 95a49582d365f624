// The audio of one streamed /v1/audio/speech response, measured as its bytes arrive: a WAV file
// (the body of stream_format "audio", or the base64 pieces of "sse" speech.audio.delta events put
// together) whose header gives the sample format, so the benchmark can tell when the first samples
// came and how many seconds of audio a response carried without decoding it. A streamed WAV's
// data chunk has no known length (0xFFFFFFFF), so everything after the data chunk header counts.
//
// Not thread-safe; one meter per response.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace omni::cli::bench {

class WavStreamMeter {
 public:
  // The next bytes of the file. Returns how many bytes of samples they held (0 while they are
  // still header). A header that is not PCM WAV sets error() and ignores what follows.
  size_t feed(std::string_view bytes);

  bool in_samples() const { return in_samples_; }
  int sample_rate() const { return sample_rate_; }
  // Seconds of audio received so far (whole sample frames).
  double seconds() const;
  int64_t sample_bytes() const { return sample_bytes_; }
  // Why the stream is not WAV audio, or empty.
  const std::string& error() const { return error_; }

 private:
  void parse_header();

  std::string header_;  // bytes before the samples, until the data chunk starts
  bool in_samples_ = false;
  int sample_rate_ = 0;
  int channels_ = 0;
  int bytes_per_sample_ = 0;
  int64_t sample_bytes_ = 0;
  std::string error_;
};

}  // namespace omni::cli::bench
