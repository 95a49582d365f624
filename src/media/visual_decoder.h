// Image and video decoding for media a client sends (chat `image_url` and `video_url` parts): any
// format FFmpeg's libavformat and libavcodec read (PNG, JPEG, WebP, GIF, BMP…; MP4, WebM, MKV,
// MOV…), held in memory, to 8-bit RGB with libswscale. A picture with alpha is composed over white
// (what the Hugging Face processors' convert_to_rgb does).
//
// A video's frames are sampled as the Qwen-VL processors sample them (sample_video_frames): at
// `fps` frames per second of the source, at least min_frames and at most max_frames, a multiple of
// frame_multiple (the model's temporal patch); only the kept frames are converted.
//
// Errors: omni::Error(kInvalidArgument) saying what is wrong with the bytes ("not an image FFmpeg
// can read: …", "the image is 20000 x 20000 pixels; the limit is 67108864 pixels", "the video is
// 912.0 s long; the limit is 600 s"); callers prefix the content part at fault. Decoding never
// keeps more than the limits allow.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace omni::media {

struct VisualDecodeLimits {
  size_t max_bytes = size_t{256} << 20;            // of the encoded input
  int64_t max_pixels = int64_t{64} << 20;          // per picture or frame
  double max_seconds = 600.0;                      // of a video
  size_t max_video_rgb_bytes = size_t{512} << 20;  // of a video's kept frames, decoded
};

struct DecodedImage {
  std::string codec;  // libavcodec's decoder name (png, mjpeg, webp…)
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;  // height * width * 3
};

DecodedImage decode_image(std::string_view bytes, const VisualDecodeLimits& limits = {});

struct VideoSampling {
  double fps = 2.0;
  int min_frames = 4;
  int max_frames = 768;
  int frame_multiple = 2;
};

// The indices of the frames of a video of `total` frames at `video_fps` that `sampling` keeps
// (evenly spaced from the first). kInvalidArgument when fewer than frame_multiple remain.
std::vector<int64_t> sample_video_frames(int64_t total, double video_fps, const VideoSampling& sampling);

struct DecodedVideo {
  std::string container;  // libavformat's demuxer name
  std::string codec;      // libavcodec's decoder name
  int width = 0;
  int height = 0;
  double source_fps = 0.0;                   // the stream's frame rate
  int64_t source_frames = 0;                 // frames in the stream (as counted or estimated)
  double sampled_fps = 0.0;                  // the kept frames' rate: kept / source seconds
  std::vector<std::vector<uint8_t>> frames;  // the kept frames, each height * width * 3 RGB
};

DecodedVideo decode_video(std::string_view bytes, const VideoSampling& sampling = {},
                          const VisualDecodeLimits& limits = {});

}  // namespace omni::media
