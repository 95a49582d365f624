#include "media/audio_decoder.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/error.h>
#include <libavutil/mem.h>
}

#include <cstring>
#include <memory>
#include <stdexcept>

namespace omni::testing {

namespace {

struct MemoryReader {
  const std::string* bytes;
  size_t position = 0;
};

int read_packet(void* opaque, uint8_t* buffer, int size) {
  auto* reader = static_cast<MemoryReader*>(opaque);
  size_t left = reader->bytes->size() - reader->position;
  if (left == 0) return AVERROR_EOF;
  size_t count = std::min(left, static_cast<size_t>(size));
  std::memcpy(buffer, reader->bytes->data() + reader->position, count);
  reader->position += count;
  return static_cast<int>(count);
}

int64_t seek(void* opaque, int64_t offset, int whence) {
  auto* reader = static_cast<MemoryReader*>(opaque);
  int64_t size = static_cast<int64_t>(reader->bytes->size());
  if (whence == AVSEEK_SIZE) return size;
  int64_t base = (whence & ~AVSEEK_FORCE) == SEEK_CUR   ? static_cast<int64_t>(reader->position)
                 : (whence & ~AVSEEK_FORCE) == SEEK_END ? size
                                                        : 0;
  int64_t target = base + offset;
  if (target < 0 || target > size) return AVERROR(EINVAL);
  reader->position = static_cast<size_t>(target);
  return target;
}

[[noreturn]] void fail(const std::string& what, int code) {
  char text[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(code, text, sizeof text);
  throw std::runtime_error(what + ": " + text);
}

void append_first_channel(const AVFrame* frame, std::vector<float>& out) {
  const size_t n = static_cast<size_t>(frame->nb_samples);
  const size_t channels = static_cast<size_t>(frame->ch_layout.nb_channels);
  switch (static_cast<AVSampleFormat>(frame->format)) {
    case AV_SAMPLE_FMT_FLTP:
      for (size_t i = 0; i < n; ++i) out.push_back(reinterpret_cast<const float*>(frame->data[0])[i]);
      return;
    case AV_SAMPLE_FMT_FLT:
      for (size_t i = 0; i < n; ++i) out.push_back(reinterpret_cast<const float*>(frame->data[0])[i * channels]);
      return;
    case AV_SAMPLE_FMT_S16P:
      for (size_t i = 0; i < n; ++i)
        out.push_back(static_cast<float>(reinterpret_cast<const int16_t*>(frame->data[0])[i]) / 32768.0f);
      return;
    case AV_SAMPLE_FMT_S16:
      for (size_t i = 0; i < n; ++i) {
        out.push_back(static_cast<float>(reinterpret_cast<const int16_t*>(frame->data[0])[i * channels]) / 32768.0f);
      }
      return;
    case AV_SAMPLE_FMT_S32P:
      for (size_t i = 0; i < n; ++i) {
        out.push_back(static_cast<float>(reinterpret_cast<const int32_t*>(frame->data[0])[i] / 2147483648.0));
      }
      return;
    case AV_SAMPLE_FMT_S32:
      for (size_t i = 0; i < n; ++i) {
        out.push_back(
            static_cast<float>(reinterpret_cast<const int32_t*>(frame->data[0])[i * channels] / 2147483648.0));
      }
      return;
    default:
      throw std::runtime_error(std::string("decode_audio: unexpected sample format ") +
                               av_get_sample_fmt_name(static_cast<AVSampleFormat>(frame->format)));
  }
}

}  // namespace

DecodedAudio decode_audio(const std::string& bytes) {
  MemoryReader reader{&bytes};
  constexpr int kBufferSize = 4096;
  auto* buffer = static_cast<unsigned char*>(av_malloc(kBufferSize));
  AVIOContext* io = avio_alloc_context(buffer, kBufferSize, 0, &reader, &read_packet, nullptr, &seek);
  AVFormatContext* format = avformat_alloc_context();
  format->pb = io;
  auto cleanup = std::shared_ptr<void>(nullptr, [&](void*) {
    avformat_close_input(&format);
    if (io) av_freep(&io->buffer);
    avio_context_free(&io);
  });
  if (int status = avformat_open_input(&format, nullptr, nullptr, nullptr); status < 0) fail("open", status);
  if (int status = avformat_find_stream_info(format, nullptr); status < 0) fail("stream info", status);
  int stream = av_find_best_stream(format, AVMEDIA_TYPE_AUDIO, -1, -1, nullptr, 0);
  if (stream < 0) fail("no audio stream", stream);
  const AVCodecParameters* parameters = format->streams[stream]->codecpar;
  const AVCodec* codec = avcodec_find_decoder(parameters->codec_id);
  if (!codec) throw std::runtime_error("decode_audio: no decoder");
  AVCodecContext* context = avcodec_alloc_context3(codec);
  auto free_context = std::shared_ptr<void>(nullptr, [&](void*) { avcodec_free_context(&context); });
  avcodec_parameters_to_context(context, parameters);
  if (int status = avcodec_open2(context, codec, nullptr); status < 0) fail("open decoder", status);

  DecodedAudio out;
  out.container = format->iformat->name;
  out.codec = codec->name;
  AVPacket* packet = av_packet_alloc();
  AVFrame* frame = av_frame_alloc();
  auto free_frames = std::shared_ptr<void>(nullptr, [&](void*) {
    av_packet_free(&packet);
    av_frame_free(&frame);
  });
  auto drain = [&] {
    while (true) {
      int status = avcodec_receive_frame(context, frame);
      if (status == AVERROR(EAGAIN) || status == AVERROR_EOF) return;
      if (status < 0) fail("decode", status);
      out.sample_rate = frame->sample_rate;
      out.channels = frame->ch_layout.nb_channels;
      append_first_channel(frame, out.samples);
      av_frame_unref(frame);
    }
  };
  while (av_read_frame(format, packet) >= 0) {
    if (packet->stream_index == stream) {
      if (int status = avcodec_send_packet(context, packet); status < 0) fail("send packet", status);
      drain();
    }
    av_packet_unref(packet);
  }
  avcodec_send_packet(context, nullptr);
  drain();
  if (out.sample_rate == 0) {
    out.sample_rate = parameters->sample_rate;
    out.channels = parameters->ch_layout.nb_channels;
  }
  return out;
}

}  // namespace omni::testing
