// `omnistage serve` of a Qwen3-TTS Base demo checkpoint (`demo-model --arch qwen3_tts --task base`:
// random talker, codec, speaker-encoder and speech-tokenizer-encoder weights) end to end with curl:
// x-vector voice cloning from inline, local-file and bad reference audio (400 naming ref_audio),
// in-context cloning with ref_text (no reference audio in the reply; 400 naming ref_text without
// it), the speaker-embedding and reference-code caches in /metrics, the voices API (upload as audio or as an embedding,
// use by name in context and x-vector only, list, delete, names validated) and its persistence across a restart
// (reference codes read back, or computed again when missing), the batch route with one bad item,
// and the speech WebSocket driven by the `ws` npm client (speech_stream_client.cjs).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "base/base64.h"
#include "base/json.h"
#include "integration/serve_process.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

namespace omni::testing {
namespace {

const fs::path kReference = fs::path(OMNI_SOURCE_DIR) / "tests/data/tiny_qwen3_tts_base/reference.wav";
constexpr int kMaxFrames = 4;

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A 16-bit mono WAV of `seconds` of a quiet tone at 16 kHz (the server resamples it).
std::string tone_wav(double seconds) {
  const uint32_t rate = 16000, n = static_cast<uint32_t>(seconds * rate);
  std::string data;
  for (uint32_t i = 0; i < n; ++i) {
    const auto v = static_cast<int16_t>(3000.0 * std::sin(i * 0.05));
    data.append(reinterpret_cast<const char*>(&v), 2);
  }
  auto u32 = [](uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); };
  auto u16 = [](uint16_t v) { return std::string(reinterpret_cast<const char*>(&v), 2); };
  return "RIFF" + u32(36 + static_cast<uint32_t>(data.size())) + "WAVEfmt " + u32(16) + u16(1) + u16(1) + u32(rate) +
         u32(rate * 2) + u16(2) + u16(16) + "data" + u32(static_cast<uint32_t>(data.size())) + data;
}

class VoiceCloneServeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<TempDir>();
    ProcessResult made = run_process({OMNISTAGE_BINARY, "demo-model", "--arch", "qwen3_tts", "--task", "base", "--out",
                                      (dir_->path() / "model").string()});
    ASSERT_EQ(made.exit_code, 0) << made.err;
    start();
  }
  // A fresh log per start: ServeProcess reads the port from its log.
  static void start() {
    server_.reset();
    server_ = std::make_unique<ServeProcess>(
        dir_->path() / "model", dir_->path() / fmt::format("serve{}.log", starts_++),
        std::vector<std::string>{"--voices-dir", (dir_->path() / "voices").string(), "--allowed-local-media-path",
                                 kReference.parent_path().string()});
  }
  static void TearDownTestSuite() {
    if (::testing::UnitTest::GetInstance()->failed_test_count() > 0 && server_) {
      std::cerr << "serve log:\n" << server_->log();
    }
    server_.reset();
    dir_.reset();
  }
  void SetUp() override { ASSERT_GT(server_->port(), 0) << "the server is not running"; }

  // POST `path` with `body` (through a file: bodies with inline audio exceed an argument's size).
  static HttpResult post(const std::string& path, Json body) {
    body["model"] = kModelName;
    const fs::path file = dir_->path() / "body.json";
    std::ofstream(file, std::ios::binary) << body.dump();
    return curl(*server_, path, std::nullopt,
                {"-H", "Content-Type: application/json", "--data-binary", "@" + file.string()});
  }
  static HttpResult speech(Json body) {
    if (!body.contains("max_new_tokens")) body["max_new_tokens"] = kMaxFrames;
    if (!body.contains("task_type")) body["task_type"] = "Base";
    return post("/v1/audio/speech", std::move(body));
  }
  static Json clone_body(const std::string& ref_audio, int seed = 7) {
    return {{"input", "Hello from a cloned voice."},
            {"ref_audio", ref_audio},
            {"x_vector_only_mode", true},
            {"seed", seed}};
  }
  static std::string data_url(const std::string& bytes) { return "data:audio/wav;base64," + base64_encode(bytes); }
  static HttpResult upload(const std::vector<std::string>& fields) {
    std::vector<std::string> args = {"-X", "POST"};
    for (const std::string& f : fields) args.insert(args.end(), {"-F", f});
    return curl(*server_, "/v1/audio/voices", std::nullopt, args);
  }
  static double metric(const std::string& name) {
    const HttpResult m = curl(*server_, "/metrics", std::nullopt);
    std::smatch match;
    if (!std::regex_search(m.body, match, std::regex("\n" + name + " ([0-9.e+]+)"))) return -1;
    return std::stod(match[1]);
  }
  static std::string param_of(const HttpResult& r) {
    const Json j = Json::parse(r.body);
    return j["error"]["param"].is_string() ? j["error"]["param"].get<std::string>() : "";
  }

  static inline std::unique_ptr<TempDir> dir_;
  static inline std::unique_ptr<ServeProcess> server_;
  static inline int starts_ = 0;
};

