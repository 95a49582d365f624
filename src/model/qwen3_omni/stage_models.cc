// The Qwen3-Omni stage models: the thinker (llm_ar), which describes the audio, images and video it
// reads. The talker
// and code2wav are not built yet.
#include "model/qwen3_omni/thinker.h"
#include "model/stage_model_registry.h"
#include "model/whisper_features.h"

namespace omni::model {

void register_qwen3_omni_stage_models(StageModels& models) {
  models.ar.add(
      std::string(qwen3_omni::kThinkerStageModel),
      [](const StageModelArgs& args) -> std::unique_ptr<ArStageModel> {
        return qwen3_omni::load_thinker(args.model_dir, read_json_file(args.model_dir / "config.json"),
                                        {.device = args.device, .dtype = args.dtype, .engine_args = args.engine_args});
      },
      [](const std::filesystem::path& dir) {
        // The thinker reads chat audio at its feature extractor's rate when it has an audio tower.
        ModelFacts facts;
        if (qwen3_omni::has_audio_input(dir))
          facts.audio_input_sample_rate = load_whisper_feature_config(dir).sampling_rate;
        // Images and video when it has a vision encoder; video frames sampled as its processor says.
        if (qwen3_omni::has_vision_input(dir)) {
          const qwen3_omni::VisionProcessorConfig vision = qwen3_omni::load_vision_processor_config(dir);
          facts.image_input = facts.video_input = true;
          facts.video_fps = vision.fps;
          facts.video_min_frames = vision.min_frames;
          facts.video_max_frames = vision.max_frames;
          facts.video_frame_multiple = vision.temporal_patch_size;
        }
        return facts;
      });
}

}  // namespace omni::model
