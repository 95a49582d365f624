// Seconds per Z-Image image on one device (docs/performance.md): writes a random-weight checkpoint
// in the released shapes when --model does not hold one yet (model/z_image/random_checkpoint.h), loads
// it onto --device in --dtype and generates --images images of --size x --size at --steps steps
// without CFG (Z-Image-Turbo's settings), prompt to 8-bit RGB, each from fresh seeded noise. The
// first image is the warm-up (cuBLASLt plans, the caching allocator's first blocks). Prints one JSON
// object: the load time and, per image, the text encoder, denoise and VAE decode seconds. With
// --batches "4,8", then one round per size of that many requests batched as the diffusion engine
// batches them (all started, stepped together one denoising step at a time, each decoded): the
// round's seconds and images per second. On CUDA the transformer's steps replay CUDA graphs
// recorded once per step shape (the first image records them) unless --enforce-eager; the report's
// "cuda_graphs" says which path ran (false also when a recording failed and the steps fell back) and
// "graph_captures" / "graph_replays" count the recordings and their replays.
//
//   z_image_bench --model DIR --tokenizer-from QWEN3_TOKENIZER_DIR [--device cuda] [--dtype bfloat16]
//       [--size 1024] [--steps 8] [--images 4] [--guidance 0] [--batches 4,8] [--enforce-eager]
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "base/json.h"
#include "model/model_dtype.h"
#include "model/z_image/image_model.h"
#include "model/z_image/random_checkpoint.h"
#include "tensor/backend.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Z-Image seconds per image");
  std::string model_dir, tokenizer_dir, device_name = "cuda", dtype_name = "bfloat16";
  int size = 1024, steps = 8, images = 4;
  float guidance = 0.0f;
  std::vector<int> batches;
  bool enforce_eager = false;
  app.add_option("--model", model_dir, "Checkpoint folder (written with the released shapes when empty)")->required();
  app.add_option("--tokenizer-from", tokenizer_dir, "Qwen3 tokenizer.json + tokenizer_config.json, for writing");
  app.add_option("--device", device_name, "cpu, cuda or cuda:N")->capture_default_str();
  app.add_option("--dtype", dtype_name, "bfloat16, float16 or float32")->capture_default_str();
  app.add_option("--size", size, "Image side in pixels")->capture_default_str();
  app.add_option("--steps", steps, "Denoising steps")->capture_default_str();
  app.add_option("--images", images, "Images, the first a warm-up")->capture_default_str();
  app.add_option("--guidance", guidance, "guidance_scale (> 0 runs CFG)")->capture_default_str();
  app.add_option("--batches", batches, "Batched rounds after the images: requests per round")->delimiter(',');
  app.add_flag("--enforce-eager", enforce_eager, "No CUDA graphs: launch the ops of each denoising step one by one");
  CLI11_PARSE(app, argc, argv);
  try {
    namespace fs = std::filesystem;
    omni::Json report = omni::Json::object();
    if (!fs::exists(fs::path(model_dir) / "model_index.json")) {
      const auto t0 = std::chrono::steady_clock::now();
      omni::model::z_image::write_random_checkpoint(model_dir, 1, tokenizer_dir, /*released_shapes=*/true);
      report["write_checkpoint_s"] = seconds_since(t0);
    }
    const omni::tensor::Device device = omni::tensor::resolve_device(device_name, "--device");
    const omni::tensor::DType dtype =
        omni::model::resolve_model_dtype(omni::model::parse_model_dtype(dtype_name, "--dtype"), "", device, model_dir);
    auto t0 = std::chrono::steady_clock::now();
    omni::model::z_image::ImageModel model(model_dir, {device, dtype});
    model.set_cuda_graphs(!enforce_eager);
    report["load_s"] = seconds_since(t0);
    report["size"] = size;
    report["steps"] = steps;
    report["guidance"] = guidance;
    report["dtype"] = omni::tensor::dtype_name(dtype);
    omni::Json per_image = omni::Json::array();
    for (int i = 0; i < images; ++i) {
      omni::model::ImageRequest request;
      request.prompt = "a red fox in the snow";
      request.height = size;
      request.width = size;
      request.num_inference_steps = steps;
      request.guidance_scale = guidance;
      request.seed = 1 + static_cast<uint64_t>(i);
      t0 = std::chrono::steady_clock::now();
      auto job = model.start(request);
      const double encode_s = seconds_since(t0);
      t0 = std::chrono::steady_clock::now();
      omni::model::DenoiseJob* jobs[] = {job.get()};
      while (!job->finished()) model.step(jobs);
      const double denoise_s = seconds_since(t0);
      t0 = std::chrono::steady_clock::now();
      const omni::model::RgbImage image = model.decode(*job);
      const double decode_s = seconds_since(t0);
      per_image.push_back({{"text_encoder_s", encode_s},
                           {"denoise_s", denoise_s},
                           {"vae_decode_s", decode_s},
                           {"total_s", encode_s + denoise_s + decode_s},
                           {"pixels", image.pixels.size()}});
    }
    report["images"] = per_image;
    omni::Json rounds = omni::Json::array();
    for (const int n : batches) {
      t0 = std::chrono::steady_clock::now();
      std::vector<std::unique_ptr<omni::model::DenoiseJob>> owned;
      std::vector<omni::model::DenoiseJob*> jobs;
      for (int i = 0; i < n; ++i) {
        omni::model::ImageRequest request;
        request.prompt = "a red fox in the snow";
        request.height = size;
        request.width = size;
        request.num_inference_steps = steps;
        request.guidance_scale = guidance;
        request.seed = 100 + static_cast<uint64_t>(i);
        owned.push_back(model.start(request));
        jobs.push_back(owned.back().get());
      }
      while (!owned.back()->finished()) model.step(jobs);
      for (const auto& job : owned) model.decode(*job);
      const double round_s = seconds_since(t0);
      rounds.push_back({{"batch", n}, {"seconds", round_s}, {"images_per_s", n / round_s}});
    }
    if (!batches.empty()) report["batched"] = rounds;
    const auto graphs = model.transformer().graph_counts();
    report["enforce_eager"] = enforce_eager;
    report["cuda_graphs"] = model.transformer().uses_cuda_graphs() && graphs.replays > 0;
    report["graph_captures"] = graphs.captures;
    report["graph_replays"] = graphs.replays;
    std::printf("%s\n", report.dump().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "z_image_bench: %s\n", e.what());
    return 1;
  }
}