TEST_F(VoiceCloneServeTest, ClonesFromInlineAudioAndCachesTheEmbedding) {
  const std::string wav = data_url(file_bytes(kReference));
  const double misses = metric("omnistage:speaker_embedding_cache_misses_total");
  HttpResult first = speech(clone_body(wav));
  ASSERT_EQ(first.status, 200) << first.body;
  ASSERT_GT(first.body.size(), 44u);
  EXPECT_EQ(first.body.substr(0, 4), "RIFF");
  const double hits = metric("omnistage:speaker_embedding_cache_hits_total");
  HttpResult again = speech(clone_body(wav));
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_TRUE(again.body == first.body) << "same reference and seed, different audio";
  EXPECT_EQ(metric("omnistage:speaker_embedding_cache_hits_total"), hits + 1);
  EXPECT_EQ(metric("omnistage:speaker_embedding_cache_misses_total"), misses + 1);
  EXPECT_GE(metric("omnistage:speaker_embedding_cache_entries"), 1);
  // Bare base64 and a file under --allowed-local-media-path are the same audio.
  HttpResult bare = speech(clone_body(base64_encode(file_bytes(kReference))));
  ASSERT_EQ(bare.status, 200) << bare.body;
  EXPECT_TRUE(bare.body == first.body);
  HttpResult local = speech(clone_body("file://" + kReference.string()));
  ASSERT_EQ(local.status, 200) << local.body;
  EXPECT_TRUE(local.body == first.body);
  // Another voice gives other audio.
  HttpResult other = speech(clone_body(data_url(tone_wav(2.0))));
  ASSERT_EQ(other.status, 200) << other.body;
  EXPECT_FALSE(other.body == first.body);
}

