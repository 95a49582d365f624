// Stage models as plug-ins: a model family registers, by name, the objects that implement its
// stages, one registry per execution type (the engine that drives them):
//   llm_ar          ArStageModel (engine::ArEngine)               e.g. "causal_lm"
//   llm_generation  StreamingDecoderStage (engine::GenerationEngine)  e.g. a codec decoder
//   diffusion       DiffusionModel (engine::DiffusionEngine)       e.g. "z_image"
// A pipeline names the stage model of each of its stages (config::StagePipelineConfig::
// stage_model); the runtime finds it here by that name and never looks at architectures or
// family names. A family registers its stage models in its register_<family>_stage_models(),
// called from register_all_stage_models() (model/pipelines.cc), next to its pipelines.
//
// A stage model may also describe the checkpoint to the server (ModelFacts: voices, sample rate,
// task types) without loading weights; the runtime asks every stage model of the served pipeline
// when it builds the pipeline (runtime/pipeline_from_config.h) and merges the answers.
//
// Registration happens before the registries are shared (builtin_stage_models() builds them once,
// thread-safe); afterwards they are read-only and may be read from any thread. A factory is
// called on the stage's own thread and its object is used by that thread alone.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "base/json.h"
#include "config/pipeline_config.h"
#include "model/audio_decoder.h"
#include "model/causal_lm.h"
#include "model/diffusion_model.h"
#include "model/model_facts.h"
#include "tensor/device.h"
#include "tensor/dtype.h"

namespace omni::model {

// What every stage model factory is built from (runtime/engine_args.h reads it from the stage's
// engine args).
struct StageModelArgs {
  std::filesystem::path model_dir;     // the checkpoint directory (engine argument "model")
  tensor::Device device;               // resolved: the stage process's own device
  std::optional<tensor::DType> dtype;  // nullopt: auto (model/model_dtype.h)
  int stage_id = 0;                    // for messages
  Json engine_args = Json::object();   // every engine argument, for the options a model reads
  // load_format dummy: random weights made on the device from config.json's shapes
  // (Checkpoint::random); the folder needs no safetensors. A stage model that cannot make them
  // refuses with require_checkpoint_weights.
  bool random_weights = false;
};

// Throws omni::Error(kUnsupported) naming `stage_model` when `args` asks for random weights.
void require_checkpoint_weights(const StageModelArgs& args, std::string_view stage_model);

// Reads what the checkpoint in `model_dir` says about itself, without loading weights. Throws
// omni::Error(kLoadFailed) naming the file and field that is malformed.
using ModelDescriber = std::function<ModelFacts(const std::filesystem::path& model_dir)>;

// The model-layer interface of an llm_ar stage model: what engine::ArEngine drives.
using ArStageModel = CausalLm;

// An llm_generation stage model: a streaming decoder, and how the payloads its upstream stage
// sends become codes for it (the payload format belongs to the family, not to the runtime).
class StreamingDecoderStage {
 public:
  virtual ~StreamingDecoderStage() = default;
  virtual const StreamingAudioDecoder& decoder() const = 0;
  // The codes one upstream payload carries: whole frames of decoder().codes_per_frame(), frame-major.
  // Throws omni::Error(kInvalidArgument) naming the sizes for bytes that are not whole frames.
  virtual std::vector<int32_t> payload_codes(std::span<const uint8_t> payload) const = 0;
  // The left context a request's additional_information gives (whole frames, frame-major): frames
  // decoded before the request's own whose audio is not output (a voice clone's reference, which
  // the generated frames continue). None by default. Throws omni::Error(kInvalidArgument) naming
  // the field for a malformed one.
  virtual std::vector<int32_t> context_codes(const Json& additional_information) const {
    (void)additional_information;
    return {};
  }
};

// The stage models of one execution type, by name.
template <typename T>
class StageModelRegistry {
 public:
  // Loads the stage model; throws omni::Error (kNotFound, kLoadFailed naming the file,
  // kInvalidConfig naming the stage and the engine argument).
  using Factory = std::function<std::unique_ptr<T>(const StageModelArgs& args)>;
  struct Entry {
    Factory create;
    ModelDescriber describe;  // may be empty: nothing to tell
  };

