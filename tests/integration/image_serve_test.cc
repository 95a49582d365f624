// `omnistage serve` of the tiny Z-Image checkpoint (tests/data/tiny_z_image) end to end: the real
// binary with its diffusion stage process, POST /v1/images/generations through curl and the
// official OpenAI client, images decoded back with FFmpeg. n = 2 gives two different images, a seed
// gives the same image alone or batched, the formats decode, bad sizes and fields are 400s naming
// the field, and with --step-execution an abort stops a request between denoising steps.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "base/base64.h"
#include "base/json.h"
#include "integration/serve_process.h"
#include "media/image_decoder.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

namespace omni::testing {
namespace {

const fs::path kCheckpoint = fs::path(OMNI_SOURCE_DIR) / "tests/data/tiny_z_image/checkpoint";

class ImageServeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<TempDir>();
    server_ = std::make_unique<ServeProcess>(kCheckpoint, dir_->path() / "serve.log",
                                             std::vector<std::string>{"--step-execution", "--request-batch-max-wait-ms",
                                                                      "5", "--max-generated-image-size", "65536"});
  }
  static void TearDownTestSuite() {
    server_.reset();
    dir_.reset();
  }

  static HttpResult generate(Json body, std::vector<std::string> extra = {}) {
    body["model"] = kModelName;
    return curl(*server_, "/v1/images/generations", body.dump(), std::move(extra));
  }
  static std::vector<std::string> images_of(const HttpResult& reply) {
    std::vector<std::string> out;
    const Json json = Json::parse(reply.body);
    for (const Json& d : json["data"]) out.push_back(base64_decode(d["b64_json"].get<std::string>()));
    return out;
  }

  static inline std::unique_ptr<TempDir> dir_;
  static inline std::unique_ptr<ServeProcess> server_;
};

TEST_F(ImageServeTest, ModelsListTheImagePipeline) {
  const HttpResult reply = curl(*server_, "/v1/models", std::nullopt);
  ASSERT_EQ(reply.status, 200) << reply.body;
  const Json card = Json::parse(reply.body)["data"][0];
  EXPECT_EQ(card["id"], kModelName);
  EXPECT_EQ(card["omnistage"]["pipeline"], "z_image");
  EXPECT_EQ(card["omnistage"]["output_modalities"], Json::array({"image"}));
}

TEST_F(ImageServeTest, TwoImagesDifferAndSeedsReproduceAloneOrBatched) {
  const Json body = {{"prompt", "a red fox in the snow"},
                     {"n", 2},
                     {"size", "64x48"},
                     {"num_inference_steps", 2},
                     {"guidance_scale", 0},
                     {"seed", 40}};
  const HttpResult reply = generate(body);
  ASSERT_EQ(reply.status, 200) << reply.body;
  const Json json = Json::parse(reply.body);
  EXPECT_EQ(json["size"], "64x48");
  EXPECT_EQ(json["output_format"], "png");
  const std::vector<std::string> two = images_of(reply);
  ASSERT_EQ(two.size(), 2u);
  const DecodedImage first = decode_image(two[0]), second = decode_image(two[1]);
  EXPECT_EQ(first.codec, "png");
  EXPECT_EQ(first.width, 64);
  EXPECT_EQ(first.height, 48);
  EXPECT_NE(first.rgb, second.rgb) << "n = 2 must give two different images";
  // Image 1 of that request has seed 41: alone it must be the same.
  Json alone = body;
  alone["n"] = 1;
  alone["seed"] = 41;
  const HttpResult again = generate(alone);
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(decode_image(images_of(again)[0]).rgb, second.rgb) << "a seed's image must not depend on its batch";
}