// In-context cloning: the talker continues the reference's codes and transcript, and the code2wav
// stage decodes the reference frames only as left context, so the reply holds exactly the
// generated frames' audio (ignore_eos: kMaxFrames frames of 1920 samples) and none of the
// reference's 17 frames.
TEST_F(VoiceCloneServeTest, ClonesInContextWithNoReferenceAudioInTheReply) {
  const std::string wav = data_url(file_bytes(kReference));
  const Json body = {{"input", "Hello from a cloned voice."},
                     {"ref_audio", wav},
                     {"ref_text", "Two tones and a little noise."},
                     {"seed", 7},
                     {"ignore_eos", true},
                     {"response_format", "pcm"}};
  const double misses = metric("omnistage:reference_codes_cache_misses_total");
  HttpResult first = speech(body);
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(first.body.size(), static_cast<size_t>(kMaxFrames) * 1920 * 2);
  HttpResult again = speech(body);
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_TRUE(again.body == first.body) << "same reference, transcript and seed, different audio";
  EXPECT_EQ(metric("omnistage:reference_codes_cache_misses_total"), misses + 1);
  EXPECT_GE(metric("omnistage:reference_codes_cache_hits_total"), 1);
  EXPECT_GE(metric("omnistage:reference_codes_cache_entries"), 1);
  // The reference's codes and transcript condition the talker: the x-vector-only clone of the same
  // audio and seed, and the in-context clone with another transcript, sound different.
  Json xvector = body;
  xvector.erase("ref_text");
  xvector["x_vector_only_mode"] = true;
  HttpResult plain = speech(xvector);
  ASSERT_EQ(plain.status, 200) << plain.body;
  EXPECT_EQ(plain.body.size(), first.body.size());
  EXPECT_FALSE(plain.body == first.body);
  Json other_text = body;
  other_text["ref_text"] = "Something else entirely, said slowly.";
  HttpResult other = speech(other_text);
  ASSERT_EQ(other.status, 200) << other.body;
  EXPECT_EQ(other.body.size(), first.body.size());
  EXPECT_FALSE(other.body == first.body);
  // Streamed the same way: the SSE deltas carry the same samples.
  Json streamed = body;
  streamed["stream_format"] = "sse";
  HttpResult sse = speech(streamed);
  ASSERT_EQ(sse.status, 200) << sse.body;
  std::string pcm;
  std::regex delta("\"audio\":\"([A-Za-z0-9+/=]*)\"");
  for (auto it = std::sregex_iterator(sse.body.begin(), sse.body.end(), delta); it != std::sregex_iterator(); ++it) {
    pcm += base64_decode((*it)[1].str());
  }
  EXPECT_TRUE(pcm == first.body) << pcm.size() << " streamed bytes vs " << first.body.size();
}

// `omnistage bench serve --ref-audio A --ref-audio B --ref-text T` (the voice-clone benchmark): every
// request clones in context, request i from reference i mod 2, so one at a time the first use of
// each reference runs the encoders and every later one hits the caches.
TEST_F(VoiceCloneServeTest, BenchServeClonesFromEachReferenceInTurn) {
  const fs::path tone = dir_->path() / "tone.wav";
  std::ofstream(tone, std::ios::binary) << tone_wav(2.5);
  const fs::path result_file = dir_->path() / "bench_clone.json";
  const double code_misses = metric("omnistage:reference_codes_cache_misses_total");
  const double code_hits = metric("omnistage:reference_codes_cache_hits_total");
  const double embedding_misses = metric("omnistage:speaker_embedding_cache_misses_total");
  constexpr int kRequests = 4;
  ProcessResult run = run_process({OMNISTAGE_BINARY,
                                   "bench",
                                   "serve",
                                   "--base-url",
                                   server_->url(""),
                                   "--api-key",
                                   kApiKey,
                                   "--endpoint",
                                   "/v1/audio/speech",
                                   "--ref-audio",
                                   kReference.string(),
                                   "--ref-audio",
                                   tone.string(),
                                   "--ref-text",
                                   "Two tones and a little noise.",
                                   "--num-prompts",
                                   std::to_string(kRequests),
                                   "--max-concurrency",
                                   "1",
                                   "--random-input-len",
                                   "4",
                                   "--random-output-len",
                                   std::to_string(kMaxFrames),
                                   "--ignore-eos",
                                   "--seed",
                                   "3",
                                   "--result-file",
                                   result_file.string()});
  ASSERT_EQ(run.exit_code, 0) << run.err << run.out;
  const Json report = Json::parse(read_file(result_file));
  EXPECT_EQ(report["completed"], kRequests);
  EXPECT_EQ(report["failed"], 0) << report["errors"].dump();
  for (size_t i = 0; i < kRequests; ++i) {
    EXPECT_NEAR(report["audio_durations"][i].get<double>(), kMaxFrames * 0.08, 1e-9) << i;
  }
  // The probe request (reference A, the checked-in file) and the run's A, B, A, B: two misses,
  // then hits, or one miss when an earlier test cloned A in context already.
  const double new_code_misses = metric("omnistage:reference_codes_cache_misses_total") - code_misses;
  EXPECT_GE(new_code_misses, 1);
  EXPECT_LE(new_code_misses, 2);
  EXPECT_EQ(metric("omnistage:reference_codes_cache_hits_total") - code_hits, kRequests + 1 - new_code_misses);
  EXPECT_LE(metric("omnistage:speaker_embedding_cache_misses_total") - embedding_misses, 2);
  // In the measured run (after the probe) only the tone is new: one decode and one run of each
  // encoder, timed in the server's histograms.
  for (const char* part : {"decode", "speaker_encoder", "speech_tokenizer_encoder"}) {
    const std::string series = fmt::format("omnistage:voice_clone_encode_seconds{{part=\"{}\"}}", part);
    ASSERT_TRUE(report["server_time"].contains(series)) << series << " in " << report["server_time"].dump();
    EXPECT_EQ(report["server_time"][series]["count"], 1) << series;
    EXPECT_GT(report["server_time"][series]["mean_ms"].get<double>(), 0.0) << series;
  }
  // Bad flags are errors naming them, before any request.
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"--ref-audio", (dir_->path() / "missing.wav").string()},
        std::vector<std::string>{"--ref-text", "no audio"},
        std::vector<std::string>{"--ref-audio", tone.string(), "--voice", "vivian"},
        std::vector<std::string>{"--ref-audio", tone.string(), "--ref-text", "a", "--ref-text", "b", "--ref-text",
                                 "c"}}) {
    std::vector<std::string> argv = {OMNISTAGE_BINARY,   "bench",         "serve",   "--base-url", server_->url(""),
                                     "--api-key",        kApiKey,         "--model", kModelName,   "--endpoint",
                                     "/v1/audio/speech", "--num-prompts", "1"};
    argv.insert(argv.end(), bad.begin(), bad.end());
    ProcessResult r = run_process(argv);
    EXPECT_NE(r.exit_code, 0) << bad.front();
    EXPECT_NE(r.err.find(bad.front()), std::string::npos) << r.err;
  }
}