  // A second registration of one name is kInternal (two families claiming it).
  void add(const std::string& name, Factory create, ModelDescriber describe = {}) {
    if (!entries_.emplace(name, Entry{std::move(create), std::move(describe)}).second) {
      throw_error(ErrorCode::kInternal, "stage model registry: '{}' registered twice", name);
    }
  }
  // nullptr when no family registered `name`.
  const Entry* find(std::string_view name) const {
    auto it = entries_.find(name);
    return it == entries_.end() ? nullptr : &it->second;
  }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [name, entry] : entries_) out.push_back(name);
    return out;
  }

 private:
  std::map<std::string, Entry, std::less<>> entries_;
};

// A checkpoint's speaker encoder for voice cloning: reference audio (mono float32 at
// `sample_rate`) -> the speaker embedding a speech request's speaker_embedding takes. The serve
// command loads it into the API server (the embedding is computed before a request reaches the
// stages); `embed` may be called from any thread.
struct SpeakerEncoderModel {
  int sample_rate = 0;
  size_t embedding_size = 0;
  std::function<std::vector<float>(std::span<const float> samples)> embed;
  // In-context cloning, when the checkpoint has a speech-tokenizer encoder: the reference audio's
  // codec frames (codes_per_frame codes each, frame-major) at the same sample rate, the speech
  // request's additional_information.ref_code. Empty when the checkpoint has none.
  int codes_per_frame = 0;
  std::function<std::vector<int32_t>(std::span<const float> samples)> reference_codes;
};
// Loads the speaker encoder of the checkpoint in `model_dir` onto `device` (the stage's device), or
// nullopt when the checkpoint has none (e.g. a Qwen3-TTS CustomVoice checkpoint). Throws what the
// checkpoint loaders throw.
using SpeakerEncoderLoader =
    std::function<std::optional<SpeakerEncoderModel>(const std::filesystem::path& model_dir, tensor::Device device)>;

// Every stage model, by execution type.
struct StageModels {
  StageModelRegistry<ArStageModel> ar;                   // llm_ar
  StageModelRegistry<StreamingDecoderStage> generation;  // llm_generation
  StageModelRegistry<DiffusionModel> diffusion;          // diffusion
  // Speaker encoders, by the name of the stage model whose checkpoint holds them.
  std::map<std::string, SpeakerEncoderLoader, std::less<>> speaker_encoders;

  // Whether `name` is registered for `type`.
  bool has(config::ExecutionType type, std::string_view name) const;
  // The registered names for `type`, for messages.
  std::vector<std::string> names(config::ExecutionType type) const;
  // The facts the stage model `name` of `type` reports for `model_dir`; empty facts when it
  // registered no describer. kInternal when it is not registered (check has() first).
  ModelFacts describe(config::ExecutionType type, std::string_view name, const std::filesystem::path& model_dir) const;
  // Loads the stage model `name`; kInvalidConfig naming the stage, the name and the registered
  // ones when it is not registered; otherwise what its factory throws.
  std::unique_ptr<ArStageModel> create_ar(std::string_view name, const StageModelArgs& args) const;
  std::unique_ptr<StreamingDecoderStage> create_generation(std::string_view name, const StageModelArgs& args) const;
  std::unique_ptr<DiffusionModel> create_diffusion(std::string_view name, const StageModelArgs& args) const;
};

// "causal_lm": the text LMs of model_registry.h, by the checkpoint's config.json architectures.
void register_causal_lm_stage_models(StageModels& models);
// One function per model family, defined in src/model/<family>/ (e.g. qwen3_tts/stage_models.cc).
void register_qwen3_tts_stage_models(StageModels& models);
void register_qwen3_omni_stage_models(StageModels& models);
void register_qwen2_5_omni_stage_models(StageModels& models);
void register_z_image_stage_models(StageModels& models);

// Registers every family's stage models: the one list a new family adds its line to.
void register_all_stage_models(StageModels& models);

// The stage models of every built-in family, registered on first use (thread-safe).
const StageModels& builtin_stage_models();

}  // namespace omni::model
