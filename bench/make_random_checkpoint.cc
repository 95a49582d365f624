// Writes a random-weight Qwen3-shaped checkpoint for the benchmarks of docs/performance.md (no
// download needed):
//   build/bench/make_random_checkpoint --out /tmp/qwen3-0.6b-random [--shape qwen3-0.6b|qwen3-8b]
//       [--seed 1] [--dtype bf16]
#include <CLI/CLI.hpp>
#include <cstdio>

#include "base/error.h"
#include "model/random_checkpoint.h"

int main(int argc, char** argv) {
  CLI::App app{"Write a random-weight checkpoint with Qwen3-0.6B's or Qwen3-8B's shapes"};
  std::string out;
  uint64_t seed = 1;
  std::string dtype = "bf16";
  std::string shape = "qwen3-0.6b";
  app.add_option("--out", out, "Folder to write (config.json, generation_config.json, model.safetensors)")->required();
  app.add_option("--seed", seed, "Seed of the weights");
  app.add_option("--dtype", dtype, "On-disk dtype")->check(CLI::IsMember({"bf16", "f32"}));
  app.add_option("--shape", shape, "Model shapes")->check(CLI::IsMember({"qwen3-0.6b", "qwen3-8b"}));
  CLI11_PARSE(app, argc, argv);
  try {
    omni::model::write_random_qwen3_checkpoint(
        out, shape == "qwen3-8b" ? omni::model::qwen3_8b_shapes() : omni::model::qwen3_0_6b_shapes(), seed,
        dtype == "bf16" ? omni::tensor::DType::kBF16 : omni::tensor::DType::kF32);
  } catch (const omni::Error& e) {
    std::fprintf(stderr, "make_random_checkpoint: %s\n", e.what());
    return e.exit_code();
  }
  std::printf("wrote %s\n", out.c_str());
  return 0;
}
