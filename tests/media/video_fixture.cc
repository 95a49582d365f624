#include "media/video_fixture.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
}

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <stdexcept>

namespace omni::testing {

std::string flat_video(int frames, int fps, int width, int height) {
  return flat_video_with_tone(frames, fps, width, height, 0.0, 0);
}

std::string flat_video_with_tone(int frames, int fps, int width, int height, double seconds, int sample_rate) {
  AVFormatContext* out = nullptr;
  if (avformat_alloc_output_context2(&out, nullptr, "matroska", nullptr) < 0) throw std::runtime_error("no muxer");
  const AVCodec* codec = avcodec_find_encoder(AV_CODEC_ID_MPEG4);
  if (codec == nullptr) throw std::runtime_error("no MPEG-4 encoder");
  AVStream* stream = avformat_new_stream(out, nullptr);
  AVCodecContext* enc = avcodec_alloc_context3(codec);
  enc->width = width;
  enc->height = height;
  enc->pix_fmt = AV_PIX_FMT_YUV420P;
  enc->time_base = AVRational{1, fps};
  enc->framerate = AVRational{fps, 1};
  enc->gop_size = 5;
  enc->bit_rate = 2'000'000;
  if (out->oformat->flags & AVFMT_GLOBALHEADER) enc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  if (avcodec_open2(enc, codec, nullptr) < 0) throw std::runtime_error("cannot open the encoder");
  avcodec_parameters_from_context(stream->codecpar, enc);
  stream->time_base = enc->time_base;
  stream->avg_frame_rate = enc->framerate;
  // The audio track, when asked for: 16-bit PCM, which takes frames of any size.
  AVStream* audio_stream = nullptr;
  AVCodecContext* audio_enc = nullptr;
  if (seconds > 0.0) {
    const AVCodec* pcm = avcodec_find_encoder(AV_CODEC_ID_PCM_S16LE);
    if (pcm == nullptr) throw std::runtime_error("no PCM encoder");
    audio_stream = avformat_new_stream(out, nullptr);
    audio_enc = avcodec_alloc_context3(pcm);
    audio_enc->sample_fmt = AV_SAMPLE_FMT_S16;
    audio_enc->sample_rate = sample_rate;
    av_channel_layout_default(&audio_enc->ch_layout, 1);
    audio_enc->time_base = AVRational{1, sample_rate};
    if (avcodec_open2(audio_enc, pcm, nullptr) < 0) throw std::runtime_error("cannot open the PCM encoder");
    avcodec_parameters_from_context(audio_stream->codecpar, audio_enc);
    audio_stream->time_base = audio_enc->time_base;
  }
  if (avio_open_dyn_buf(&out->pb) < 0 || avformat_write_header(out, nullptr) < 0) throw std::runtime_error("header");
  AVFrame* frame = av_frame_alloc();
  frame->format = enc->pix_fmt;
  frame->width = width;
  frame->height = height;
  av_frame_get_buffer(frame, 0);
  AVPacket* packet = av_packet_alloc();
  const auto drain = [&] {
    while (avcodec_receive_packet(enc, packet) == 0) {
      av_packet_rescale_ts(packet, enc->time_base, stream->time_base);
      packet->stream_index = stream->index;
      av_interleaved_write_frame(out, packet);
    }
  };
  for (int i = 0; i < frames; ++i) {
    av_frame_make_writable(frame);
    for (int y = 0; y < height; ++y) std::fill_n(frame->data[0] + y * frame->linesize[0], width, 20 + 7 * i);
    for (int p = 1; p < 3; ++p) {
      for (int y = 0; y < height / 2; ++y) std::fill_n(frame->data[p] + y * frame->linesize[p], width / 2, 128);
    }
    frame->pts = i;
    avcodec_send_frame(enc, frame);
    drain();
  }
  avcodec_send_frame(enc, nullptr);
  drain();
  if (audio_enc != nullptr) {
    const auto total = static_cast<int64_t>(std::lround(seconds * sample_rate));
    AVFrame* chunk = av_frame_alloc();
    const auto drain_audio = [&] {
      while (avcodec_receive_packet(audio_enc, packet) == 0) {
        av_packet_rescale_ts(packet, audio_enc->time_base, audio_stream->time_base);
        packet->stream_index = audio_stream->index;
        av_interleaved_write_frame(out, packet);
      }
    };
    for (int64_t at = 0; at < total; at += 1024) {
      chunk->format = AV_SAMPLE_FMT_S16;
      chunk->sample_rate = sample_rate;
      av_channel_layout_default(&chunk->ch_layout, 1);
      chunk->nb_samples = static_cast<int>(std::min<int64_t>(1024, total - at));
      if (av_frame_get_buffer(chunk, 0) < 0) throw std::runtime_error("audio frame");
      auto* samples = reinterpret_cast<int16_t*>(chunk->data[0]);
      for (int i = 0; i < chunk->nb_samples; ++i) {
        samples[i] = static_cast<int16_t>(
            std::lround(9000.0 * std::sin(2 * std::numbers::pi * 440.0 * static_cast<double>(at + i) / sample_rate)));
      }
      chunk->pts = at;
      avcodec_send_frame(audio_enc, chunk);
      drain_audio();
      av_frame_unref(chunk);
    }
    avcodec_send_frame(audio_enc, nullptr);
    drain_audio();
    av_frame_free(&chunk);
  }
  av_write_trailer(out);
  uint8_t* bytes = nullptr;
  const int size = avio_close_dyn_buf(out->pb, &bytes);
  std::string result(reinterpret_cast<const char*>(bytes), static_cast<size_t>(size));
  av_free(bytes);
  av_packet_free(&packet);
  av_frame_free(&frame);
  avcodec_free_context(&enc);
  avcodec_free_context(&audio_enc);
  avformat_free_context(out);
  return result;
}

}  // namespace omni::testing
