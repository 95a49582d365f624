// Z-Image's diffusion stage model (model/stage_model_registry.h).
#include "base/error.h"
#include "model/stage_model_registry.h"
#include "model/z_image/image_model.h"

namespace omni::model {

void register_z_image_stage_models(StageModels& models) {
  models.diffusion.add("z_image", [](const StageModelArgs& args) -> std::unique_ptr<DiffusionModel> {
    if (args.device.type != tensor::DeviceType::kCpu) {
      throw_error(ErrorCode::kUnsupported,
                  "stage {}: Z-Image runs on the CPU only so far (float32); the stage is placed on {} "
                  "(devices: \"cpu\" in the deploy YAML, or --device cpu)",
                  args.stage_id, tensor::device_name(args.device));
    }
    return std::make_unique<z_image::ImageModel>(args.model_dir);
  });
}

}  // namespace omni::model
