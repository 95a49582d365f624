// The Qwen3-Omni stage models: the thinker (llm_ar). The talker and code2wav are not built yet.
#include "model/qwen3_omni/thinker.h"
#include "model/stage_model_registry.h"

namespace omni::model {

void register_qwen3_omni_stage_models(StageModels& models) {
  models.ar.add(
      std::string(qwen3_omni::kThinkerStageModel), [](const StageModelArgs& args) -> std::unique_ptr<ArStageModel> {
        return qwen3_omni::load_thinker(args.model_dir, read_json_file(args.model_dir / "config.json"),
                                        {.device = args.device, .dtype = args.dtype, .engine_args = args.engine_args});
      });
}

}  // namespace omni::model