TEST_F(VoiceCloneServeTest, BadReferenceAudioIsA400NamingTheField) {
  for (const std::string& bad :
       {data_url("this is not audio"), std::string("@@not base64@@"), data_url(tone_wav(0.3)), data_url(tone_wav(61.0)),
        std::string("file:///etc/passwd"), std::string("http://127.0.0.1:1/ref.wav")}) {
    HttpResult r = speech(clone_body(bad));
    EXPECT_EQ(r.status, 400) << bad.substr(0, 60) << ": " << r.body;
    EXPECT_EQ(param_of(r), "ref_audio") << r.body;
  }
  HttpResult too_short = speech(clone_body(data_url(tone_wav(0.3))));
  EXPECT_NE(too_short.body.find("at least 1 s"), std::string::npos) << too_short.body;
  // x_vector_only_mode false (the default) clones in context, which needs the transcript.
  for (const Json& text : {Json(nullptr), Json("  ")}) {
    Json body = {{"input", "Hi"}, {"ref_audio", data_url(file_bytes(kReference))}};
    if (!text.is_null()) body["ref_text"] = text;
    HttpResult icl = speech(body);
    EXPECT_EQ(icl.status, 400) << icl.body;
    EXPECT_EQ(param_of(icl), "ref_text") << icl.body;
  }
  HttpResult icl_short = speech(
      {{"input", "Hi"}, {"ref_audio", data_url(tone_wav(0.3))}, {"ref_text", "Hi"}, {"x_vector_only_mode", false}});
  EXPECT_EQ(icl_short.status, 400) << icl_short.body;
  EXPECT_EQ(param_of(icl_short), "ref_audio") << icl_short.body;
  HttpResult icl_long = speech({{"input", "Hi"}, {"ref_audio", data_url(tone_wav(61.0))}, {"ref_text", "Hi"}});
  EXPECT_EQ(icl_long.status, 400) << icl_long.body;
  EXPECT_EQ(param_of(icl_long), "ref_audio") << icl_long.body;
  HttpResult none = speech({{"input", "Hi"}});
  EXPECT_EQ(none.status, 400) << none.body;
  HttpResult both = speech({{"input", "Hi"},
                            {"ref_audio", data_url(file_bytes(kReference))},
                            {"x_vector_only_mode", true},
                            {"speaker_embedding", std::vector<float>(64, 0.1f)}});
  EXPECT_EQ(both.status, 400) << both.body;
}

