// parse_image_generation_request: the fields of POST /v1/images/generations, their defaults, and
// a 400 naming the field for each bad value; image_generation_request: what reaches the stage.
#include "server/image_request.h"

#include <gtest/gtest.h>

#include "server/openai_error.h"

namespace omni::server {
namespace {

std::string field_of_failure(const Json& body) {
  try {
    parse_image_generation_request(body);
  } catch (const InvalidField& e) {
    return e.field();
  }
  return "(accepted)";
}

TEST(ImageRequestTest, DefaultsAndEveryField) {
  const ImageGenerationRequest plain = parse_image_generation_request({{"prompt", "a cat"}});
  EXPECT_EQ(plain.prompt, "a cat");
  EXPECT_EQ(plain.n, 1);
  EXPECT_EQ(plain.width, 0);
  EXPECT_EQ(plain.output_format, media::ImageFormat::kPng);
  EXPECT_FALSE(plain.seed);

  const ImageGenerationRequest r = parse_image_generation_request(
      {{"prompt", "p"}, {"n", 3}, {"size", "640x480"}, {"response_format", "b64_json"}, {"output_format", "webp"},
       {"negative_prompt", "q"}, {"num_inference_steps", 8}, {"guidance_scale", 0.0}, {"true_cfg_scale", 4.0},
       {"max_sequence_length", 256}, {"seed", 7}, {"quality", "high"}, {"user", "u"}, {"model", "m"}});
  EXPECT_EQ(r.n, 3);
  EXPECT_EQ(r.width, 640);
  EXPECT_EQ(r.height, 480);
  EXPECT_EQ(r.output_format, media::ImageFormat::kWebp);
  EXPECT_EQ(*r.negative_prompt, "q");
  EXPECT_EQ(*r.num_inference_steps, 8);
  EXPECT_EQ(*r.guidance_scale, 0.0);
  EXPECT_EQ(*r.true_cfg_scale, 4.0);
  EXPECT_EQ(*r.seed, 7u);
  EXPECT_EQ(parse_image_generation_request({{"prompt", "p"}, {"size", "auto"}}).width, 0);

  const runtime::GenerationRequest g = image_generation_request(r, "img-1", 9);
  EXPECT_EQ(g.request_id, "img-1");
  EXPECT_EQ(g.output_modalities, std::vector<std::string>{"image"});
  EXPECT_EQ(g.additional_information["prompt"], "p");
  EXPECT_EQ(g.additional_information["negative_prompt"], "q");
  EXPECT_EQ(g.sampling_params["width"], 640);
  EXPECT_EQ(g.sampling_params["height"], 480);
  EXPECT_EQ(g.sampling_params["seed"], 9);
  EXPECT_EQ(g.sampling_params["num_inference_steps"], 8);
  EXPECT_FALSE(image_generation_request(plain, "x", 1).sampling_params.contains("width"));
}

TEST(ImageRequestTest, BadFieldsAreNamed) {
  EXPECT_EQ(field_of_failure(Json::object()), "prompt");
  EXPECT_EQ(field_of_failure({{"prompt", ""}}), "prompt");
  EXPECT_EQ(field_of_failure({{"prompt", 3}}), "prompt");
  for (const char* size : {"1024", "x1024", "1024x", "0x64", "64x-8", "64X64", "64x64x2", " 64x64"}) {
    EXPECT_EQ(field_of_failure({{"prompt", "p"}, {"size", size}}), "size") << size;
  }
  EXPECT_EQ(field_of_failure({{"prompt", "p"}, {"n", 0}}), "n");
  EXPECT_EQ(field_of_failure({{"prompt", "p"}, {"n", 11}}), "n");
  EXPECT_EQ(field_of_failure({{"prompt", "p"}, {"response_format", "url"}}), "response_format");
  EXPECT_EQ(field_of_failure({{"prompt", "p"}, {"output_format", "gif"}}), "output_format");
  EXPECT_EQ(field_of_failure({{"prompt", "p"}, {"output_format", "jpg"}}), "output_format");
  EXPECT_EQ(field_of_failure({{"prompt", "p"}, {"num_inference_steps", 0}}), "num_inference_steps");
  EXPECT_EQ(field_of_failure({{"prompt", "p"}, {"guidance_scale", -1}}), "guidance_scale");
  EXPECT_EQ(field_of_failure({{"prompt", "p"}, {"seed", -1}}), "seed");
}

}  // namespace
}  // namespace omni::server
