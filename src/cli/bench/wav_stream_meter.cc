#include "cli/bench/wav_stream_meter.h"

#include <fmt/format.h>

namespace omni::cli::bench {
namespace {

uint32_t read_u32(std::string_view bytes, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(bytes[at + i]);
  return v;
}

uint16_t read_u16(std::string_view bytes, size_t at) {
  return static_cast<uint16_t>(static_cast<unsigned char>(bytes[at]) |
                               (static_cast<unsigned char>(bytes[at + 1]) << 8));
}

constexpr size_t kRiffHeaderBytes = 12;  // "RIFF", size, "WAVE"
constexpr size_t kChunkHeaderBytes = 8;  // id, size

}  // namespace

size_t WavStreamMeter::feed(std::string_view bytes) {
  if (!error_.empty() || bytes.empty()) return 0;
  if (in_samples_) {
    sample_bytes_ += static_cast<int64_t>(bytes.size());
    return bytes.size();
  }
  header_.append(bytes);
  parse_header();
  if (!in_samples_ || !error_.empty()) return 0;
  // parse_header() left the bytes after the data chunk header in header_.
  const size_t samples = header_.size();
  sample_bytes_ += static_cast<int64_t>(samples);
  header_.clear();
  return samples;
}

void WavStreamMeter::parse_header() {
  if (header_.size() < kRiffHeaderBytes) return;
  std::string_view view(header_);
  if (view.substr(0, 4) != "RIFF" || view.substr(8, 4) != "WAVE") {
    error_ = "the response is not a WAV stream (no RIFF/WAVE header); the benchmark asks for response_format wav";
    return;
  }
  size_t at = kRiffHeaderBytes;
  while (view.size() >= at + kChunkHeaderBytes) {
    const std::string_view id = view.substr(at, 4);
    const uint32_t size = read_u32(view, at + 4);
    if (id == "data") {
      if (sample_rate_ <= 0 || channels_ <= 0 || bytes_per_sample_ <= 0) {
        error_ = "the WAV stream has its data chunk before a valid fmt chunk";
        return;
      }
      in_samples_ = true;
      header_.erase(0, at + kChunkHeaderBytes);
      return;
    }
    // In size_t: a size of 0xFFFFFFFF plus its pad byte wrapped to 0 in 32 bits (found by wav_stream).
    const size_t padded = static_cast<size_t>(size) + (size & 1);
    if (view.size() < at + kChunkHeaderBytes + padded) return;  // the chunk's body has not all arrived
    if (id == "fmt ") {
      if (size < 16 || read_u16(view, at + 8) != 1) {
        error_ = "the WAV stream is not 16-bit PCM (fmt chunk format tag is not 1)";
        return;
      }
      channels_ = read_u16(view, at + 10);
      sample_rate_ = static_cast<int>(read_u32(view, at + 12));
      bytes_per_sample_ = read_u16(view, at + 22) / 8;
      if (channels_ <= 0 || sample_rate_ <= 0 || bytes_per_sample_ <= 0) {
        error_ = fmt::format("the WAV fmt chunk is invalid: {} channels, {} Hz, {} bytes per sample", channels_,
                             sample_rate_, bytes_per_sample_);
        return;
      }
    }
    at += kChunkHeaderBytes + padded;
  }
}

double WavStreamMeter::seconds() const {
  if (!in_samples_) return 0;
  const int64_t frame_bytes = static_cast<int64_t>(channels_) * bytes_per_sample_;
  return static_cast<double>(sample_bytes_ / frame_bytes) / sample_rate_;
}

}  // namespace omni::cli::bench
