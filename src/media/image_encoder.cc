#include "media/image_encoder.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavutil/error.h>
#include <libavutil/frame.h>
}

#include <algorithm>
#include <cmath>

#include "base/error.h"

namespace omni::media {

namespace {

std::string av_message(int code) {
  char text[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(code, text, sizeof text);
  return text;
}

struct Codec {
  AVCodecContext* context = nullptr;
  AVFrame* frame = nullptr;
  AVPacket* packet = nullptr;
  ~Codec() {
    av_packet_free(&packet);
    av_frame_free(&frame);
    avcodec_free_context(&context);
  }
};

uint8_t clamp_byte(float v) { return static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L)); }

// Fills the frame's planes from the RGB pixels in the frame's pixel format.
void fill_frame(AVFrame* f, std::span<const uint8_t> rgb, int width, int height) {
  const auto px = [&](int x, int y, int c) { return static_cast<float>(rgb[(static_cast<size_t>(y) * width + x) * 3 + c]); };
  if (f->format == AV_PIX_FMT_RGB24) {
    for (int y = 0; y < height; ++y) std::copy_n(&rgb[static_cast<size_t>(y) * width * 3], width * 3, f->data[0] + y * f->linesize[0]);
    return;
  }
  // 4:2:0 YUV, BT.601: full range for JPEG (yuvj420p), limited (16-235, 16-240) for WebP (yuv420p);
  // luma per pixel, chroma from the 2x2 mean.
  const bool full = f->format == AV_PIX_FMT_YUVJ420P;
  const float luma_scale = full ? 1.0f : 219.0f / 255.0f, luma_offset = full ? 0.0f : 16.0f;
  const float chroma_scale = full ? 1.0f : 224.0f / 255.0f;
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      const float r = px(x, y, 0), g = px(x, y, 1), b = px(x, y, 2);
      f->data[0][y * f->linesize[0] + x] = clamp_byte(luma_offset + luma_scale * (0.299f * r + 0.587f * g + 0.114f * b));
    }
  }
  for (int y = 0; y < (height + 1) / 2; ++y) {
    for (int x = 0; x < (width + 1) / 2; ++x) {
      float r = 0, g = 0, b = 0;
      int n = 0;
      for (int dy = 0; dy < 2; ++dy) {
        for (int dx = 0; dx < 2; ++dx) {
          const int sx = std::min(2 * x + dx, width - 1), sy = std::min(2 * y + dy, height - 1);
          r += px(sx, sy, 0);
          g += px(sx, sy, 1);
          b += px(sx, sy, 2);
          ++n;
        }
      }
      r /= n;
      g /= n;
      b /= n;
      f->data[1][y * f->linesize[1] + x] = clamp_byte(128.0f + chroma_scale * (-0.168736f * r - 0.331264f * g + 0.5f * b));
      f->data[2][y * f->linesize[2] + x] = clamp_byte(128.0f + chroma_scale * (0.5f * r - 0.418688f * g - 0.081312f * b));
    }
  }
}

}  // namespace

std::optional<ImageFormat> parse_image_format(std::string_view name) {
  if (name == "png") return ImageFormat::kPng;
  if (name == "jpeg" || name == "jpg") return ImageFormat::kJpeg;
  if (name == "webp") return ImageFormat::kWebp;
  return std::nullopt;
}

std::string_view image_format_name(ImageFormat format) {
  switch (format) {
    case ImageFormat::kPng:
      return "png";
    case ImageFormat::kJpeg:
      return "jpeg";
    case ImageFormat::kWebp:
      return "webp";
  }
  return "png";
}

std::string_view image_mime_type(ImageFormat format) {
  switch (format) {
    case ImageFormat::kPng:
      return "image/png";
    case ImageFormat::kJpeg:
      return "image/jpeg";
    case ImageFormat::kWebp:
      return "image/webp";
  }
  return "image/png";
}

std::string encode_image(std::span<const uint8_t> rgb, int width, int height, ImageFormat format) {
  if (width <= 0 || height <= 0 || rgb.size() != static_cast<size_t>(width) * height * 3) {
    throw_error(ErrorCode::kInvalidArgument, "image encoder: {} bytes are not a {}x{} RGB image", rgb.size(), width,
                height);
  }
  const char* encoder = format == ImageFormat::kPng ? "png" : format == ImageFormat::kJpeg ? "mjpeg" : "libwebp";
  const AVCodec* codec = avcodec_find_encoder_by_name(encoder);
  if (codec == nullptr) throw_error(ErrorCode::kUnsupported, "image encoder: this FFmpeg has no {} encoder", encoder);
  Codec c;
  c.context = avcodec_alloc_context3(codec);
  c.frame = av_frame_alloc();
  c.packet = av_packet_alloc();
  if (!c.context || !c.frame || !c.packet) throw_error(ErrorCode::kInternal, "image encoder: out of memory");
  const AVPixelFormat pix = format == ImageFormat::kPng    ? AV_PIX_FMT_RGB24
                            : format == ImageFormat::kJpeg ? AV_PIX_FMT_YUVJ420P
                                                           : AV_PIX_FMT_YUV420P;
  c.context->width = width;
  c.context->height = height;
  c.context->pix_fmt = pix;
  c.context->time_base = AVRational{1, 25};
  c.context->thread_count = 1;
  if (format == ImageFormat::kJpeg) {
    c.context->flags |= AV_CODEC_FLAG_QSCALE;
    c.context->global_quality = FF_QP2LAMBDA * 3;  // qscale 3: about quality 90
    c.context->color_range = AVCOL_RANGE_JPEG;
  }
  if (format == ImageFormat::kWebp) c.context->global_quality = FF_QP2LAMBDA * 90;
  if (int status = avcodec_open2(c.context, codec, nullptr); status < 0) {
    throw_error(ErrorCode::kInternal, "image encoder: opening FFmpeg's {} encoder for {}x{} failed: {}", encoder, width,
                height, av_message(status));
  }
  c.frame->format = pix;
  c.frame->width = width;
  c.frame->height = height;
  if (int status = av_frame_get_buffer(c.frame, 0); status < 0) {
    throw_error(ErrorCode::kInternal, "image encoder: allocating a frame failed: {}", av_message(status));
  }
  fill_frame(c.frame, rgb, width, height);
  c.frame->pts = 0;
  if (format == ImageFormat::kJpeg) c.frame->quality = c.context->global_quality;
  std::string out;
  for (AVFrame* f : {c.frame, static_cast<AVFrame*>(nullptr)}) {
    if (int status = avcodec_send_frame(c.context, f); status < 0) {
      throw_error(ErrorCode::kInternal, "image encoder: {} failed: {}", encoder, av_message(status));
    }
    while (true) {
      const int status = avcodec_receive_packet(c.context, c.packet);
      if (status == AVERROR(EAGAIN) || status == AVERROR_EOF) break;
      if (status < 0) throw_error(ErrorCode::kInternal, "image encoder: {} failed: {}", encoder, av_message(status));
      out.append(reinterpret_cast<const char*>(c.packet->data), static_cast<size_t>(c.packet->size));
      av_packet_unref(c.packet);
    }
  }
  if (out.empty()) throw_error(ErrorCode::kInternal, "image encoder: {} produced no data", encoder);
  return out;
}

}  // namespace omni::media
