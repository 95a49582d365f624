// Z-Image on the CPU in float32 against diffusers' ZImagePipeline (float32, CPU) over the tiny
// random checkpoint of tests/data/tiny_z_image: every stage within 1e-4 of the largest reference
// value, the image within 1 per 8-bit channel.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>

#include "base/error.h"
#include "base/json.h"
#include "model/stage_model_registry.h"
#include "model/z_image/image_model.h"
#include "tensor/npy.h"

namespace omni::model::z_image {
namespace {

using tensor::Tensor;

const std::filesystem::path kData = std::filesystem::path(OMNI_SOURCE_DIR) / "tests/data/tiny_z_image";

ImageModel& model() {
  static ImageModel* m = new ImageModel(kData / "checkpoint");
  return *m;
}

Json reference_case(const std::string& name) {
  static const Json reference = read_json_file(kData / "reference.json");
  for (const Json& c : reference["cases"]) {
    if (c["name"] == name) return c;
  }
  ADD_FAILURE() << "no case " << name;
  return Json();
}

Tensor load(const std::string& file) { return tensor::load_npy(kData / file); }

// max |got - want| / max |want| over want's elements, with the shapes checked.
double relative_error(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.numel(), want.numel());
  double diff = 0.0, scale = 0.0;
  for (int64_t i = 0; i < std::min(got.numel(), want.numel()); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(got.data<float>()[i]) - want.data<float>()[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want.data<float>()[i])));
  }
  return diff / std::max(scale, 1e-30);
}

// Checks the relative error and records it in the test's XML output (--gtest_output).
void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  const double err = relative_error(got, want);
  ::testing::Test::RecordProperty(what, std::to_string(err));
  EXPECT_LE(err, 1e-4) << what;
}

// Row i of a [n, ...] tensor, as a tensor of the rest of the shape.
Tensor item(const Tensor& t, int64_t i) {
  tensor::Shape rest(t.shape().begin() + 1, t.shape().end());
  return t.slice_rows(i, i + 1).reshape(rest);
}

ImageRequest request_of(const Json& c) {
  ImageRequest r;
  r.prompt = c["prompt"];
  if (!c["negative_prompt"].is_null()) r.negative_prompt = c["negative_prompt"].get<std::string>();
  r.height = c["height"];
  r.width = c["width"];
  r.num_inference_steps = c["num_inference_steps"];
  r.guidance_scale = c["guidance_scale"].get<float>();
  r.max_sequence_length = c["max_sequence_length"];
  r.latents = load(c["name"].get<std::string>() + "_latents_init.npy");
  return r;
}

class ZImageCase : public ::testing::TestWithParam<std::string> {};

TEST_P(ZImageCase, ScheduleMatchesDiffusers) {
  const Json c = reference_case(GetParam());
  const Schedule s = make_schedule(model().config().scheduler, c["num_inference_steps"]);
  ASSERT_EQ(s.sigmas.size(), c["sigmas"].size());
  for (size_t i = 0; i < s.sigmas.size(); ++i) EXPECT_EQ(s.sigmas[i], c["sigmas"][i].get<float>()) << i;
  for (int i = 0; i < s.steps(); ++i) EXPECT_EQ(s.model_time(i), c["dit_t"][i].get<float>()) << i;
}

TEST_P(ZImageCase, TextEncoderFeatures) {
  const Json c = reference_case(GetParam());
  const std::string name = GetParam();
  std::vector<std::pair<std::string, std::string>> prompts = {{c["prompt"], ""}};
  if (c["cfg"].get<bool>())
    prompts.push_back({c["negative_prompt"].is_null() ? "" : c["negative_prompt"], "negative_"});
  for (const auto& [prompt, prefix] : prompts) {
    const std::vector<int32_t> ids = model().text_encoder().tokenize(prompt, c["max_sequence_length"]);
    const Tensor want_ids = load(name + "_" + prefix + "input_ids.npy");
    ASSERT_EQ(static_cast<int64_t>(ids.size()), want_ids.numel()) << prefix;
    for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(ids[i], want_ids.data<int64_t>()[i]) << prefix << i;
    const Tensor got = model().text_encoder().encode(ids);
    const Tensor want = load(name + "_" + prefix + "prompt_embeds.npy");
    EXPECT_EQ(got.shape(), want.shape());
    expect_close(got, want, prefix + "prompt_embeds");
  }
}

TEST_P(ZImageCase, TransformerFirstStep) {
  const Json c = reference_case(GetParam());
  const std::string name = GetParam();
  const Tensor latents = item(load(name + "_latents_init.npy"), 0);
  const Tensor want = load(name + "_transformer_step0.npy");
  const float t = c["dit_t"][0].get<float>();
  const Tensor cond = model().transformer().forward(latents, t, load(name + "_prompt_embeds.npy"));
  expect_close(cond, item(want, 0), "transformer_cond");
  if (c["cfg"].get<bool>()) {
    ASSERT_EQ(want.dim(0), 2);
    const Tensor uncond = model().transformer().forward(latents, t, load(name + "_negative_prompt_embeds.npy"));
    expect_close(uncond, item(want, 1), "transformer_uncond");
  }
}

