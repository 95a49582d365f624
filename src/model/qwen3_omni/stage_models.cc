// The Qwen3-Omni stage models: the thinker (llm_ar), which describes the audio, images and video it
// reads; the talker (llm_ar), which describes its speakers (the voices); and code2wav
// (llm_generation), which decodes the talker's codec frames (the payload of
// model/qwen3_tts/codec_frames.h, as the Qwen3-TTS talker sends them) into 24 kHz audio.
#include "model/qwen3_omni/code2wav.h"
#include "model/qwen3_omni/talker_stage_model.h"
#include "model/qwen3_omni/thinker.h"
#include "model/qwen3_tts/codec_frames.h"
#include "model/stage_model_registry.h"
#include "model/whisper_features.h"

namespace omni::model {
namespace {

class Code2WavStage final : public StreamingDecoderStage {
 public:
  explicit Code2WavStage(std::unique_ptr<qwen3_tts::CodecDecoder> decoder) : decoder_(std::move(decoder)) {}

  const StreamingAudioDecoder& decoder() const override { return *decoder_; }
  std::vector<int32_t> payload_codes(std::span<const uint8_t> payload) const override {
    return qwen3_tts::decode_codec_frames(payload, decoder_->codes_per_frame());
  }

 private:
  std::unique_ptr<qwen3_tts::CodecDecoder> decoder_;
};

}  // namespace

void register_qwen3_omni_stage_models(StageModels& models) {
  models.ar.add(
      std::string(qwen3_omni::kThinkerStageModel),
      [](const StageModelArgs& args) -> std::unique_ptr<ArStageModel> {
        return qwen3_omni::load_thinker(args.model_dir, read_json_file(args.model_dir / "config.json"),
                                        {.device = args.device,
                                         .dtype = args.dtype,
                                         .random_weights = args.random_weights,
                                         .engine_args = args.engine_args});
      },
      [](const std::filesystem::path& dir) {
        // The thinker reads chat audio at its feature extractor's rate when it has an audio tower.
        ModelFacts facts;
        if (qwen3_omni::has_audio_input(dir))
          facts.audio_input_sample_rate = load_whisper_feature_config(dir).sampling_rate;
        // Images and video when it has a vision encoder; video frames sampled as its processor says.
        if (qwen3_omni::has_vision_input(dir)) {
          const VisionProcessorConfig vision = load_vision_processor_config(dir);
          facts.image_input = facts.video_input = true;
          facts.video_fps = vision.fps;
          facts.video_min_frames = vision.min_frames;
          facts.video_max_frames = vision.max_frames;
          facts.video_frame_multiple = vision.temporal_patch_size;
        }
        return facts;
      });
  models.ar.add(
      std::string(qwen3_omni::kTalkerStageModel),
      [](const StageModelArgs& args) -> std::unique_ptr<ArStageModel> {
        return std::make_unique<qwen3_omni::TalkerStageModel>(args.model_dir, args.engine_args, args.device,
                                                              args.random_weights, args.dtype);
      },
      [](const std::filesystem::path& dir) {
        ModelFacts facts;
        facts.voices = qwen3_omni::read_talker_config(dir).talker.speaker_names();
        return facts;
      });
  models.generation.add(
      std::string(qwen3_omni::kCode2WavStageModel),
      [](const StageModelArgs& args) -> std::unique_ptr<StreamingDecoderStage> {
        return std::make_unique<Code2WavStage>(
            qwen3_omni::load_code2wav(args.model_dir, args.device, args.random_weights));
      },
      [](const std::filesystem::path& dir) {
        ModelFacts facts;
        const std::filesystem::path file = dir / "config.json";
        facts.audio_sample_rate =
            qwen3_omni::parse_code2wav_config(read_json_file(file), file.string()).output_sample_rate;
        return facts;
      });
}

}  // namespace omni::model
