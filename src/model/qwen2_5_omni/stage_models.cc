// The Qwen2.5-Omni stage models: the thinker (llm_ar, text out; its media towers plug in through
// Thinker::multimodal_prompt) and the talker (llm_ar, codec codes out), which describes its voices.
#include "model/qwen2_5_omni/talker_stage_model.h"
#include "model/qwen2_5_omni/thinker.h"
#include "model/stage_model_registry.h"

namespace omni::model {

void register_qwen2_5_omni_stage_models(StageModels& models) {
  models.ar.add(std::string(qwen2_5_omni::kThinkerStageModel),
                [](const StageModelArgs& args) -> std::unique_ptr<ArStageModel> {
                  return qwen2_5_omni::load_thinker(args.model_dir, read_json_file(args.model_dir / "config.json"),
                                                    {.device = args.device,
                                                     .dtype = args.dtype,
                                                     .random_weights = args.random_weights,
                                                     .engine_args = args.engine_args});
                });
  models.ar.add(
      std::string(qwen2_5_omni::kTalkerStageModel),
      [](const StageModelArgs& args) -> std::unique_ptr<ArStageModel> {
        return std::make_unique<qwen2_5_omni::TalkerStageModel>(args.model_dir, args.device, args.random_weights,
                                                                args.dtype);
      },
      [](const std::filesystem::path& dir) {
        ModelFacts facts;
        if (!std::filesystem::exists(dir / "spk_dict.pt")) return facts;
        for (const auto& [name, bos] : qwen2_5_omni::read_speaker_bos_tokens(dir)) facts.voices.push_back(name);
        return facts;
      });
}

}  // namespace omni::model
