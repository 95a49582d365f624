// Chat media parts (server/chat_media.h): input_audio and audio_url (data: and file:// URLs)
// decoded and resampled to the model's rate in part order, --limit-mm-per-prompt, and the 400s
// that name the part at fault.
#include "server/chat_media.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <numbers>
#include <string>
#include <thread>
#include <vector>

#include "base/base64.h"
#include "base/error.h"
#include "media/image_encoder.h"
#include "media/wav_encoder.h"
#include "support/temp_dir.h"

namespace omni::server {
namespace {

// A 16-bit PCM WAV of a 440 Hz tone.
std::string wav_tone(int sample_rate, int samples) {
  std::string out = media::wav_header(sample_rate, 2 * static_cast<int64_t>(samples));
  for (int i = 0; i < samples; ++i) {
    const auto v = static_cast<int16_t>(std::lround(8000.0 * std::sin(2 * std::numbers::pi * 440.0 * i / sample_rate)));
    out.append(reinterpret_cast<const char*>(&v), 2);
  }
  return out;
}

// An HTTP server on 127.0.0.1 that answers one connection with `response` and closes it, or, with
// an empty response, holds it open for `hold` without answering.
class OneShotHttp {
 public:
  explicit OneShotHttp(std::string response, std::chrono::milliseconds hold = std::chrono::milliseconds(0))
      : listener_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (bind(listener_, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(listener_, 1) != 0 ||
        getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      throw std::runtime_error("cannot listen on 127.0.0.1");
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this, response = std::move(response), hold] {
      const int conn = accept(listener_, nullptr, nullptr);
      if (conn < 0) return;
      std::string request;
      char buf[4096];
      while (request.find("\r\n\r\n") == std::string::npos) {
        const ssize_t n = read(conn, buf, sizeof(buf));
        if (n <= 0) break;
        request.append(buf, static_cast<size_t>(n));
      }
      if (response.empty()) std::this_thread::sleep_for(hold);
      for (size_t sent = 0; sent < response.size();) {
        const ssize_t n = write(conn, response.data() + sent, response.size() - sent);
        if (n <= 0) break;
        sent += static_cast<size_t>(n);
      }
      close(conn);
    });
  }
  ~OneShotHttp() {
    thread_.join();
    close(listener_);
  }
  std::string url(const std::string& path) const { return "http://127.0.0.1:" + std::to_string(port_) + path; }

