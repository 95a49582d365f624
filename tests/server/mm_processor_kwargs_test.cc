// A chat request's mm_processor_kwargs (server/mm_processor_kwargs.h): the keys the served model's
// processors take and their types, the 400 that names mm_processor_kwargs.<key> and the keys it
// takes, the frame sampling they set, and use_audio_in_video's audio track sent with its video.
#include "server/mm_processor_kwargs.h"

#include <gtest/gtest.h>

#include <string>

#include "base/base64.h"
#include "media/video_fixture.h"
#include "server/openai_error.h"

namespace omni::server {
namespace {

ChatMediaOptions omni_like() {
  ChatMediaOptions o;
  o.audio_sample_rate = 16000;
  o.images = o.videos = true;
  o.video_sampling = {2.0, 4, 768, 2};
  return o;
}

// The field and message of the 400 `kwargs` gives; empty field when there is none.
std::pair<std::string, std::string> refusal(const Json& kwargs, const ChatMediaOptions& options) {
  try {
    parse_mm_processor_kwargs(&kwargs, options);
  } catch (const InvalidField& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return {e.field(), e.what()};
  }
  return {"", "no error"};
}

TEST(MmProcessorKwargs, TheProcessorsKeysAreReadAndSplitBetweenServerAndStage) {
  const Json kwargs = {{"min_pixels", 1024}, {"max_pixels", 8192}, {"fps", 1.5}, {"min_frames", 2},
                       {"max_frames", 8},    {"use_audio_in_video", true}};
  const MmProcessorKwargs k = parse_mm_processor_kwargs(&kwargs, omni_like());
  EXPECT_EQ(k.min_pixels, 1024);
  EXPECT_EQ(k.max_pixels, 8192);
  EXPECT_TRUE(k.use_audio_in_video);
  // The pixel budget goes to the stage; the sampling and the audio track are the server's.
  EXPECT_EQ(k.stage_kwargs(), (Json{{"min_pixels", 1024}, {"max_pixels", 8192}}));
  const ChatMediaOptions applied = with_processor_kwargs(omni_like(), k);
  EXPECT_EQ(applied.video_sampling.fps, 1.5);
  EXPECT_EQ(applied.video_sampling.min_frames, 2);
  EXPECT_EQ(applied.video_sampling.max_frames, 8);
  EXPECT_EQ(applied.video_sampling.frame_multiple, 2);
  EXPECT_TRUE(applied.use_audio_in_video);
  // None, null or an empty object: nothing changes.
  EXPECT_EQ(parse_mm_processor_kwargs(nullptr, omni_like()).stage_kwargs(), Json::object());
  const Json empty = Json::object();
  EXPECT_FALSE(parse_mm_processor_kwargs(&empty, ChatMediaOptions{}).use_audio_in_video);
}

TEST(MmProcessorKwargs, AnUnknownKeyOrAWrongTypeIsA400NamingTheKeyAndTheKeysTaken) {
  auto [field, message] = refusal({{"do_resize", false}}, omni_like());
  EXPECT_EQ(field, "mm_processor_kwargs.do_resize");
  EXPECT_NE(message.find("it takes min_pixels, max_pixels, fps, min_frames, max_frames, use_audio_in_video"),
            std::string::npos)
      << message;
  std::tie(field, message) = refusal({{"fps", "2"}}, omni_like());
  EXPECT_EQ(field, "mm_processor_kwargs.fps");
  EXPECT_NE(message.find("must be a positive number"), std::string::npos) << message;
  std::tie(field, message) = refusal({{"max_pixels", 12.5}}, omni_like());
  EXPECT_EQ(field, "mm_processor_kwargs.max_pixels");
  std::tie(field, message) = refusal({{"use_audio_in_video", 1}}, omni_like());
  EXPECT_EQ(field, "mm_processor_kwargs.use_audio_in_video");
  EXPECT_NE(message.find("must be a boolean"), std::string::npos) << message;
  std::tie(field, message) = refusal({{"min_pixels", 9000}, {"max_pixels", 8192}}, omni_like());
  EXPECT_EQ(field, "mm_processor_kwargs.min_pixels");
  std::tie(field, message) = refusal({{"min_frames", 9}, {"max_frames", 8}}, omni_like());
  EXPECT_EQ(field, "mm_processor_kwargs.min_frames");
  std::tie(field, message) = refusal(Json::array({1}), omni_like());
  EXPECT_EQ(field, "mm_processor_kwargs");
  // An image-only model takes the pixel budget alone.
  ChatMediaOptions images;
  images.images = true;
  std::tie(field, message) = refusal({{"fps", 2}}, images);
  EXPECT_EQ(field, "mm_processor_kwargs.fps");
  EXPECT_NE(message.find("it takes min_pixels, max_pixels"), std::string::npos) << message;
  // A model that reads no images or video takes none.
  std::tie(field, message) = refusal({{"min_pixels", 1024}}, ChatMediaOptions{});
  EXPECT_EQ(field, "mm_processor_kwargs.min_pixels");
  EXPECT_NE(message.find("reads no images or video"), std::string::npos) << message;
  // use_audio_in_video needs a model that reads audio.
  ChatMediaOptions silent = omni_like();
  silent.audio_sample_rate = 0;
  std::tie(field, message) = refusal({{"use_audio_in_video", true}}, silent);
  EXPECT_EQ(field, "mm_processor_kwargs.use_audio_in_video");
  EXPECT_NE(message.find("reads no audio"), std::string::npos) << message;
}

Json video_part(const std::string& mkv) {
  return {{"type", "video_url"}, {"video_url", {{"url", "data:video/x-matroska;base64," + base64_encode(mkv)}}}};
}

TEST(MmProcessorKwargs, UseAudioInVideoSendsEachVideosAudioTrackWithIt) {
  // 3 s at 10 fps with 2.5 s of a tone at 22.05 kHz; the model reads 16 kHz.
  const std::string mkv = testing::flat_video_with_tone(30, 10, 64, 48, 2.5, 22050);
  const Json messages = Json::array({{{"role", "user"}, {"content", Json::array({video_part(mkv)})}}});
  const Json kwargs = {{"use_audio_in_video", true}, {"fps", 1.0}};
  const ChatMediaOptions options = with_processor_kwargs(omni_like(), parse_mm_processor_kwargs(&kwargs, omni_like()));
  const Json media = collect_chat_media(messages, options);
  ASSERT_EQ(media.at("video").size(), 1u);
  const Json& video = media["video"][0];
  // 1 frame per second of 3 s is 3, under min_frames 4: 4 frames, a multiple of 2.
  EXPECT_EQ(video["frames"], 4);
  ASSERT_TRUE(video.contains("audio")) << video.dump().substr(0, 300);
  EXPECT_EQ(video["audio"]["sample_rate"], 16000);
  const size_t samples = base64_decode(video["audio"]["data"].get<std::string>()).size() / 4;
  EXPECT_NEAR(static_cast<double>(samples), 2.5 * 16000, 160) << samples;
  EXPECT_FALSE(media.contains("audio"));  // the track is not an audio part of its own
  // Without the kwarg no track goes along.
  EXPECT_FALSE(collect_chat_media(messages, omni_like())["video"][0].contains("audio"));
  // A video without an audio track is refused, naming the part.
  const Json silent = Json::array(
      {{{"role", "user"}, {"content", Json::array({{{"type", "text"}, {"text", "x"}}, video_part(testing::flat_video(30, 10, 64, 48))})}}});
  try {
    collect_chat_media(silent, options);
    FAIL() << "no error";
  } catch (const InvalidField& e) {
    EXPECT_EQ(e.field(), "messages[0].content[1]");
    EXPECT_NE(std::string(e.what()).find("use_audio_in_video"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace omni::server
