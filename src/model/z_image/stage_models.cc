// Z-Image's diffusion stage model (model/stage_model_registry.h). Engine arguments it reads:
// vae_use_tiling (default false).
#include "base/error.h"
#include "model/model_dtype.h"
#include "model/stage_model_registry.h"
#include "model/z_image/image_model.h"

namespace omni::model {

namespace {

bool vae_use_tiling(const StageModelArgs& args) {
  auto it = args.engine_args.find("vae_use_tiling");
  if (it == args.engine_args.end() || it->is_null()) return false;
  if (!it->is_boolean()) {
    throw_error(ErrorCode::kInvalidConfig, "stage {}: engine argument vae_use_tiling must be a boolean, got {}",
                args.stage_id, it->dump());
  }
  return it->get<bool>();
}

}  // namespace

void register_z_image_stage_models(StageModels& models) {
  models.diffusion.add("z_image", [](const StageModelArgs& args) -> std::unique_ptr<DiffusionModel> {
    require_checkpoint_weights(args, "z_image");
    // --dtype auto: bfloat16 on CUDA (the released weights' dtype), float32 on the CPU.
    const Placement placement{args.device, resolve_model_dtype(args.dtype, "", args.device, args.model_dir.string())};
    return std::make_unique<z_image::ImageModel>(args.model_dir, placement, vae_use_tiling(args));
  });
}

}  // namespace omni::model
