#include "cli/demo_model.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <memory>
#include <string>

#include "base/error.h"
#include "model/random_checkpoint.h"

namespace omni::cli {

namespace {

namespace fs = std::filesystem;

struct DemoModelOptions {
  std::string arch = "qwen3";
  std::string out;
  std::string tokenizer_dir = OMNI_QWEN3_TOKENIZER_DIR;
  uint64_t seed = 0;
};

// Qwen3's real vocabulary (the tokenizer's ids must all be valid) with a tiny body: the tied
// embedding dominates (151936 x 128 bf16 = 39 MB), and a step costs about one 128 x 151936
// matrix-vector product, so it serves quickly on a couple of CPU cores.
model::TextModelConfig demo_qwen3_shapes() {
  model::TextModelConfig c = model::qwen3_0_6b_shapes();
  c.hidden_size = 128;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 32;
  c.intermediate_size = 384;
  c.eos_token_ids = {151645, 151643};  // <|im_end|>, <|endoftext|>, as Qwen3's generation_config.json
  return c;
}

int run_demo_model(const DemoModelOptions& options) {
  if (options.arch != "qwen3") {
    throw_error(ErrorCode::kInvalidArgument, "--arch {}: the demo model exists for qwen3 only", options.arch);
  }
  const fs::path tokenizer_dir(options.tokenizer_dir);
  for (const char* file : {"tokenizer.json", "tokenizer_config.json"}) {
    if (!fs::is_regular_file(tokenizer_dir / file)) {
      throw_error(ErrorCode::kNotFound,
                  "--tokenizer-from {}: no {} (run scripts/install-deps, which installs the Qwen3 tokenizer "
                  "files, or point --tokenizer-from at a Qwen3 checkpoint)",
                  options.tokenizer_dir, file);
    }
  }
  const fs::path out(options.out);
  model::write_random_qwen3_checkpoint(out, demo_qwen3_shapes(), options.seed, tensor::DType::kBF16);
  for (const char* file : {"tokenizer.json", "tokenizer_config.json"}) {
    std::error_code ec;
    fs::copy_file(tokenizer_dir / file, out / file, fs::copy_options::overwrite_existing, ec);
    if (ec)
      throw_error(ErrorCode::kInternal, "cannot copy {} to {}: {}", (tokenizer_dir / file).string(), out.string(),
                  ec.message());
  }
  spdlog::info("wrote a random-weight {} checkpoint (its output is noise) to {}", options.arch, out.string());
  return 0;
}

}  // namespace

Command demo_model_command() {
  return {
      "demo-model", "Write a small random-weight checkpoint (real tokenizer, noise output) to try serve on",
      [](CLI::App& sub) -> std::function<int()> {
        auto options = std::make_shared<DemoModelOptions>();
        sub.add_option("--arch", options->arch, "Model architecture family")->check(CLI::IsMember({"qwen3"}));
        sub.add_option("--out", options->out, "Output directory (created; files in it are overwritten)")->required();
        sub.add_option("--tokenizer-from", options->tokenizer_dir,
                       "Directory with the Qwen3 tokenizer.json and tokenizer_config.json")
            ->capture_default_str();
        sub.add_option("--seed", options->seed, "Seed of the random weights")->capture_default_str();
        return [options] { return run_demo_model(*options); };
      }};
}

}  // namespace omni::cli
