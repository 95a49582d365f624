#include "media/image_decoder.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavutil/frame.h>
#include <libavutil/pixdesc.h>
}

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace omni::testing {

namespace {

uint8_t clamp_byte(double v) { return static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L)); }

}  // namespace

DecodedImage decode_image(const std::string& bytes) {
  AVCodecID id = AV_CODEC_ID_NONE;
  if (bytes.rfind("\x89PNG", 0) == 0) id = AV_CODEC_ID_PNG;
  if (bytes.rfind("\xFF\xD8", 0) == 0) id = AV_CODEC_ID_MJPEG;
  if (bytes.rfind("RIFF", 0) == 0 && bytes.size() > 12 && bytes.compare(8, 4, "WEBP") == 0) id = AV_CODEC_ID_WEBP;
  if (id == AV_CODEC_ID_NONE) throw std::runtime_error("decode_image: not a PNG, JPEG or WebP file");
  const AVCodec* codec = avcodec_find_decoder(id);
  AVCodecContext* ctx = avcodec_alloc_context3(codec);
  AVPacket* packet = av_packet_alloc();
  AVFrame* frame = av_frame_alloc();
  DecodedImage out;
  out.codec = codec->name;
  auto cleanup = [&] {
    av_frame_free(&frame);
    av_packet_free(&packet);
    avcodec_free_context(&ctx);
  };
  if (avcodec_open2(ctx, codec, nullptr) < 0 || av_new_packet(packet, static_cast<int>(bytes.size())) < 0) {
    cleanup();
    throw std::runtime_error("decode_image: cannot open the decoder");
  }
  std::copy(bytes.begin(), bytes.end(), packet->data);
  if (avcodec_send_packet(ctx, packet) < 0 || avcodec_receive_frame(ctx, frame) < 0) {
    cleanup();
    throw std::runtime_error("decode_image: decoding failed");
  }
  out.width = frame->width;
  out.height = frame->height;
  out.rgb.resize(static_cast<size_t>(out.width) * out.height * 3);
  const auto fmt = static_cast<AVPixelFormat>(frame->format);
  for (int y = 0; y < out.height; ++y) {
    for (int x = 0; x < out.width; ++x) {
      uint8_t* dst = &out.rgb[(static_cast<size_t>(y) * out.width + x) * 3];
      if (fmt == AV_PIX_FMT_RGB24) {
        std::copy_n(frame->data[0] + y * frame->linesize[0] + 3 * x, 3, dst);
      } else if (fmt == AV_PIX_FMT_YUVJ420P || fmt == AV_PIX_FMT_YUV420P || fmt == AV_PIX_FMT_YUVA420P) {
        const bool full = fmt == AV_PIX_FMT_YUVJ420P;
        double yy = frame->data[0][y * frame->linesize[0] + x];
        double u = frame->data[1][(y / 2) * frame->linesize[1] + x / 2] - 128.0;
        double v = frame->data[2][(y / 2) * frame->linesize[2] + x / 2] - 128.0;
        if (!full) {
          yy = (yy - 16.0) * 255.0 / 219.0;
          u *= 255.0 / 224.0;
          v *= 255.0 / 224.0;
        }
        dst[0] = clamp_byte(yy + 1.402 * v);
        dst[1] = clamp_byte(yy - 0.344136 * u - 0.714136 * v);
        dst[2] = clamp_byte(yy + 1.772 * u);
      } else {
        const std::string name = av_get_pix_fmt_name(fmt);
        cleanup();
        throw std::runtime_error("decode_image: unexpected pixel format " + name);
      }
    }
  }
  cleanup();
  return out;
}

}  // namespace omni::testing
