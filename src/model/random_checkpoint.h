// Random-weight checkpoints in the Hugging Face layout, for benchmarks and demos that need a
// model of real size without downloading one. The output is what save_pretrained would write
// for a Qwen3ForCausalLM (config.json in the transformers-4 schema that released checkpoints
// use, generation_config.json, model.safetensors), so every loader path is exercised.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "base/json.h"
#include "base/splitmix64.h"
#include "model/hf_config.h"
#include "model/safetensors_writer.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace omni::model {

// Qwen3-0.6B's shapes (hidden 1024, 28 layers, 16/8 heads of 128, MLP 3072, vocab 151936, tied).
TextModelConfig qwen3_0_6b_shapes();
// Qwen3-8B's shapes (hidden 4096, 36 layers, 32/8 heads of 128, MLP 12288, vocab 151936, untied).
TextModelConfig qwen3_8b_shapes();

// Writes a Qwen3ForCausalLM with `shapes` and weights drawn from `seed` (uniform, scaled by
// 1/sqrt(fan_in) so activations stay O(1)) into `dir` (created; existing files overwritten).
// dtype: kBF16 or kF32 on disk. Errors: kInternal naming the file that cannot be written.
void write_random_qwen3_checkpoint(const std::filesystem::path& dir, const TextModelConfig& shapes, uint64_t seed,
                                   tensor::DType dtype);

// The small files of a written checkpoint (configs, tokenizer files, templates), shared by every
// family's demo checkpoint: `text` as it is, or `json` indented by 2 with a final newline.
// kInternal naming the file when it cannot be written.
void write_text(const std::filesystem::path& path, const std::string& text);
void write_json(const std::filesystem::path& path, const OrderedJson& json);

// Adds tensors of random values to a checkpoint being written: uniform around `mean` with
// standard deviation `stddev` (in [mean - a, mean + a), a = stddev * sqrt(3)), drawn from one
// SplitMix64 stream in the order of the calls, so a seed always writes the same bits.
class RandomTensors {
 public:
  RandomTensors(SafetensorsWriter& writer, uint64_t seed) : writer_(writer), bits_(seed) {}
  void add(const std::string& name, const tensor::Shape& shape, float stddev, float mean = 0.0f);

 private:
  SafetensorsWriter& writer_;
  SplitMix64 bits_;
  std::vector<float> values_;
};

}  // namespace omni::model
