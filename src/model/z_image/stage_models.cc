// Z-Image's diffusion stage model (model/stage_model_registry.h). Engine arguments it reads:
// vae_use_tiling (default false) and enforce_eager (vLLM's: no CUDA graphs for the transformer's
// steps; default false).
#include "base/error.h"
#include "base/log.h"
#include "model/model_dtype.h"
#include "model/stage_model_registry.h"
#include "model/z_image/image_model.h"

namespace omni::model {

namespace {

bool bool_engine_arg(const StageModelArgs& args, const char* key) {
  auto it = args.engine_args.find(key);
  if (it == args.engine_args.end() || it->is_null()) return false;
  if (!it->is_boolean()) {
    throw_error(ErrorCode::kInvalidConfig, "stage {}: engine argument {} must be a boolean, got {}", args.stage_id, key,
                it->dump());
  }
  return it->get<bool>();
}

}  // namespace

void register_z_image_stage_models(StageModels& models) {
  models.diffusion.add("z_image", [](const StageModelArgs& args) -> std::unique_ptr<DiffusionModel> {
    require_checkpoint_weights(args, "z_image");
    // --dtype auto: bfloat16 on CUDA (the released weights' dtype), float32 on the CPU.
    const Placement placement{args.device, resolve_model_dtype(args.dtype, "", args.device, args.model_dir.string())};
    const bool enforce_eager = bool_engine_arg(args, "enforce_eager");
    auto model =
        std::make_unique<z_image::ImageModel>(args.model_dir, placement, bool_engine_arg(args, "vae_use_tiling"));
    model->set_cuda_graphs(!enforce_eager);
    if (placement.device.type == tensor::DeviceType::kCuda) {
      spdlog::info("z_image: transformer steps {}",
                   enforce_eager ? "eager (enforce_eager)" : "with CUDA graphs, recorded once per step shape");
    }
    return model;
  });
}

}  // namespace omni::model
