// Image and video decoding (media/visual_decoder.h): PNG and JPEG back to their pixels, a video's
// frames sampled at the processor's rate (the right frames, the kept frames' rate), the limits, and
// the errors for bytes that are not media.
#include "media/visual_decoder.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/opt.h>
}

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/error.h"
#include "media/image_encoder.h"

namespace omni::media {
namespace {

// A picture with gradients, so that lossless round trips are checked pixel for pixel.
std::vector<uint8_t> gradient(int width, int height) {
  std::vector<uint8_t> rgb(static_cast<size_t>(width) * height * 3);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      uint8_t* p = &rgb[(static_cast<size_t>(y) * width + x) * 3];
      p[0] = static_cast<uint8_t>(x * 255 / std::max(1, width - 1));
      p[1] = static_cast<uint8_t>(y * 255 / std::max(1, height - 1));
      p[2] = static_cast<uint8_t>((x + y) % 256);
    }
  }
  return rgb;
}

// `frames` flat-coloured frames (frame i has luma ramp 20 + 7 i) at `fps` in Matroska with
// libavcodec's MPEG-4 encoder, written to memory.
std::string flat_video(int frames, int fps, int width, int height) {
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
  av_write_trailer(out);
  uint8_t* bytes = nullptr;
  const int size = avio_close_dyn_buf(out->pb, &bytes);
  std::string result(reinterpret_cast<const char*>(bytes), static_cast<size_t>(size));
  av_free(bytes);
  av_packet_free(&packet);
  av_frame_free(&frame);
  avcodec_free_context(&enc);
  avformat_free_context(out);
  return result;
}

double mean(const std::vector<uint8_t>& v) {
  double s = 0;
  for (uint8_t x : v) s += x;
  return s / static_cast<double>(v.size());
}

TEST(VisualDecoder, PngRoundTripsPixelForPixelAndJpegKeepsItsSize) {
  const std::vector<uint8_t> rgb = gradient(37, 21);
  const DecodedImage png = decode_image(encode_image(rgb, 37, 21, ImageFormat::kPng));
  EXPECT_EQ(png.codec, "png");
  EXPECT_EQ(png.width, 37);
  EXPECT_EQ(png.height, 21);
  EXPECT_EQ(png.rgb, rgb);
  const DecodedImage jpeg = decode_image(encode_image(rgb, 37, 21, ImageFormat::kJpeg));
  EXPECT_EQ(jpeg.codec, "mjpeg");
  EXPECT_EQ(jpeg.width, 37);
  EXPECT_EQ(jpeg.height, 21);
  ASSERT_EQ(jpeg.rgb.size(), rgb.size());
  EXPECT_NEAR(mean(jpeg.rgb), mean(rgb), 3.0);
}

TEST(VisualDecoder, RefusesBytesThatAreNoPictureAndPicturesOverTheLimit) {
  try {
    decode_image("definitely not an image");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("not an image FFmpeg can read"), std::string::npos) << e.what();
  }
  VisualDecodeLimits small;
  small.max_pixels = 100;
  try {
    decode_image(encode_image(gradient(37, 21), 37, 21, ImageFormat::kPng), small);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the image is 37 x 21 pixels; the limit is 100 pixels"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(decode_image(""), Error);
}

TEST(VisualDecoder, SamplesVideoFramesAtTheRequestedRate) {
  // 10 s at 30 fps: 20 frames evenly spaced; 1 s: at least min_frames; 3 frames: one temporal patch.
  const std::vector<int64_t> ten = sample_video_frames(300, 30.0, {});
  ASSERT_EQ(ten.size(), 20u);
  EXPECT_EQ(ten[1], 15);
  EXPECT_EQ(ten[19], 285);
  EXPECT_EQ(sample_video_frames(25, 25.0, {}), (std::vector<int64_t>{0, 6, 12, 18}));
  EXPECT_EQ(sample_video_frames(3, 25.0, {}), (std::vector<int64_t>{0, 1}));
  EXPECT_THROW(sample_video_frames(1, 25.0, {}), Error);
}

TEST(VisualDecoder, DecodesTheSampledFramesOfAVideo) {
  // 30 frames at 10 fps (3 s): 2 frames per second keeps 6, frames 0, 5, 10, … 25.
  const std::string mkv = flat_video(30, 10, 64, 48);
  const DecodedVideo video = decode_video(mkv);
  EXPECT_EQ(video.container.find("matroska"), 0u) << video.container;
  EXPECT_EQ(video.codec, "mpeg4");
  EXPECT_EQ(video.width, 64);
  EXPECT_EQ(video.height, 48);
  EXPECT_DOUBLE_EQ(video.source_fps, 10.0);
  EXPECT_EQ(video.source_frames, 30);
  ASSERT_EQ(video.frames.size(), 6u);
  EXPECT_DOUBLE_EQ(video.sampled_fps, 2.0);
  for (size_t k = 0; k < video.frames.size(); ++k) {
    ASSERT_EQ(video.frames[k].size(), 64u * 48u * 3u);
    // Luma 20 + 7 i with neutral chroma: grey of (Y - 16) * 255 / 219.
    const double want = (20.0 + 7.0 * 5.0 * static_cast<double>(k) - 16.0) * 255.0 / 219.0;
    EXPECT_NEAR(mean(video.frames[k]), want, 4.0) << "kept frame " << k;
  }
  VisualDecodeLimits short_limit;
  short_limit.max_seconds = 1.0;
  EXPECT_THROW(decode_video(mkv, {}, short_limit), Error);
  EXPECT_THROW(decode_video("not a video at all"), Error);
}

}  // namespace
}  // namespace omni::media
