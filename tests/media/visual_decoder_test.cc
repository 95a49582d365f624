// Image and video decoding (media/visual_decoder.h): PNG and JPEG back to their pixels, a video's
// frames sampled at the processor's rate (the right frames, the kept frames' rate), the limits, and
// the errors for bytes that are not media.
#include "media/visual_decoder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/error.h"
#include "media/image_encoder.h"
#include "media/video_fixture.h"

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
  const std::string mkv = testing::flat_video(30, 10, 64, 48);
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