TEST_P(ZImageCase, EveryStepAndTheImage) {
  const Json c = reference_case(GetParam());
  const std::string name = GetParam();
  const Tensor steps = load(name + "_latents_steps.npy");
  auto job = model().start(request_of(c));
  DenoiseJob* jobs[] = {job.get()};
  for (int i = 0; i < job->total_steps(); ++i) {
    model().step(jobs);
    expect_close(model().latents(*job), item(item(steps, i), 0), "latents_step" + std::to_string(i));
  }
  ASSERT_TRUE(job->finished());
  const RgbImage image = model().decode(*job);
  const Tensor want = load(name + "_image.npy");
  ASSERT_EQ(want.shape(), (tensor::Shape{image.height, image.width, 3}));
  int worst = 0;
  for (int64_t i = 0; i < want.numel(); ++i)
    worst = std::max(worst, std::abs(image.pixels[i] - want.data<int32_t>()[i]));
  RecordProperty("image_max_abs_diff", worst);
  EXPECT_LE(worst, 1);
}

TEST_P(ZImageCase, VaeDecodesTheReferenceLatents) {
  const std::string name = GetParam();
  const Tensor steps = load(name + "_latents_steps.npy");
  const Tensor last = item(item(steps, steps.dim(0) - 1), 0);
  const RgbImage image = ImageModel::to_rgb(model().vae().decode(last));
  const Tensor want = load(name + "_image.npy");
  int worst = 0;
  for (int64_t i = 0; i < want.numel(); ++i)
    worst = std::max(worst, std::abs(image.pixels[i] - want.data<int32_t>()[i]));
  EXPECT_LE(worst, 1);
}

INSTANTIATE_TEST_SUITE_P(Diffusers, ZImageCase, ::testing::Values("plain", "cfg", "cfg1_truncated"));

TEST(ZImage, BatchedStepsEqualSteppingAlone) {
  const Json c = reference_case("cfg");
  ImageRequest a = request_of(c);
  a.num_inference_steps = 2;
  ImageRequest b = a;
  b.latents = Tensor();
  b.seed = 7;
  b.prompt = "another prompt";
  auto alone = model().start(a);
  DenoiseJob* one[] = {alone.get()};
  model().step(one);
  model().step(one);
  auto x = model().start(a), y = model().start(b);
  DenoiseJob* both[] = {x.get(), y.get()};
  model().step(both);
  model().step(both);
  const Tensor la = model().latents(*alone), lx = model().latents(*x);
  EXPECT_EQ(0, std::memcmp(la.raw(), lx.raw(), la.nbytes()));
}

TEST(ZImage, SeedsGiveTheirOwnNoise) {
  const Tensor a = seeded_latents({16, 8, 8}, 1), b = seeded_latents({16, 8, 8}, 1), c = seeded_latents({16, 8, 8}, 2);
  EXPECT_EQ(0, std::memcmp(a.raw(), b.raw(), a.nbytes()));
  EXPECT_NE(0, std::memcmp(a.raw(), c.raw(), a.nbytes()));
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    sum += a.data<float>()[i];
    sq += a.data<float>()[i] * a.data<float>()[i];
  }
  EXPECT_NEAR(sum / a.numel(), 0.0, 0.15);
  EXPECT_NEAR(sq / a.numel(), 1.0, 0.2);
}

TEST(ZImage, RejectsBadRequests) {
  ImageRequest r;
  r.prompt = "x";
  r.num_inference_steps = 1;
  r.height = 60;  // not a multiple of 8
  r.width = 64;
  try {
    model().start(r);
    FAIL() << "accepted height 60";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("height must be a multiple of 8"), std::string::npos) << e.what();
  }
  r.height = 64;
  r.latents = Tensor::zeros({1, 16, 8, 8}, tensor::DType::kF32);
  try {
    model().start(r);
    FAIL() << "accepted latents of the wrong shape";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[1, 16, 16, 16]"), std::string::npos) << e.what();
  }
  r.latents = Tensor();
  r.width = 1024;  // more than the tiny model's RoPE tables place
  EXPECT_THROW(model().start(r), Error);
}

TEST(ZImage, CpuStepsRecordNoGraphs) {
  const Transformer& dit = model().transformer();
  EXPECT_FALSE(dit.uses_cuda_graphs());
  const Tensor caption = Tensor::zeros({3, dit.config().cap_feat_dim}, tensor::DType::kF32);
  dit.forward(seeded_latents({16, 4, 4}, 1), 0.5f, caption);
  const Transformer::GraphCounts counts = dit.graph_counts();
  EXPECT_EQ(counts.captures, 0);
  EXPECT_EQ(counts.replays, 0);
  EXPECT_EQ(counts.cached, 0u);
}

TEST(ZImage, StageModelTakesEnforceEager) {
  StageModelArgs args;
  args.model_dir = kData / "checkpoint";
  args.engine_args = Json{{"enforce_eager", true}};
  EXPECT_NE(builtin_stage_models().create_diffusion("z_image", args), nullptr);
  args.engine_args = Json{{"enforce_eager", "yes"}};
  try {
    builtin_stage_models().create_diffusion("z_image", args);
    FAIL() << "accepted enforce_eager \"yes\"";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidConfig);
    EXPECT_NE(std::string(e.what()).find("engine argument enforce_eager must be a boolean"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace omni::model::z_image