TEST_F(VoiceCloneServeTest, UploadedVoicesAreUsedByNameListedDeletedAndSurviveARestart) {
  const std::string wav = file_bytes(kReference);
  const fs::path sample = dir_->path() / "sample.wav";
  std::ofstream(sample, std::ios::binary) << wav;
  HttpResult up = upload({"name=Narrator", "consent=yes", "ref_text=hello", "speaker_description=calm",
                          "audio_sample=@" + sample.string()});
  ASSERT_EQ(up.status, 200) << up.body;
  EXPECT_EQ(Json::parse(up.body)["voice"]["embedding_source"], "audio");
  // Used by name, a voice stored with a ref_text clones in context from the codes computed at upload
  // (no encoder runs for the request): the same greedy audio as the inline in-context request with
  // the same audio and transcript.
  const Json narrator = {{"input", "Hello from a cloned voice."}, {"voice", "narrator"}, {"seed", 7}};
  const double code_misses = metric("omnistage:reference_codes_cache_misses_total");
  const double code_hits = metric("omnistage:reference_codes_cache_hits_total");
  HttpResult by_name = speech(narrator);
  ASSERT_EQ(by_name.status, 200) << by_name.body;
  EXPECT_EQ(metric("omnistage:reference_codes_cache_misses_total"), code_misses);
  EXPECT_EQ(metric("omnistage:reference_codes_cache_hits_total"), code_hits);
  const Json inline_icl = {
      {"input", "Hello from a cloned voice."}, {"ref_audio", data_url(wav)}, {"ref_text", "hello"}, {"seed", 7}};
  HttpResult inline_clone = speech(inline_icl);
  ASSERT_EQ(inline_clone.status, 200) << inline_clone.body;
  EXPECT_TRUE(by_name.body == inline_clone.body) << "by name and inline in-context clones differ";
  // x_vector_only_mode true: the x-vector clone of the same audio, which is other audio.
  Json xvector_by_name = narrator;
  xvector_by_name["x_vector_only_mode"] = true;
  HttpResult xvector = speech(xvector_by_name);
  ASSERT_EQ(xvector.status, 200) << xvector.body;
  HttpResult inline_xvector = speech(clone_body(data_url(wav)));
  ASSERT_EQ(inline_xvector.status, 200);
  EXPECT_TRUE(xvector.body == inline_xvector.body);
  EXPECT_FALSE(xvector.body == by_name.body);
  // A request's own ref_text replaces the stored one with x_vector_only_mode false; without it
  // (as vLLM-Omni) the voice clones from its x-vector.
  Json other_text = narrator;
  other_text["ref_text"] = "Two tones and a little noise.";
  HttpResult own_text_alone = speech(other_text);
  ASSERT_EQ(own_text_alone.status, 200) << own_text_alone.body;
  EXPECT_TRUE(own_text_alone.body == xvector.body);
  other_text["x_vector_only_mode"] = false;
  HttpResult own_text = speech(other_text);
  ASSERT_EQ(own_text.status, 200) << own_text.body;
  Json inline_other = inline_icl;
  inline_other["ref_text"] = other_text["ref_text"];
  HttpResult inline_own = speech(inline_other);
  ASSERT_EQ(inline_own.status, 200);
  EXPECT_TRUE(own_text.body == inline_own.body);
  // A voice uploaded without ref_text clones from its x-vector, and in context only with one.
  HttpResult plain_up = upload({"name=plain", "consent=yes", "audio_sample=@" + sample.string()});
  ASSERT_EQ(plain_up.status, 200) << plain_up.body;
  HttpResult plain = speech({{"input", "Hello from a cloned voice."}, {"voice", "plain"}, {"seed", 7}});
  ASSERT_EQ(plain.status, 200) << plain.body;
  EXPECT_TRUE(plain.body == inline_xvector.body);
  HttpResult plain_icl = speech({{"input", "Hi"}, {"voice", "plain"}, {"x_vector_only_mode", false}});
  EXPECT_EQ(plain_icl.status, 400) << plain_icl.body;
  EXPECT_EQ(param_of(plain_icl), "ref_text") << plain_icl.body;
  EXPECT_EQ(curl(*server_, "/v1/audio/voices/plain", std::nullopt, {"-X", "DELETE"}).status, 200);

  // Names are validated; duplicates and built-in clashes refused; exactly one source.
  EXPECT_EQ(param_of(upload({"name=../evil", "consent=yes", "audio_sample=@" + sample.string()})), "name");
  EXPECT_EQ(param_of(upload({"name=narrator", "consent=yes", "audio_sample=@" + sample.string()})), "name");
  EXPECT_EQ(param_of(upload({"name=x", "audio_sample=@" + sample.string()})), "consent");
  EXPECT_EQ(upload({"name=x", "consent=yes"}).status, 400);
  // An embedding upload: the model's width or 400.
  EXPECT_EQ(param_of(upload({"name=vec", "consent=yes", "speaker_embedding=[1, 2, 3]"})), "speaker_embedding");
  Json vector = std::vector<float>(64, 0.25f);
  HttpResult vec = upload({"name=vec", "consent=yes", "speaker_embedding=" + vector.dump()});
  ASSERT_EQ(vec.status, 200) << vec.body;
  EXPECT_EQ(speech({{"input", "Hi"}, {"voice", "vec"}}).status, 200);
  // It has no audio to clone in context from.
  HttpResult vec_icl =
      speech({{"input", "Hi"}, {"voice", "vec"}, {"ref_text", "hello"}, {"x_vector_only_mode", false}});
  EXPECT_EQ(vec_icl.status, 400) << vec_icl.body;
  EXPECT_EQ(param_of(vec_icl), "x_vector_only_mode") << vec_icl.body;

  Json listed = Json::parse(curl(*server_, "/v1/audio/voices", std::nullopt).body);
  EXPECT_EQ(listed["voices"], Json({"Narrator", "vec"}));
  ASSERT_EQ(listed["uploaded_voices"].size(), 2u);
  EXPECT_EQ(listed["uploaded_voices"][0]["ref_text"], "hello");
  EXPECT_EQ(listed["uploaded_voices"][0]["embedding_dim"], 64);

  // Restarted with the same --voices-dir, the voices are back, with the reference codes read back
  // from the folder (no encoder runs at start-up or for the request).
  start();
  ASSERT_GT(server_->port(), 0);
  listed = Json::parse(curl(*server_, "/v1/audio/voices", std::nullopt).body);
  EXPECT_EQ(listed["voices"], Json({"Narrator", "vec"}));
  HttpResult after = speech({{"input", "Hello from a cloned voice."}, {"voice", "Narrator"}, {"seed", 7}});
  ASSERT_EQ(after.status, 200) << after.body;
  EXPECT_TRUE(after.body == by_name.body);
  EXPECT_EQ(metric("omnistage:reference_codes_cache_misses_total"), 0);
  // A voice stored without codes (as before in-context cloning by name) gets them at start-up.
  const fs::path stored = dir_->path() / "voices" / "narrator.json";
  Json record = Json::parse(file_bytes(stored));
  ASSERT_TRUE(record.contains("ref_code")) << record.dump().substr(0, 300);
  EXPECT_EQ(record["ref_code"].size() % 16, 0u);
  EXPECT_GT(record["ref_code"].size(), 0u);
  record.erase("ref_code");
  std::ofstream(stored, std::ios::binary | std::ios::trunc) << record.dump();
  start();
  ASSERT_GT(server_->port(), 0);
  EXPECT_EQ(metric("omnistage:reference_codes_cache_misses_total"), 1);
  after = speech({{"input", "Hello from a cloned voice."}, {"voice", "Narrator"}, {"seed", 7}});
  ASSERT_EQ(after.status, 200) << after.body;
  EXPECT_TRUE(after.body == by_name.body);
  EXPECT_TRUE(Json::parse(file_bytes(stored)).contains("ref_code"));

  // Deleted, gone (and gone after another restart).
  HttpResult del = curl(*server_, "/v1/audio/voices/narrator", std::nullopt, {"-X", "DELETE"});
  EXPECT_EQ(del.status, 200) << del.body;
  EXPECT_EQ(curl(*server_, "/v1/audio/voices/narrator", std::nullopt, {"-X", "DELETE"}).status, 404);
  HttpResult gone = speech({{"input", "Hi"}, {"voice", "Narrator"}});
  EXPECT_EQ(gone.status, 400);
  EXPECT_EQ(param_of(gone), "voice");
  EXPECT_EQ(curl(*server_, "/v1/audio/voices/vec", std::nullopt, {"-X", "DELETE"}).status, 200);
  start();
  EXPECT_EQ(Json::parse(curl(*server_, "/v1/audio/voices", std::nullopt).body)["voices"], Json::array());
}