 private:
  int listener_;
  int port_ = 0;
  std::thread thread_;
};

std::string http_response(int status, const std::string& body) {
  return "HTTP/1.1 " + std::to_string(status) +
         " X\r\nContent-Type: audio/wav\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n" + body;
}

Json audio_url(const std::string& url) { return {{"type", "audio_url"}, {"audio_url", {{"url", url}}}}; }

Json input_audio(const std::string& bytes) {
  return {{"type", "input_audio"}, {"input_audio", {{"data", base64_encode(bytes)}, {"format", "wav"}}}};
}

Json user(Json parts) { return Json::array({{{"role", "user"}, {"content", std::move(parts)}}}); }

ChatMediaOptions audio_16k() {
  ChatMediaOptions o;
  o.audio_sample_rate = 16000;
  return o;
}

std::string error_of(const Json& messages, const ChatMediaOptions& options) {
  try {
    collect_chat_media(messages, options);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  return "no error";
}

size_t samples_of(const Json& entry) { return base64_decode(entry.at("data").get<std::string>()).size() / 4; }

TEST(ChatMedia, DecodesInputAudioAndDataUrlsInPartOrderAtTheModelsRate) {
  const std::string a = wav_tone(16000, 8000), b = wav_tone(24000, 12000);
  const Json messages = user(
      Json::array({{{"type", "text"}, {"text", "hi"}},
                   input_audio(a),
                   {{"type", "audio_url"}, {"audio_url", {{"url", "data:audio/wav;base64," + base64_encode(b)}}}}}));
  const Json media = collect_chat_media(messages, audio_16k());
  ASSERT_EQ(media.at("audio").size(), 2u);
  EXPECT_EQ(media["audio"][0]["source"], "messages[0].content[1]");
  EXPECT_EQ(media["audio"][1]["source"], "messages[0].content[2]");
  EXPECT_EQ(media["audio"][0]["sample_rate"], 16000);
  EXPECT_EQ(samples_of(media["audio"][0]), 8000u);
  EXPECT_EQ(samples_of(media["audio"][1]), 8000u);  // 12000 at 24 kHz, resampled
  std::vector<float> first(8000);
  std::memcpy(first.data(), base64_decode(media["audio"][0]["data"].get<std::string>()).data(), 4 * first.size());
  EXPECT_NEAR(first[9], 8000.0 / 32768.0 * std::sin(2 * std::numbers::pi * 440.0 * 9 / 16000), 1e-4);
  EXPECT_TRUE(collect_chat_media(user(Json::array({{{"type", "text"}, {"text", "no media"}}})), audio_16k()).empty());
}

TEST(ChatMedia, EnforcesTheLimitPerPromptNamingThePartPastIt) {
  ChatMediaOptions o = audio_16k();
  o.limit_per_prompt = parse_limit_mm_per_prompt(R"({"audio": 1, "image": {"count": 0}})");
  EXPECT_EQ(o.limit_per_prompt.at("audio"), 1);
  EXPECT_EQ(o.limit_per_prompt.at("image"), 0);
  const std::string a = wav_tone(16000, 4000);
  const std::string err = error_of(user(Json::array({input_audio(a), input_audio(a)})), o);
  EXPECT_NE(err.find("messages[0].content[1]': at most 1 audio part(s) may be provided in one prompt"),
            std::string::npos)
      << err;
  EXPECT_THROW(parse_limit_mm_per_prompt(R"({"smell": 1})"), Error);
  EXPECT_THROW(parse_limit_mm_per_prompt(R"({"audio": -1})"), Error);
  EXPECT_THROW(parse_limit_mm_per_prompt("[1]"), Error);
}

TEST(ChatMedia, UndecodableOrUnservedAudioIsA400NamingThePart) {
  const Json garbage = user(Json::array({{{"type", "text"}, {"text", "x"}}, input_audio("not audio at all")}));
  std::string err = error_of(garbage, audio_16k());
  EXPECT_NE(err.find("'messages[0].content[1]': not an audio file"), std::string::npos) << err;

  ChatMediaOptions small = audio_16k();
  small.audio_limits.max_seconds = 0.1;
  err = error_of(user(Json::array({input_audio(wav_tone(16000, 16000))})), small);
  EXPECT_NE(err.find("'messages[0].content[0]':"), std::string::npos) << err;
  EXPECT_NE(err.find("limit"), std::string::npos) << err;

  // The duration limit is for the request's audio in all: two parts of 0.06 s pass 0.1 s.
  err = error_of(user(Json::array({input_audio(wav_tone(16000, 960)), input_audio(wav_tone(16000, 960))})), small);
  EXPECT_NE(err.find("'messages[0].content[1]':"), std::string::npos) << err;
  EXPECT_NE(err.find("after 0.1 s of audio in earlier parts"), std::string::npos) << err;
  EXPECT_TRUE(collect_chat_media(user(Json::array({input_audio(wav_tone(16000, 960))})), small).contains("audio"));

  err = error_of(user(Json::array({input_audio(wav_tone(16000, 400))})), ChatMediaOptions{});
  EXPECT_NE(err.find("'messages[0].content[0]' is a input_audio part, but the served model does not read audio"),
            std::string::npos)
      << err;
  err = error_of(user(Json::array({{{"type", "input_audio"}, {"input_audio", {{"data", "%%%"}}}}})), audio_16k());
  EXPECT_NE(err.find("'messages[0].content[0].input_audio.data' is not base64"), std::string::npos) << err;
  err = error_of(user(Json::array({audio_url("ftp://example.com/a.wav")})), audio_16k());
  EXPECT_NE(err.find("the URL must be data:, http(s):// or file://"), std::string::npos) << err;
}

TEST(ChatMedia, HttpUrlsAreFetchedWithinTheTimeAndSizeLimits) {
  const std::string wav = wav_tone(16000, 4800);
  {
    OneShotHttp server(http_response(200, wav));
    const Json media = collect_chat_media(user(Json::array({audio_url(server.url("/a.wav"))})), audio_16k());
    EXPECT_EQ(samples_of(media.at("audio")[0]), 4800u);
  }
  {
    OneShotHttp server(http_response(404, "gone"));
    const std::string err = error_of(user(Json::array({audio_url(server.url("/b.wav"))})), audio_16k());
    EXPECT_NE(err.find("'messages[0].content[0].audio_url': " + server.url("/b.wav") + " answered HTTP 404"),
              std::string::npos)
        << err;
  }
  {
    OneShotHttp server(http_response(200, wav));
    ChatMediaOptions small = audio_16k();
    small.audio_limits.max_bytes = 1000;
    const std::string err = error_of(user(Json::array({audio_url(server.url("/c.wav"))})), small);
    EXPECT_NE(err.find("is larger than the limit of 1000 bytes"), std::string::npos) << err;
  }
  {
    OneShotHttp server("", std::chrono::milliseconds(800));
    ChatMediaOptions quick = audio_16k();
    quick.fetch_timeout = std::chrono::milliseconds(200);
    const auto start = std::chrono::steady_clock::now();
    const std::string err = error_of(user(Json::array({audio_url(server.url("/d.wav"))})), quick);
    EXPECT_NE(err.find("no answer within 0.2 s"), std::string::npos) << err;
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(700));
  }
}

TEST(ChatMedia, FileUrlsOnlyUnderTheAllowedPath) {
  testing::TempDir dir;
  const std::string bytes = wav_tone(16000, 3200);
  const auto file = dir.path() / "media" / "a.wav";
  std::filesystem::create_directories(file.parent_path());
  { std::ofstream(file, std::ios::binary) << bytes; }
  const Json part = {{"type", "audio_url"}, {"audio_url", {{"url", "file://" + file.string()}}}};
  std::string err = error_of(user(Json::array({part})), audio_16k());
  EXPECT_NE(err.find("local files are not allowed; start the server with --allowed-local-media-path"),
            std::string::npos)
      << err;
  ChatMediaOptions allowed = audio_16k();
  allowed.allowed_local_media_path = dir.path() / "media";
  EXPECT_EQ(samples_of(collect_chat_media(user(Json::array({part})), allowed).at("audio")[0]), 3200u);
  allowed.allowed_local_media_path = dir.path() / "other";
  err = error_of(user(Json::array({part})), allowed);
  EXPECT_NE(err.find("is not inside --allowed-local-media-path"), std::string::npos) << err;
  const Json escape = {
      {"type", "audio_url"},
      {"audio_url", {{"url", "file://" + (dir.path() / "other" / ".." / "media" / "a.wav").string()}}}};
  allowed.allowed_local_media_path = dir.path() / "other";
  EXPECT_NE(error_of(user(Json::array({escape})), allowed).find("is not inside"), std::string::npos);
}

}  // namespace
}  // namespace omni::server

