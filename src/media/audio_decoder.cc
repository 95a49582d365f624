#include "media/audio_decoder.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/error.h>
#include <libavutil/mem.h>
}
#include <soxr.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <type_traits>

#include "base/error.h"

namespace omni::media {

namespace {

struct MemoryReader {
  std::string_view bytes;
  size_t position = 0;
};

int read_packet(void* opaque, uint8_t* buffer, int size) {
  auto* reader = static_cast<MemoryReader*>(opaque);
  size_t left = reader->bytes.size() - reader->position;
  if (left == 0) return AVERROR_EOF;
  size_t count = std::min(left, static_cast<size_t>(size));
  std::memcpy(buffer, reader->bytes.data() + reader->position, count);
  reader->position += count;
  return static_cast<int>(count);
}

int64_t seek(void* opaque, int64_t offset, int whence) {
  auto* reader = static_cast<MemoryReader*>(opaque);
  int64_t size = static_cast<int64_t>(reader->bytes.size());
  if (whence == AVSEEK_SIZE) return size;
  int64_t base = (whence & ~AVSEEK_FORCE) == SEEK_CUR   ? static_cast<int64_t>(reader->position)
                 : (whence & ~AVSEEK_FORCE) == SEEK_END ? size
                                                        : 0;
  int64_t target = base + offset;
  if (target < 0 || target > size) return AVERROR(EINVAL);
  reader->position = static_cast<size_t>(target);
  return target;
}

std::string av_message(int code) {
  char text[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(code, text, sizeof text);
  return text;
}

// Demuxers open what a file refers to (HLS and concat playlists, QuickTime references, DASH
// manifests) through AVFormatContext::io_open; a client's file may name local files or URLs, so
// every such open is refused.
int refuse_nested_open(AVFormatContext*, AVIOContext**, const char*, int, AVDictionary**) { return AVERROR(EPERM); }

[[noreturn]] void unreadable(int code) {
  throw_error(ErrorCode::kInvalidArgument, "not an audio file FFmpeg can read: {}", av_message(code));
}

// One sample of channel `c` at index `i` of a frame, as float.
template <typename T>
float sample_at(const AVFrame* frame, bool planar, int channels, size_t i, int c) {
  const T value = planar ? reinterpret_cast<const T*>(frame->extended_data[c])[i]
                         : reinterpret_cast<const T*>(frame->extended_data[0])[i * channels + c];
  if constexpr (std::is_same_v<T, float>) return value;
  if constexpr (std::is_same_v<T, double>) return static_cast<float>(value);
  if constexpr (std::is_same_v<T, int16_t>) return static_cast<float>(value) / 32768.0f;
  if constexpr (std::is_same_v<T, int32_t>) return static_cast<float>(value / 2147483648.0);
  if constexpr (std::is_same_v<T, uint8_t>) return (static_cast<float>(value) - 128.0f) / 128.0f;
}

template <typename T>
void append_mean(const AVFrame* frame, bool planar, std::vector<float>& out) {
  const size_t n = static_cast<size_t>(frame->nb_samples);
  const int channels = frame->ch_layout.nb_channels;
  for (size_t i = 0; i < n; ++i) {
    float sum = 0.0f;
    for (int c = 0; c < channels; ++c) sum += sample_at<T>(frame, planar, channels, i, c);
    out.push_back(channels == 1 ? sum : sum / static_cast<float>(channels));
  }
}

void append_mono(const AVFrame* frame, std::vector<float>& out) {
  const auto format = static_cast<AVSampleFormat>(frame->format);
  const bool planar = av_sample_fmt_is_planar(format) != 0;
  switch (av_get_packed_sample_fmt(format)) {
    case AV_SAMPLE_FMT_FLT:
      return append_mean<float>(frame, planar, out);
    case AV_SAMPLE_FMT_DBL:
      return append_mean<double>(frame, planar, out);
    case AV_SAMPLE_FMT_S16:
      return append_mean<int16_t>(frame, planar, out);
    case AV_SAMPLE_FMT_S32:
      return append_mean<int32_t>(frame, planar, out);
    case AV_SAMPLE_FMT_U8:
      return append_mean<uint8_t>(frame, planar, out);
    default:
      throw_error(ErrorCode::kInvalidArgument, "audio in sample format {} cannot be read",
                  av_get_sample_fmt_name(format) ? av_get_sample_fmt_name(format) : "unknown");
  }
}

}  // namespace

DecodedAudio decode_audio(std::string_view bytes, const AudioDecodeLimits& limits) {
  // FFmpeg sizes some buffers from what a file's header claims, up to 2 GiB an allocation by
  // default; a client's file gets at most 256 MiB an allocation (a refused one drops what it was
  // for, or is a decode error). A WAV file's LIST chunk can make the RIFF INFO reader zero-allocate
  // a 1.7 GiB tag (tests/fuzz/regressions/audio_decoder/wav-riff-info-1.7gib-tag).
  static std::once_flag bounded;
  std::call_once(bounded, [] { av_max_alloc(size_t{256} << 20); });
  if (bytes.empty()) throw_error(ErrorCode::kInvalidArgument, "the audio is empty (0 bytes)");
  if (bytes.size() > limits.max_bytes) {
    throw_error(ErrorCode::kInvalidArgument, "the audio is {} bytes; the limit is {} bytes", bytes.size(),
                limits.max_bytes);
  }
  MemoryReader reader{bytes};
  constexpr int kBufferSize = 4096;
  auto* buffer = static_cast<unsigned char*>(av_malloc(kBufferSize));
  AVIOContext* io = avio_alloc_context(buffer, kBufferSize, 0, &reader, &read_packet, nullptr, &seek);
  AVFormatContext* format = avformat_alloc_context();
  AVCodecContext* context = nullptr;
  AVPacket* packet = av_packet_alloc();
  AVFrame* frame = av_frame_alloc();
  format->pb = io;
  format->flags |= AVFMT_FLAG_CUSTOM_IO;
  format->io_open = &refuse_nested_open;
  auto cleanup = std::shared_ptr<void>(nullptr, [&](void*) {
    av_packet_free(&packet);
    av_frame_free(&frame);
    avcodec_free_context(&context);
    avformat_close_input(&format);
    if (io) av_freep(&io->buffer);
    avio_context_free(&io);
  });
  if (int status = avformat_open_input(&format, nullptr, nullptr, nullptr); status < 0) unreadable(status);
  if (int status = avformat_find_stream_info(format, nullptr); status < 0) unreadable(status);
  int stream = av_find_best_stream(format, AVMEDIA_TYPE_AUDIO, -1, -1, nullptr, 0);
  if (stream < 0)
    throw_error(ErrorCode::kInvalidArgument, "the file ({}) holds no audio stream", format->iformat->name);
  const AVCodecParameters* parameters = format->streams[stream]->codecpar;
  const AVCodec* codec = avcodec_find_decoder(parameters->codec_id);
  if (!codec) {
    throw_error(ErrorCode::kInvalidArgument, "no decoder for the audio codec {}",
                avcodec_get_name(parameters->codec_id));
  }
  context = avcodec_alloc_context3(codec);
  if (!context) throw_error(ErrorCode::kInternal, "cannot allocate an FFmpeg decoder");
  if (int status = avcodec_parameters_to_context(context, parameters); status < 0) unreadable(status);
  if (int status = avcodec_open2(context, codec, nullptr); status < 0) unreadable(status);

  DecodedAudio out;
  out.container = format->iformat->name;
  out.codec = codec->name;
  auto check_rate = [&](int rate) {
    if (rate > limits.max_sample_rate) {
      throw_error(ErrorCode::kInvalidArgument, "the audio's sample rate of {} Hz is above the limit of {} Hz", rate,
                  limits.max_sample_rate);
    }
  };
  check_rate(parameters->sample_rate);
  out.sample_rate = parameters->sample_rate;
  out.channels = parameters->ch_layout.nb_channels;
  auto check_length = [&] {
    if (out.sample_rate > 0 && static_cast<double>(out.samples.size()) > limits.max_seconds * out.sample_rate) {
      throw_error(ErrorCode::kInvalidArgument, "the audio is longer than the limit of {} s", limits.max_seconds);
    }
  };
  auto drain = [&] {
    while (true) {
      int status = avcodec_receive_frame(context, frame);
      if (status == AVERROR(EAGAIN) || status == AVERROR_EOF) return;
      if (status < 0) unreadable(status);
      if (frame->sample_rate <= 0 || frame->ch_layout.nb_channels <= 0) {
        throw_error(ErrorCode::kInvalidArgument, "the audio has no sample rate or channel count");
      }
      check_rate(frame->sample_rate);
      if (!out.samples.empty() && frame->sample_rate != out.sample_rate) {
        throw_error(ErrorCode::kInvalidArgument, "the audio changes its sample rate mid-stream ({} Hz to {} Hz)",
                    out.sample_rate, frame->sample_rate);
      }
      out.sample_rate = frame->sample_rate;
      out.channels = frame->ch_layout.nb_channels;
      append_mono(frame, out.samples);
      av_frame_unref(frame);
      check_length();
    }
  };
  while (true) {
    int status = av_read_frame(format, packet);
    if (status == AVERROR_EOF) break;
    if (status < 0) unreadable(status);
    if (packet->stream_index == stream) {
      status = avcodec_send_packet(context, packet);
      if (status < 0 && status != AVERROR_INVALIDDATA) unreadable(status);
      drain();
    }
    av_packet_unref(packet);
  }
  avcodec_send_packet(context, nullptr);
  drain();
  return out;
}

std::vector<float> resample_audio(std::span<const float> samples, int from_rate, int to_rate) {
  if (from_rate <= 0 || to_rate <= 0) {
    throw_error(ErrorCode::kInvalidArgument, "cannot resample from {} Hz to {} Hz", from_rate, to_rate);
  }
  if (from_rate == to_rate || samples.empty()) return {samples.begin(), samples.end()};
  const auto length = static_cast<size_t>(
      std::ceil(static_cast<double>(samples.size()) * static_cast<double>(to_rate) / static_cast<double>(from_rate)));
  std::vector<float> out(length);
  const soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
  const soxr_quality_spec_t quality = soxr_quality_spec(SOXR_HQ, 0);
  size_t done = 0;
  soxr_error_t error = soxr_oneshot(from_rate, to_rate, 1, samples.data(), samples.size(), nullptr, out.data(),
                                    out.size(), &done, &io, &quality, nullptr);
  if (error) throw_error(ErrorCode::kInternal, "soxr resampling {} Hz to {} Hz failed: {}", from_rate, to_rate, error);
  // soxr may yield a sample or two fewer; librosa pads to ceil(n * to / from) with zeros.
  std::fill(out.begin() + static_cast<std::ptrdiff_t>(std::min(done, length)), out.end(), 0.0f);
  return out;
}

std::vector<float> decode_audio_at(std::string_view bytes, int sample_rate, const AudioDecodeLimits& limits) {
  DecodedAudio audio = decode_audio(bytes, limits);
  return resample_audio(audio.samples, audio.sample_rate, sample_rate);
}

}  // namespace omni::media