TEST_F(VoiceCloneServeTest, BatchWithOneBadItemFailsOnlyThatItem) {
  const Json body = {{"task_type", "Base"},
                     {"x_vector_only_mode", true},
                     {"ref_audio", data_url(file_bytes(kReference))},
                     {"max_new_tokens", kMaxFrames},
                     {"seed", 7},
                     {"items",
                      {{{"input", "Hello from a cloned voice."}},
                       {{"input", "   "}},
                       {{"input", "A second one."}, {"ref_audio", data_url("not audio")}},
                       {{"input", "A third one."}, {"response_format", "pcm"}}}}};
  HttpResult r = post("/v1/audio/speech/batch", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const Json j = Json::parse(r.body);
  EXPECT_EQ(j["total"], 4);
  EXPECT_EQ(j["succeeded"], 2);
  EXPECT_EQ(j["failed"], 2);
  ASSERT_EQ(j["results"].size(), 4u);
  EXPECT_EQ(j["results"][0]["status"], "success");
  EXPECT_EQ(j["results"][0]["media_type"], "audio/wav");
  EXPECT_EQ(j["results"][1]["status"], "error");
  EXPECT_NE(j["results"][1]["error"].get<std::string>().find("input"), std::string::npos);
  EXPECT_EQ(j["results"][2]["status"], "error");
  EXPECT_NE(j["results"][2]["error"].get<std::string>().find("ref_audio"), std::string::npos);
  EXPECT_EQ(j["results"][3]["status"], "success");
  // The batch's first item is the single request with the same fields.
  HttpResult single = speech(clone_body(data_url(file_bytes(kReference))));
  ASSERT_EQ(single.status, 200);
  EXPECT_TRUE(base64_decode(j["results"][0]["audio_data"].get<std::string>()) == single.body);
  EXPECT_EQ(post("/v1/audio/speech/batch", {{"items", Json::array()}}).status, 400);
}

// The speech WebSocket client's record of one scenario.
Json stream_client(const ServeProcess& server, const std::string& scenario, const Json& config = Json::object()) {
  std::string modules = std::string(OMNI_SOURCE_DIR) + "/third_party/npm/node_modules";
  // A developer's own node_modules with `ws`, before scripts/install-deps has put it in third_party/npm.
  if (const char* extra = std::getenv("OMNI_TEST_NODE_PATH")) modules += std::string(":") + extra;
  ProcessResult r = run_process(
      {"/usr/bin/node", std::string(OMNI_SOURCE_DIR) + "/tests/integration/speech_stream_client.cjs",
       "ws://127.0.0.1:" + std::to_string(server.port()) + "/v1/audio/speech/stream", kApiKey, scenario, config.dump()},
      {"NODE_PATH=" + modules});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0 ? Json::parse(r.out) : Json::object();
}

TEST_F(VoiceCloneServeTest, SpeechWebSocketSpeaksSentenceBySentence) {
  const Json config = {{"model", kModelName},
                       {"task_type", "Base"},
                       {"speaker_embedding", std::vector<float>(64, 0.2f)},
                       {"max_new_tokens", 3},
                       {"response_format", "pcm"},
                       {"stream_audio", true},
                       {"seed", 1}};
  Json out = stream_client(*server_, "speak", config);
  const Json& events = out["events"];
  std::vector<std::string> types, sentences;
  for (const Json& e : events) {
    types.push_back(e["type"]);
    if (e["type"] == "audio.start") sentences.push_back(e["sentence_text"]);
    if (e["type"] == "audio.done") {
      EXPECT_TRUE(e["error"].is_null()) << e.dump();
      EXPECT_EQ(e["total_bytes"], e["received_bytes"]) << e.dump();
      EXPECT_EQ(e["total_bytes"], 3 * 1920 * 2) << "3 frames of 16-bit PCM";
    }
  }
  EXPECT_EQ(types, (std::vector<std::string>{"session.configured", "audio.start", "audio.done", "audio.start",
                                             "audio.done", "audio.start", "audio.done", "session.done"}));
  EXPECT_EQ(sentences, (std::vector<std::string>{"Hello there.", "How are you today?", "Fine"}));
  EXPECT_EQ(out["close_code"], 1000);
  EXPECT_GE(out["binary_frames"], 3);

  // Without stream_audio: one WAV file per sentence.
  Json wav_config = config;
  wav_config.erase("stream_audio");
  wav_config["response_format"] = "wav";
  out = stream_client(*server_, "bad_json", wav_config);
  types.clear();
  for (const Json& e : out["events"]) types.push_back(e["type"]);
  EXPECT_EQ(types, (std::vector<std::string>{"session.configured", "error", "error", "audio.start", "audio.done",
                                             "session.done"}));
  EXPECT_EQ(out["binary_frames"], 1);
  EXPECT_EQ(out["events"][2]["param"], "type");

  // A first message that is not session.config, or a bad config: an error, then a normal close.
  out = stream_client(*server_, "bad_first");
  ASSERT_EQ(out["events"].size(), 1u);
  EXPECT_EQ(out["events"][0]["type"], "error");
  EXPECT_EQ(out["close_code"], 1000);
  Json bad = config;
  bad["response_format"] = "wav";
  out = stream_client(*server_, "speak", bad);
  ASSERT_GE(out["events"].size(), 1u);
  EXPECT_EQ(out["events"][0]["param"], "response_format") << out.dump();

  // A client that goes away mid-sentence: its request is aborted, nothing keeps running.
  Json long_config = config;
  long_config["max_new_tokens"] = 400;
  long_config["ignore_eos"] = true;
  const double aborted = metric("vllm:request_success_total\\{model_name=\"demo\",finished_reason=\"abort\"\\}");
  out = stream_client(*server_, "disconnect", long_config);
  EXPECT_EQ(out["closed_early"], true);
  double running = 1;
  for (int i = 0; i < 100 && running != 0; ++i) {
    std::this_thread::sleep_for(50ms);
    running = metric("vllm:num_requests_running\\{model_name=\"demo\"\\}");
  }
  EXPECT_EQ(running, 0);
  EXPECT_EQ(metric("vllm:request_success_total\\{model_name=\"demo\",finished_reason=\"abort\"\\}"),
            std::max(aborted, 0.0) + 1);
}

}  // namespace
}  // namespace omni::testing