namespace omni::server {
namespace {

// A 20 x 12 PNG of a gradient, its RGB bytes alongside.
std::pair<std::string, std::vector<uint8_t>> png_gradient() {
  std::vector<uint8_t> rgb(20 * 12 * 3);
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>((i * 7) % 251);
  return {media::encode_image(rgb, 20, 12, media::ImageFormat::kPng), rgb};
}

TEST(ChatMediaVision, ImageUrlPartsBecomeRgbPixelsInPartOrder) {
  ChatMediaOptions o;
  o.images = true;
  const auto [png, rgb] = png_gradient();
  const Json messages = user(
      Json::array({{{"type", "text"}, {"text", "what is it?"}},
                   {{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64," + base64_encode(png)}}}},
                   {{"type", "image_url"}, {"image_url", "data:image/png;base64," + base64_encode(png)}}}));
  const Json media = collect_chat_media(messages, o);
  ASSERT_EQ(media.at("image").size(), 2u);
  EXPECT_EQ(media["image"][0]["source"], "messages[0].content[1]");
  EXPECT_EQ(media["image"][1]["source"], "messages[0].content[2]");
  EXPECT_EQ(media["image"][0]["width"], 20);
  EXPECT_EQ(media["image"][0]["height"], 12);
  const std::string bytes = base64_decode(media["image"][0]["data"].get<std::string>());
  EXPECT_EQ(std::vector<uint8_t>(bytes.begin(), bytes.end()), rgb);
  EXPECT_EQ(readable_media(o), (std::vector<std::string>{"image"}));
}

TEST(ChatMediaVision, UndecodableUnservedOrTooManyImagesAreA400NamingThePart) {
  ChatMediaOptions o;
  o.images = true;
  const Json garbage = user(Json::array(
      {{{"type", "text"}, {"text", "x"}},
       {{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64," + base64_encode("no image")}}}}}));
  std::string err = error_of(garbage, o);
  EXPECT_NE(err.find("'messages[0].content[1]': not an image FFmpeg can read"), std::string::npos) << err;
  const auto [png, rgb] = png_gradient();
  const Json one = {{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64," + base64_encode(png)}}}};
  err = error_of(user(Json::array({one})), ChatMediaOptions{});
  EXPECT_NE(err.find("'messages[0].content[0]' is a image_url part, but the served model does not read image"),
            std::string::npos)
      << err;
  err =
      error_of(user(Json::array({{{"type", "video_url"}, {"video_url", {{"url", "data:video/mp4;base64,AAAA"}}}}})), o);
  EXPECT_NE(err.find("does not read video"), std::string::npos) << err;
  o.limit_per_prompt = parse_limit_mm_per_prompt(R"({"image": 1})");
  err = error_of(user(Json::array({one, one})), o);
  EXPECT_NE(err.find("'messages[0].content[1]': at most 1 image part(s)"), std::string::npos) << err;
  err = error_of(user(Json::array({{{"type", "image_url"}, {"image_url", {{"url", "ftp://x/y.png"}}}}})), o);
  EXPECT_NE(err.find("'messages[0].content[0].image_url': the URL must be data:, http(s):// or file://"),
            std::string::npos)
      << err;
}

}  // namespace
}  // namespace omni::server
