// The playground page of `omnistage serve` (GET / and /playground) end to end: the real binary on the
// qwen3 and qwen3_tts demo checkpoints, the page read with curl, and driven in headless Chromium
// (Debian's /usr/bin/chromium through npm `playwright-core`, both installed by scripts/install-deps)
// by playground_browser.cjs: the key prompt, a streamed chat reply equal to the non-streamed one, a
// spoken reply that plays, the API's errors shown as returned, the conditional panels. Screenshots
// are kept under build/tests/artifacts/. --disable-playground: / and /playground are 404.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "base/base64.h"
#include "base/json.h"
#include "integration/serve_process.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

namespace omni::testing {
namespace {

const std::string kModules = std::string(OMNI_SOURCE_DIR) + "/third_party/npm/node_modules";
const fs::path kArtifacts = fs::path(OMNI_BINARY_DIR) / "tests" / "artifacts";
constexpr const char* kChromium = "/usr/bin/chromium";

// The status line and headers (lower-cased names) and the body of a GET without the key.
struct Page {
  int status = 0;
  std::string headers;
  std::string body;
};

Page get_page(const ServeProcess& server, const std::string& path) {
  ProcessResult result = run_process({"/usr/bin/curl", "-sS", "-i", "--max-time", "10", server.url(path)});
  Page page;
  const size_t split = result.out.find("\r\n\r\n");
  if (split == std::string::npos) return page;
  page.headers = result.out.substr(0, split);
  page.body = result.out.substr(split + 4);
  for (char& c : page.headers) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  page.status = std::atoi(page.headers.c_str() + page.headers.find(' ') + 1);
  return page;
}

std::vector<std::string> strings(const Json& array) {
  std::vector<std::string> out;
  for (const Json& item : array) out.push_back(item.get<std::string>());
  return out;
}

bool contains(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

// Runs one scenario of playground_browser.cjs against `server`; its observations.
Json browse(const ServeProcess& server, const std::string& scenario) {
  fs::create_directories(kArtifacts);
  ProcessResult result =
      run_process({"/usr/bin/node", std::string(OMNI_SOURCE_DIR) + "/tests/integration/playground_browser.cjs",
                   scenario, server.url(""), kApiKey, kArtifacts.string()},
                  {"NODE_PATH=" + kModules});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  if (result.exit_code != 0) return Json();
  Json out = Json::parse(result.out);
  // Self-contained: every request the page made went to this server (or to a blob: URL of its
  // origin, the audio and images it received), and nothing failed in it.
  for (const Json& request : out["requests"]) {
    const std::string url = request["url"];
    EXPECT_TRUE(url.starts_with(server.url("/")) || url.starts_with("blob:" + server.url("/"))) << request.dump();
  }
  EXPECT_EQ(out["console_errors"].size(), 0u) << out["console_errors"].dump();
  return out;
}

// Skips a browser test, with the reason, where Chromium or playwright-core is missing.
#define SKIP_WITHOUT_BROWSER()                                                                                 \
  do {                                                                                                         \
    if (!fs::exists(kChromium)) GTEST_SKIP() << kChromium << " is missing (scripts/install-deps installs it)"; \
    if (!fs::exists(kModules + "/playwright-core/package.json"))                                               \
      GTEST_SKIP() << "npm playwright-core is missing (scripts/install-deps installs it)";                     \
  } while (0)

inline constexpr char kQwen3[] = "qwen3";
inline constexpr char kQwen3Tts[] = "qwen3_tts";

using TextPlaygroundTest = DemoServerSuite<kQwen3>;
using SpeechPlaygroundTest = DemoServerSuite<kQwen3Tts>;

TEST_F(TextPlaygroundTest, RootServesTheSelfContainedPageAndModelCardsDescribeThePipeline) {
  Page root = get_page(*server_, "/");
  ASSERT_EQ(root.status, 200) << root.headers;
  EXPECT_NE(root.headers.find("content-type: text/html; charset=utf-8"), std::string::npos) << root.headers;
  EXPECT_NE(root.headers.find("content-security-policy: default-src 'none';"), std::string::npos) << root.headers;
  EXPECT_EQ(root.body.rfind("<!doctype html>", 0), 0u);
  EXPECT_NE(root.body.find("<title>omnistage playground</title>"), std::string::npos);
  // Nothing from elsewhere: no external script, style, font or image.
  for (const char* external : {"src=\"http", "href=\"http", "@import", "url(http", "//cdn", "@font-face"}) {
    EXPECT_EQ(root.body.find(external), std::string::npos) << external;
  }
  Page playground = get_page(*server_, "/playground");
  EXPECT_EQ(playground.status, 200);
  EXPECT_EQ(playground.body, root.body);

  // What the page reads: the card's description of the pipeline and the server's endpoints.
  HttpResult models = curl(*server_, "/v1/models", std::nullopt);
  ASSERT_EQ(models.status, 200) << models.body;
  const Json served = Json::parse(models.body)["data"][0]["omnistage"];
  EXPECT_EQ(served["pipeline"], "qwen3");
  EXPECT_EQ(served["output_modalities"], Json({"text"}));
  EXPECT_TRUE(served["speech_task_type"].is_null());
  const std::vector<std::string> endpoints = strings(served["endpoints"]);
  for (const char* endpoint : {"GET /", "GET /playground", "GET /v1/models", "POST /v1/chat/completions",
                               "POST /v1/audio/speech", "GET /v1/audio/voices", "POST /v1/images/generations"}) {
    EXPECT_TRUE(contains(endpoints, endpoint)) << endpoint << " in " << served["endpoints"].dump();
  }
  EXPECT_TRUE(std::is_sorted(endpoints.begin(), endpoints.end(), [](const std::string& a, const std::string& b) {
    return a.substr(a.find(' ')) < b.substr(b.find(' '));
  }));
}

TEST_F(TextPlaygroundTest, DisablePlaygroundLeavesRootNotFound) {
  ServeProcess disabled(dir_->path() / "model", dir_->path() / "disabled.log", {"--disable-playground"});
  ASSERT_GT(disabled.port(), 0);
  for (const char* path : {"/", "/playground"}) {
    Page page = get_page(disabled, path);
    EXPECT_EQ(page.status, 404) << path;
    EXPECT_NE(page.body.find("no route GET " + std::string(path)), std::string::npos) << page.body;
  }
  HttpResult models = curl(disabled, "/v1/models", std::nullopt);
  ASSERT_EQ(models.status, 200);
  const std::vector<std::string> endpoints = strings(Json::parse(models.body)["data"][0]["omnistage"]["endpoints"]);
  EXPECT_FALSE(contains(endpoints, "GET /"));
  EXPECT_TRUE(contains(endpoints, "POST /v1/chat/completions"));
}

TEST_F(TextPlaygroundTest, BrowserChatStreamsAReplyAndShowsTheApiErrors) {
  SKIP_WITHOUT_BROWSER();
  Json out = browse(*server_, "chat");
  ASSERT_TRUE(out.is_object());
  // Without the key, the page shows the server's 401 as it came.
  EXPECT_EQ(out["banner_head"], "HTTP 401 · unauthorized");
  EXPECT_EQ(out["banner_message"], "missing API key: send 'Authorization: Bearer <key>'");
  EXPECT_EQ(out["stored_key"], kApiKey);
  // Once the key is given, every /v1 request carries it.
  int v1_requests = 0;
  for (const Json& request : out["requests"]) {
    const std::string url = request["url"];
    if (url.find("/v1/") == std::string::npos) continue;
    if (++v1_requests == 1) {
      EXPECT_TRUE(request["authorization"].is_null()) << "the first /v1/models goes out without a key";
    } else {
      EXPECT_EQ(request["authorization"], std::string("Bearer ") + kApiKey) << url;
    }
  }
  EXPECT_GE(v1_requests, 4);
  EXPECT_EQ(out["tabs"], Json({"chat"}));
  EXPECT_EQ(out["chat_visible"], true);
  EXPECT_EQ(out["speech_visible"], false);
  EXPECT_EQ(out["spoken_visible"], false) << "a text-only pipeline has no spoken replies";
  EXPECT_EQ(out["model"], kModelName);
  EXPECT_NE(out["server_info"].get<std::string>().find("pipeline qwen3 · produces text"), std::string::npos);

  // The streamed reply arrived in several updates and equals the same greedy request unstreamed.
  const Json& streamed = out["streamed"];
  EXPECT_EQ(streamed["state"], "done") << streamed.dump();
  ASSERT_EQ(out["non_streamed"]["status"], 200) << out["non_streamed"].dump();
  const std::string expected = out["non_streamed"]["body"]["choices"][0]["message"]["content"];
  EXPECT_FALSE(expected.empty());
  EXPECT_EQ(streamed["content"], expected);
  EXPECT_GE(streamed["updates"].get<int>(), 3) << "the text appeared incrementally";
  EXPECT_GE(streamed["mutations"].get<int>(), streamed["updates"].get<int>());
  EXPECT_NE(streamed["meta"].get<std::string>().find("finish: length"), std::string::npos) << streamed["meta"];

  // top_p 1.5: the page shows the API's own status, type, field and message.
  const Json& bad = out["bad"];
  const Json& direct = out["bad_direct"];
  EXPECT_EQ(bad["state"], "error");
  ASSERT_EQ(direct["status"], 400);
  EXPECT_EQ(bad["error_head"], "HTTP 400 · " + direct["body"]["error"]["type"].get<std::string>() + " · param: top_p");
  EXPECT_EQ(bad["error_message"], direct["body"]["error"]["message"]);
  EXPECT_TRUE(fs::exists(kArtifacts / "playground-chat.png"));

  // Attachments go out as OpenAI content parts after the text.
  EXPECT_EQ(out["attachment_chips"], Json({"image: dot.png", "audio: tone.wav"}));
  const Json& content = out["media_content"];
  ASSERT_EQ(content.size(), 3u) << content.dump();
  EXPECT_EQ(content[0], Json({{"type", "text"}, {"text", "What is in these?"}}));
  EXPECT_EQ(content[1]["type"], "image_url");
  const std::string image_url = content[1]["image_url"]["url"];
  EXPECT_EQ(base64_decode(image_url.substr(image_url.find(',') + 1)).substr(1, 3), "PNG");
  EXPECT_EQ(image_url.rfind("data:image/png;base64,", 0), 0u);
  EXPECT_EQ(content[2]["type"], "input_audio");
  EXPECT_EQ(content[2]["input_audio"]["format"], "wav");
  const std::string wav = base64_decode(content[2]["input_audio"]["data"].get<std::string>());
  EXPECT_EQ(wav.substr(0, 4), "RIFF");
  EXPECT_EQ(wav.size(), 44u + 3200u);
  // The text model's answer to them, whatever it is, is what the page shows.
  const Json& media = out["with_media"];
  const Json& media_direct = out["media_direct"];
  if (media_direct["status"] == 200) {
    EXPECT_EQ(media["state"], "done");
    EXPECT_EQ(media["content"], media_direct["body"]["choices"][0]["message"]["content"]);
  } else {
    EXPECT_EQ(media["state"], "error");
    EXPECT_EQ(media["error_message"], media_direct["body"]["error"]["message"]);
  }
}

TEST_F(SpeechPlaygroundTest, BrowserSpeechPlaysAsItStreamsAndShowsTheApiErrors) {
  SKIP_WITHOUT_BROWSER();
  Json out = browse(*server_, "speech");
  ASSERT_TRUE(out.is_object());
  EXPECT_EQ(out["tabs"], Json({"speech"}));
  EXPECT_EQ(out["speech_visible"], true);
  EXPECT_EQ(out["chat_visible"], false);
  EXPECT_EQ(out["voice_upload_visible"], false) << "the server has no POST /v1/audio/voices";
  EXPECT_EQ(out["voices"], Json({"aiden", "dylan", "eric", "ryan", "serena", "vivian"}));
  EXPECT_EQ(out["task"], "CustomVoice");

  // Streamed WAV: bytes arrived and Web Audio scheduled them; the kept clip has its real length.
  const Json& streamed = out["streamed"];
  EXPECT_EQ(streamed["state"], "done") << streamed.dump();
  EXPECT_GT(streamed["bytes"].get<int>(), 44);
  EXPECT_GT(streamed["streamed_seconds"].get<double>(), 0.0);
  EXPECT_NEAR(streamed["duration"].get<double>(), streamed["streamed_seconds"].get<double>(), 0.01);
  // At most 10 frames of 80 ms.
  EXPECT_LE(streamed["streamed_seconds"].get<double>(), 0.8 + 1e-6);
  EXPECT_NE(streamed["stats"].get<std::string>().find("wav, streamed"), std::string::npos) << streamed["stats"];

  // mp3, whole: the audio element decoded it and played it.
  const Json& whole = out["whole"];
  EXPECT_EQ(whole["state"], "done") << whole.dump();
  EXPECT_GT(whole["bytes"].get<int>(), 0);
  EXPECT_GT(whole["duration"].get<double>(), 0.0);
  EXPECT_EQ(out["whole_playing"], true);
  EXPECT_EQ(whole["history"], 2);

  // speed 2 with stream: refused by the API, shown as it answered.
  const Json& bad = out["bad"];
  const Json& direct = out["bad_direct"];
  EXPECT_EQ(bad["state"], "error");
  ASSERT_EQ(direct["status"], 400);
  EXPECT_EQ(bad["error_head"], "HTTP 400 · " + direct["body"]["error"]["type"].get<std::string>() + " · param: speed");
  EXPECT_EQ(bad["error_message"], direct["body"]["error"]["message"]);
  EXPECT_NE(bad["error_message"].get<std::string>().find("cannot be streamed"), std::string::npos);
  EXPECT_TRUE(fs::exists(kArtifacts / "playground-speech.png"));
}

// Image output, voice upload and spoken chat replies exist in no served pipeline yet: the browser
// extends the server's real /v1/models answer and answers the image and chat requests itself, to
// check what the page shows, the requests it sends and how it plays vLLM-Omni's audio chunks.
TEST_F(SpeechPlaygroundTest, BrowserPanelsFollowTheAdvertisedOutputsAndEndpoints) {
  SKIP_WITHOUT_BROWSER();
  Json out = browse(*server_, "panels");
  ASSERT_TRUE(out.is_object());
  EXPECT_EQ(out["image_tabs"], Json({"images"}));
  EXPECT_EQ(out["custom_size_visible"], false);
  ASSERT_EQ(out["image_requests"].size(), 1u);
  EXPECT_EQ(out["image_requests"][0]["authorization"], std::string("Bearer ") + kApiKey);
  EXPECT_EQ(out["image_requests"][0]["body"], Json({{"model", kModelName},
                                                    {"prompt", "a red square"},
                                                    {"size", "512x512"},
                                                    {"response_format", "b64_json"},
                                                    {"n", 2},
                                                    {"num_inference_steps", 8},
                                                    {"seed", 42}}));
  ASSERT_EQ(out["gallery"].size(), 2u);
  EXPECT_EQ(out["gallery"][0]["width"], 1);
  EXPECT_EQ(out["gallery"][0]["alt"], "a red square");
  EXPECT_EQ(out["upload_tabs"], Json({"speech"}));
  EXPECT_EQ(out["voice_upload_visible"], true);

  // Text and audio output: the chat asks for both and plays the audio chunk of the stream.
  EXPECT_EQ(out["spoken_tabs"], Json({"chat"}));
  EXPECT_EQ(out["spoken_visible"], true);
  EXPECT_EQ(out["spoken_request"]["modalities"], Json({"text", "audio"}));
  EXPECT_EQ(out["spoken"]["state"], "done") << out["spoken"].dump();
  EXPECT_EQ(out["spoken"]["content"], "Hi there");
  EXPECT_NEAR(out["spoken_audio_seconds"].get<double>(), 0.1, 0.01);
}

}  // namespace
}  // namespace omni::testing