// The offline command and the API share defaults and seeded noise: the same request through
// `omnistage generate` and through the server gives the same image (both PNG, so the same bytes).
TEST_F(ImageServeTest, GenerateGivesTheApisImageForTheSameSeed) {
  const HttpResult reply = generate({{"prompt", "a lighthouse at dusk"},
                                     {"size", "48x32"},
                                     {"seed", 7},
                                     {"num_inference_steps", 2},
                                     {"negative_prompt", "blurry"},
                                     {"guidance_scale", 3}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  const fs::path png = dir_->path() / "offline.png";
  const ProcessResult offline = run_process({OMNISTAGE_BINARY,
                                             "generate",
                                             "--model",
                                             kCheckpoint.string(),
                                             "--prompt",
                                             "a lighthouse at dusk",
                                             "--width",
                                             "48",
                                             "--height",
                                             "32",
                                             "--seed",
                                             "7",
                                             "--num-inference-steps",
                                             "2",
                                             "--negative-prompt",
                                             "blurry",
                                             "--guidance-scale",
                                             "3",
                                             "--output-image",
                                             png.string()});
  ASSERT_EQ(offline.exit_code, 0) << offline.err;
  std::ifstream in(png, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const DecodedImage api = decode_image(images_of(reply)[0]), cli = decode_image(bytes);
  EXPECT_EQ(cli.width, 48);
  EXPECT_EQ(cli.height, 32);
  EXPECT_EQ(cli.rgb, api.rgb) << "generate and /v1/images/generations differ for seed 7";
  // A different seed is a different image (the comparison above can fail).
  const HttpResult other = generate({{"prompt", "a lighthouse at dusk"},
                                     {"size", "48x32"},
                                     {"seed", 8},
                                     {"num_inference_steps", 2},
                                     {"negative_prompt", "blurry"},
                                     {"guidance_scale", 3}});
  ASSERT_EQ(other.status, 200) << other.body;
  EXPECT_NE(decode_image(images_of(other)[0]).rgb, cli.rgb);
}

TEST_F(ImageServeTest, JpegAndWebpDecode) {
  for (const std::string format : {"jpeg", "webp"}) {
    const HttpResult reply = generate({{"prompt", "a cat"},
                                       {"size", "32x32"},
                                       {"num_inference_steps", 1},
                                       {"guidance_scale", 1.5},
                                       {"negative_prompt", "a dog"},
                                       {"seed", 1},
                                       {"output_format", format}});
    ASSERT_EQ(reply.status, 200) << reply.body;
    const DecodedImage image = decode_image(images_of(reply)[0]);
    EXPECT_EQ(image.codec, format == "jpeg" ? "mjpeg" : "webp");
    EXPECT_EQ(image.width, 32);
    EXPECT_EQ(image.height, 32);
  }
}

TEST_F(ImageServeTest, BadRequestsAre400sNamingTheField) {
  struct Case {
    Json body;
    std::string message_part;
  };
  const std::vector<Case> cases = {
      {{{"prompt", "x"}, {"size", "60x64"}}, "width must be a multiple of 8"},
      {{{"prompt", "x"}, {"size", "64 by 64"}}, "size must be 'WIDTHxHEIGHT'"},
      {{{"prompt", "x"}, {"size", "512x512"}}, "more than max_generated_image_size 65536"},
      {{{"prompt", "x"}, {"response_format", "url"}}, "response_format 'url' is not supported"},
      {{{"prompt", "x"}, {"output_format", "gif"}}, "output_format must be png, jpeg or webp"},
      {{{"prompt", "x"}, {"n", 11}}, "n"},
      {{{"prompt", ""}}, "prompt is required"},
  };
  for (const Case& c : cases) {
    const HttpResult reply = generate(c.body);
    EXPECT_EQ(reply.status, 400) << c.body.dump() << " -> " << reply.body;
    EXPECT_NE(reply.body.find(c.message_part), std::string::npos) << c.body.dump() << " -> " << reply.body;
  }
  EXPECT_EQ(generate({{"prompt", "still fine"}, {"size", "32x32"}, {"num_inference_steps", 1}}).status, 200);
}

TEST_F(ImageServeTest, OpenAiClientImagesGenerate) {
  const std::string modules = std::string(OMNI_SOURCE_DIR) + "/third_party/npm/node_modules";
  ASSERT_TRUE(fs::exists(modules + "/openai/package.json")) << "run scripts/install-deps";
  const ProcessResult result =
      run_process({"/usr/bin/node", std::string(OMNI_SOURCE_DIR) + "/tests/integration/image_client.cjs",
                   server_->url("/v1"), kModelName},
                  {"NODE_PATH=" + modules, std::string("OPENAI_API_KEY=") + kApiKey});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const Json out = Json::parse(result.out);
  ASSERT_EQ(out["images"].size(), 2u);
  const DecodedImage a = decode_image(base64_decode(out["images"][0].get<std::string>()));
  const DecodedImage b = decode_image(base64_decode(out["images"][1].get<std::string>()));
  EXPECT_EQ(a.width, 64);
  EXPECT_EQ(a.height, 48);
  EXPECT_NE(a.rgb, b.rgb);
  EXPECT_EQ(out["error_status"], 400);
  EXPECT_NE(out["error_message"].get<std::string>().find("multiple of 8"), std::string::npos);
}

TEST(ImageServeAbort, AbortStopsBetweenSteps) {
  // Its own server, so that its log is complete once it has exited (a stage's log lines are
  // flushed lazily). 1000 steps of a 128x128 image take a minute; the client gives up after 0.5 s
  // and the stage drops the request at the next step boundary once the server has seen the client
  // go (it aborts the requests of a closed connection).
  TempDir dir;
  ServeProcess server(kCheckpoint, dir.path() / "serve.log", {"--step-execution"});
  const auto post = [&](const Json& body, std::vector<std::string> extra = {}) {
    Json b = body;
    b["model"] = kModelName;
    return curl(server, "/v1/images/generations", b.dump(), std::move(extra));
  };
  const auto start = std::chrono::steady_clock::now();
  const HttpResult cut = post({{"prompt", "slow"}, {"size", "128x128"}, {"num_inference_steps", 1000}, {"seed", 2}},
                              {"--max-time", "0.5"});
  EXPECT_EQ(cut.status, 0) << "curl should have given up: " << cut.body;
  // The stage serves on: a short request right after it is answered long before the 1000 steps
  // could have run.
  EXPECT_EQ(post({{"prompt", "after"}, {"size", "32x32"}, {"num_inference_steps", 1}}).status, 200);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
  ASSERT_EQ(server.terminate(20s), 0);
  const std::string log = server.log();
  const std::regex aborted(R"(aborted after (\d+) of 1000 steps)");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m, aborted)) << log;
  EXPECT_LT(std::stoi(m[1]), 1000);
}

// Every denoising step reaches /metrics (omnistage:stage_step_seconds{part="denoise_step"}, one
// observation per step of the batch) and every image's decode (part "vae_decode"); without the
// profiler the reply's metrics carry no stage durations.
TEST_F(ImageServeTest, StepsReachTheMetricsAndNoStageDurationsWithoutTheProfiler) {
  const std::string steps = R"(omnistage:stage_step_seconds_count{stage="0",part="denoise_step"})";
  const std::string steps_sum = R"(omnistage:stage_step_seconds_sum{stage="0",part="denoise_step"})";
  const std::string decodes = R"(omnistage:stage_step_seconds_count{stage="0",part="vae_decode"})";
  const auto metrics = [] { return curl(*server_, "/metrics", std::nullopt).body; };
  const std::string before = metrics();
  const double steps_before = std::max(0.0, metric_series(before, steps));
  const double decodes_before = std::max(0.0, metric_series(before, decodes));
  const HttpResult reply =
      generate({{"prompt", "a red fox"}, {"size", "32x32"}, {"num_inference_steps", 3}, {"guidance_scale", 0}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  const Json json = Json::parse(reply.body);
  ASSERT_TRUE(json.contains("metrics")) << reply.body.substr(0, 200);
  EXPECT_TRUE(json["metrics"]["stage_durations"].is_null());
  EXPECT_TRUE(json["metrics"]["peak_memory_mb"].is_null());
  // The step timings travel with the stage's heartbeat, which may follow the reply.
  std::string after;
  for (int i = 0; i < 100; ++i) {
    after = metrics();
    if (metric_series(after, decodes) >= decodes_before + 1 && metric_series(after, steps) >= steps_before + 3) break;
    std::this_thread::sleep_for(50ms);
  }
  // At least: an earlier test's last heartbeat may land in between.
  EXPECT_GE(metric_series(after, steps), steps_before + 3) << after;
  EXPECT_GE(metric_series(after, decodes), decodes_before + 1) << after;
  EXPECT_GT(metric_series(after, steps_sum), 0.0) << after;
}

// --enable-diffusion-pipeline-profiler: the reply's metrics.stage_durations holds the phases under
// vLLM-Omni's names, added up over the n images, and the stage logs them. The same server decodes
// with --vae-use-tiling: an image larger than one tile of the tiny VAE (16 latents, 64 pixels) is
// the one `omnistage generate --vae-use-tiling` draws, and not the untiled one.
TEST(ImageServeProfiler, StageDurationsAndTiling) {
  TempDir dir;
  ServeProcess server(kCheckpoint, dir.path() / "serve.log",
                      {"--enable-diffusion-pipeline-profiler", "--vae-use-tiling"});
  Json body = {{"prompt", "a lighthouse"}, {"size", "96x80"},    {"n", 2}, {"seed", 5}, {"num_inference_steps", 2},
               {"guidance_scale", 2},      {"model", kModelName}};
  const HttpResult reply = curl(server, "/v1/images/generations", body.dump());
  ASSERT_EQ(reply.status, 200) << reply.body;
  const Json json = Json::parse(reply.body);
  const Json& durations = json["metrics"]["stage_durations"];
  ASSERT_TRUE(durations.is_object()) << json["metrics"].dump();
  for (const char* phase :
       {"ZImagePipeline.text_encoder.forward", "ZImagePipeline.diffuse", "ZImagePipeline.vae.decode"}) {
    ASSERT_TRUE(durations.contains(phase)) << durations.dump();
    EXPECT_GT(durations[phase].get<double>(), 0.0) << phase;
  }
  EXPECT_EQ(durations.size(), 3u) << durations.dump();
  EXPECT_TRUE(json["metrics"]["peak_memory_mb"].is_null());

  const auto offline = [&](bool tiled) {
    const fs::path png = dir.path() / (tiled ? "tiled.png" : "whole.png");
    std::vector<std::string> argv = {OMNISTAGE_BINARY,
                                     "generate",
                                     "--model",
                                     kCheckpoint.string(),
                                     "--prompt",
                                     "a lighthouse",
                                     "--width",
                                     "96",
                                     "--height",
                                     "80",
                                     "--seed",
                                     "5",
                                     "--num-inference-steps",
                                     "2",
                                     "--guidance-scale",
                                     "2",
                                     "--output-image",
                                     png.string()};
    if (tiled) argv.push_back("--vae-use-tiling");
    const ProcessResult r = run_process(argv);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::ifstream in(png, std::ios::binary);
    return decode_image(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>())).rgb;
  };
  const Json& first = json["data"][0];
  const auto api = decode_image(base64_decode(first["b64_json"].get<std::string>())).rgb;
  EXPECT_EQ(api, offline(true)) << "serve --vae-use-tiling and generate --vae-use-tiling differ";
  EXPECT_NE(api, offline(false)) << "the image should have been decoded in tiles";

  ASSERT_EQ(server.terminate(20s), 0);
  const std::string log = server.log();
  EXPECT_NE(log.find("[DiffusionPipelineProfiler]"), std::string::npos) << log;
  EXPECT_NE(log.find("ZImagePipeline.vae.decode took"), std::string::npos) << log;
}

}  // namespace
}  // namespace omni::testing
