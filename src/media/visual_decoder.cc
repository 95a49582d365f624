#include "media/visual_decoder.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/error.h>
#include <libavutil/mem.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
}

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "base/error.h"

namespace omni::media {

namespace {

struct MemoryReader {
  std::string_view bytes;
  size_t position = 0;
};

int read_packet(void* opaque, uint8_t* buffer, int size) {
  auto* reader = static_cast<MemoryReader*>(opaque);
  const size_t left = reader->bytes.size() - reader->position;
  if (left == 0) return AVERROR_EOF;
  const size_t count = std::min(left, static_cast<size_t>(size));
  std::memcpy(buffer, reader->bytes.data() + reader->position, count);
  reader->position += count;
  return static_cast<int>(count);
}

int64_t seek(void* opaque, int64_t offset, int whence) {
  auto* reader = static_cast<MemoryReader*>(opaque);
  const auto size = static_cast<int64_t>(reader->bytes.size());
  if (whence == AVSEEK_SIZE) return size;
  const int64_t base = (whence & ~AVSEEK_FORCE) == SEEK_CUR   ? static_cast<int64_t>(reader->position)
                       : (whence & ~AVSEEK_FORCE) == SEEK_END ? size
                                                              : 0;
  const int64_t target = base + offset;
  if (target < 0 || target > size) return AVERROR(EINVAL);
  reader->position = static_cast<size_t>(target);
  return target;
}

std::string av_message(int code) {
  char text[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(code, text, sizeof text);
  return text;
}

// A demuxer and the decoder of its best stream of one kind, over bytes in memory.
class Input {
 public:
  Input(std::string_view bytes, const char* what, const VisualDecodeLimits& limits) : reader_{bytes}, what_(what) {
    if (bytes.empty()) throw_error(ErrorCode::kInvalidArgument, "the {} is empty (0 bytes)", what);
    if (bytes.size() > limits.max_bytes) {
      throw_error(ErrorCode::kInvalidArgument, "the {} is {} bytes; the limit is {} bytes", what, bytes.size(),
                  limits.max_bytes);
    }
    constexpr int kBufferSize = 4096;
    auto* buffer = static_cast<unsigned char*>(av_malloc(kBufferSize));
    io_ = avio_alloc_context(buffer, kBufferSize, 0, &reader_, &read_packet, nullptr, &seek);
    format_ = avformat_alloc_context();
    format_->pb = io_;
    format_->flags |= AVFMT_FLAG_CUSTOM_IO;
    packet_ = av_packet_alloc();
    frame_ = av_frame_alloc();
    if (int status = avformat_open_input(&format_, nullptr, nullptr, nullptr); status < 0) unreadable(status);
    if (int status = avformat_find_stream_info(format_, nullptr); status < 0) unreadable(status);
    stream_ = av_find_best_stream(format_, AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
    if (stream_ < 0) {
      throw_error(ErrorCode::kInvalidArgument, "the file ({}) holds no {} stream", format_->iformat->name,
                  std::string_view(what) == "video" ? "video" : "picture");
    }
    const AVCodecParameters* parameters = format_->streams[stream_]->codecpar;
    const AVCodec* codec = avcodec_find_decoder(parameters->codec_id);
    if (!codec) {
      throw_error(ErrorCode::kInvalidArgument, "no decoder for the {} codec {}", what,
                  avcodec_get_name(parameters->codec_id));
    }
    context_ = avcodec_alloc_context3(codec);
    if (!context_) throw_error(ErrorCode::kInternal, "cannot allocate an FFmpeg decoder");
    if (int status = avcodec_parameters_to_context(context_, parameters); status < 0) unreadable(status);
    if (int status = avcodec_open2(context_, codec, nullptr); status < 0) unreadable(status);
    if (static_cast<int64_t>(parameters->width) * parameters->height > limits.max_pixels) {
      throw_error(ErrorCode::kInvalidArgument, "the {} is {} x {} pixels; the limit is {} pixels", what,
                  parameters->width, parameters->height, limits.max_pixels);
    }
  }
  ~Input() {
    sws_freeContext(scaler_);
    av_packet_free(&packet_);
    av_frame_free(&frame_);
    avcodec_free_context(&context_);
    avformat_close_input(&format_);
    if (io_) av_freep(&io_->buffer);
    avio_context_free(&io_);
  }
  Input(const Input&) = delete;
  Input& operator=(const Input&) = delete;

  [[noreturn]] void unreadable(int code) const {
    throw_error(ErrorCode::kInvalidArgument, "not {} {} FFmpeg can read: {}",
                what_ == std::string_view("image") ? "an" : "a", what_, av_message(code));
  }

  AVFormatContext* format() const { return format_; }
  AVStream* stream() const { return format_->streams[stream_]; }
  const char* codec_name() const { return context_->codec->name; }

  // The next decoded frame (false at the end of the stream).
  bool next_frame() {
    for (;;) {
      const int got = avcodec_receive_frame(context_, frame_);
      if (got == 0) return true;
      if (got == AVERROR_EOF) return false;
      if (got != AVERROR(EAGAIN)) unreadable(got);
      if (flushed_) return false;
      const int read = av_read_frame(format_, packet_);
      if (read == AVERROR_EOF) {
        avcodec_send_packet(context_, nullptr);
        flushed_ = true;
        continue;
      }
      if (read < 0) unreadable(read);
      if (packet_->stream_index == stream_) {
        const int sent = avcodec_send_packet(context_, packet_);
        if (sent < 0 && sent != AVERROR(EAGAIN)) {
          av_packet_unref(packet_);
          unreadable(sent);
        }
      }
      av_packet_unref(packet_);
    }
  }

  // The current frame as RGB, composed over white where it has alpha.
  std::vector<uint8_t> rgb(const VisualDecodeLimits& limits) {
    const int w = frame_->width, h = frame_->height;
    if (w <= 0 || h <= 0) throw_error(ErrorCode::kInvalidArgument, "the {} has a frame of no pixels", what_);
    if (static_cast<int64_t>(w) * h > limits.max_pixels) {
      throw_error(ErrorCode::kInvalidArgument, "the {} is {} x {} pixels; the limit is {} pixels", what_, w, h,
                  limits.max_pixels);
    }
    const auto source = static_cast<AVPixelFormat>(frame_->format);
    const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(source);
    const bool alpha = desc != nullptr && (desc->flags & AV_PIX_FMT_FLAG_ALPHA) != 0;
    const AVPixelFormat target = alpha ? AV_PIX_FMT_RGBA : AV_PIX_FMT_RGB24;
    scaler_ = sws_getCachedContext(scaler_, w, h, source, w, h, target,
                                   SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT, nullptr, nullptr, nullptr);
    if (!scaler_) {
      throw_error(ErrorCode::kInvalidArgument, "the {}'s pixel format {} cannot be converted to RGB", what_,
                  desc != nullptr ? desc->name : "unknown");
    }
    const int channels = alpha ? 4 : 3;
    std::vector<uint8_t> converted(static_cast<size_t>(w) * h * channels);
    uint8_t* planes[4] = {converted.data(), nullptr, nullptr, nullptr};
    int strides[4] = {w * channels, 0, 0, 0};
    sws_scale(scaler_, frame_->data, frame_->linesize, 0, h, planes, strides);
    if (!alpha) return converted;
    std::vector<uint8_t> out(static_cast<size_t>(w) * h * 3);
    for (size_t i = 0; i < static_cast<size_t>(w) * h; ++i) {
      const int a = converted[i * 4 + 3];
      for (int c = 0; c < 3; ++c)
        out[i * 3 + c] = static_cast<uint8_t>((converted[i * 4 + c] * a + 255 * (255 - a) + 127) / 255);
    }
    return out;
  }

  const AVFrame* frame() const { return frame_; }

 private:
  MemoryReader reader_;
  const char* what_;
  AVIOContext* io_ = nullptr;
  AVFormatContext* format_ = nullptr;
  AVCodecContext* context_ = nullptr;
  AVPacket* packet_ = nullptr;
  AVFrame* frame_ = nullptr;
  SwsContext* scaler_ = nullptr;
  int stream_ = -1;
  bool flushed_ = false;
};

}  // namespace

DecodedImage decode_image(std::string_view bytes, const VisualDecodeLimits& limits) {
  Input input(bytes, "image", limits);
  if (!input.next_frame()) throw_error(ErrorCode::kInvalidArgument, "the image holds no picture");
  DecodedImage out;
  out.codec = input.codec_name();
  out.rgb = input.rgb(limits);
  out.width = input.frame()->width;
  out.height = input.frame()->height;
  return out;
}

std::vector<int64_t> sample_video_frames(int64_t total, double video_fps, const VideoSampling& sampling) {
  const int64_t multiple = std::max(1, sampling.frame_multiple);
  if (total < 1 || !(video_fps > 0))
    throw_error(ErrorCode::kInvalidArgument, "the video has no frames (or no frame rate)");
  const int64_t most = std::min<int64_t>(sampling.max_frames, total) / multiple * multiple;
  double frames = static_cast<double>(total) / video_fps * sampling.fps;
  frames = std::min({std::max(frames, static_cast<double>(sampling.min_frames)), static_cast<double>(most),
                     static_cast<double>(total)});
  const int64_t n = static_cast<int64_t>(std::floor(frames / static_cast<double>(multiple))) * multiple;
  if (n < multiple || n < 1) {
    throw_error(ErrorCode::kInvalidArgument, "the video has {} frame{}; at least {} are needed", total,
                total == 1 ? "" : "s", multiple);
  }
  // torch.arange(0, total, total / n).int(), as the processors index.
  const double step = static_cast<double>(total) / static_cast<double>(n);
  const auto count = static_cast<int64_t>(std::ceil(static_cast<double>(total) / step));
  std::vector<int64_t> out;
  for (int64_t i = 0; i < count; ++i) out.push_back(static_cast<int64_t>(static_cast<double>(i) * step));
  return out;
}

DecodedVideo decode_video(std::string_view bytes, const VideoSampling& sampling, const VisualDecodeLimits& limits) {
  Input input(bytes, "video", limits);
  const AVStream* stream = input.stream();
  DecodedVideo out;
  out.container = input.format()->iformat->name;
  out.codec = input.codec_name();
  AVRational rate = stream->avg_frame_rate.num > 0 ? stream->avg_frame_rate : stream->r_frame_rate;
  out.source_fps = rate.num > 0 && rate.den > 0 ? av_q2d(rate) : 0.0;
  if (!(out.source_fps > 0)) throw_error(ErrorCode::kInvalidArgument, "the video has no frame rate");
  double seconds =
      stream->duration != AV_NOPTS_VALUE           ? static_cast<double>(stream->duration) * av_q2d(stream->time_base)
      : input.format()->duration != AV_NOPTS_VALUE ? static_cast<double>(input.format()->duration) / AV_TIME_BASE
                                                   : 0.0;
  if (seconds > limits.max_seconds) {
    throw_error(ErrorCode::kInvalidArgument, "the video is {:.1f} s long; the limit is {:.0f} s", seconds,
                limits.max_seconds);
  }
  int64_t total =
      stream->nb_frames > 0 ? stream->nb_frames : static_cast<int64_t>(std::llround(seconds * out.source_fps));
  std::unique_ptr<Input> recount;
  Input* frames = &input;
  if (total < 1) {
    // Neither a count nor a duration: count the frames (bounded by the time limit), then decode again.
    total = 0;
    while (input.next_frame()) {
      if (static_cast<double>(++total) / out.source_fps > limits.max_seconds) {
        throw_error(ErrorCode::kInvalidArgument, "the video is longer than the limit of {:.0f} s", limits.max_seconds);
      }
    }
    recount = std::make_unique<Input>(bytes, "video", limits);
    frames = recount.get();
  }
  const std::vector<int64_t> keep = sample_video_frames(total, out.source_fps, sampling);
  const AVCodecParameters* parameters = stream->codecpar;
  const size_t kept_bytes = keep.size() * static_cast<size_t>(parameters->width) * parameters->height * 3;
  if (kept_bytes > limits.max_video_rgb_bytes) {
    throw_error(ErrorCode::kInvalidArgument,
                "the video's {} sampled frames of {} x {} pixels take {} MiB decoded; the limit is {} MiB", keep.size(),
                parameters->width, parameters->height, kept_bytes >> 20, limits.max_video_rgb_bytes >> 20);
  }
  size_t next = 0;
  int64_t index = 0;
  while (next < keep.size() && frames->next_frame()) {
    if (static_cast<double>(index) / out.source_fps > limits.max_seconds) {
      throw_error(ErrorCode::kInvalidArgument, "the video is longer than the limit of {:.0f} s", limits.max_seconds);
    }
    if (index == keep[next]) {
      std::vector<uint8_t> rgb = frames->rgb(limits);
      if (out.frames.empty()) {
        out.width = frames->frame()->width;
        out.height = frames->frame()->height;
      } else if (frames->frame()->width != out.width || frames->frame()->height != out.height) {
        throw_error(ErrorCode::kInvalidArgument, "the video changes its size from {} x {} to {} x {}", out.width,
                    out.height, frames->frame()->width, frames->frame()->height);
      }
      while (next < keep.size() && keep[next] == index) {
        out.frames.push_back(rgb);
        ++next;
      }
    }
    ++index;
  }
  if (out.frames.empty()) throw_error(ErrorCode::kInvalidArgument, "the video holds no decodable frame");
  // A count that overestimated the frames: the missing ones repeat the last decoded one.
  while (out.frames.size() < keep.size()) out.frames.push_back(out.frames.back());
  out.source_frames = total;
  out.sampled_fps = static_cast<double>(out.frames.size()) / static_cast<double>(total) * out.source_fps;
  return out;
}

}  // namespace omni::media
