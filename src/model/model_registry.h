// Which C++ implementation serves a checkpoint: Hugging Face `architectures` names mapped to
// factories. Each model family registers its architectures through an explicit function
// (qwen3::register_family…) called from register_model_families(); there are no static
// initializers, because the linker drops unreferenced objects of static libraries.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/json.h"
#include "model/causal_lm.h"
#include "tensor/communicator.h"
#include "tensor/device.h"
#include "tensor/dtype.h"

namespace omni::model {

// How to build a model beyond its checkpoint.
struct CausalLmLoadOptions {
  // Where the model runs (its weights, KV cache and activations live there).
  tensor::Device device = tensor::Device::cpu();
  // The weights', activations' and KV cache's dtype (model/model_dtype.h); nullopt: auto.
  std::optional<tensor::DType> dtype;
  // Not owned, outlives the model. When set, the model is this rank's shard of a tensor-parallel
  // group (a family that cannot be split answers kUnsupported); the communicator works on `device`.
  tensor::Communicator* tensor_parallel = nullptr;
  // vLLM's `--load-format dummy`: the weights are random, made on the device from config.json's
  // shapes (model/safetensors.h's Checkpoint::random), and the folder needs no safetensors. For
  // benchmarks of models too large to write to disk. Decoder LMs (model/decoder_lm.h) honour it,
  // the Qwen3-Omni thinker's audio and vision towers too.
  bool random_weights = false;
  // The stage's engine arguments, for a stage model's own settings (model/embedding_input_lm.h); a text
  // LM reads none of them.
  Json engine_args = Json::object();
};

// Builds the model in `dir`, whose parsed config.json is `config` ("source" for error messages
// is dir/config.json). Throws omni::Error like the loaders it calls.
using CausalLmFactory = std::function<std::unique_ptr<CausalLm>(const std::filesystem::path& dir, const Json& config,
                                                                const CausalLmLoadOptions& options)>;

// Registration happens before the registry is shared; afterwards const access is thread-safe.
class ModelRegistry {
 public:
  // A second registration of one architecture is kInternal (two families claiming it).
  void add_causal_lm(const std::string& architecture, CausalLmFactory factory);
  bool has_causal_lm(const std::string& architecture) const;
  std::vector<std::string> causal_lm_architectures() const;

  // Reads dir/config.json and builds the model of its architectures[0]. kNotFound when the
  // folder or config.json is missing; kUnsupported naming the architecture and the registered
  // ones when no family serves it.
  std::unique_ptr<CausalLm> create_causal_lm(const std::filesystem::path& dir,
                                             const CausalLmLoadOptions& options = {}) const;

 private:
  std::map<std::string, CausalLmFactory> causal_lms_;
};

// Registers every model family built into omnistage.
void register_model_families(ModelRegistry& registry);

// A registry with every built-in family, built on first use (thread-safe).
const ModelRegistry& builtin_model_registry();

}  // namespace omni::model
