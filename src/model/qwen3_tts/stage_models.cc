#include "model/qwen3_tts/stage_models.h"

#include <algorithm>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json.h"
#include "model/qwen3_tts/codec_config.h"
#include "model/qwen3_tts/codec_decoder.h"
#include "model/qwen3_tts/codec_frames.h"
#include "model/qwen3_tts/config.h"
#include "model/qwen3_tts/speaker_encoder.h"
#include "model/qwen3_tts/speech_encoder.h"
#include "model/qwen3_tts/talker_stage_model.h"

namespace omni::model {

namespace qwen3_tts {

namespace {

std::vector<std::string> voices_of(const Json& config, const std::filesystem::path& file) {
  auto talker = config.find("talker_config");
  if (talker == config.end() || !talker->is_object()) return {};
  auto speakers = talker->find("spk_id");
  if (speakers == talker->end() || speakers->is_null()) return {};
  if (!speakers->is_object()) {
    throw_error(ErrorCode::kLoadFailed, "{}: talker_config.spk_id must be an object of speaker name -> id, not {}",
                file.string(), speakers->type_name());
  }
  std::vector<std::string> voices;
  for (const auto& [name, id] : speakers->items()) voices.push_back(name);
  std::sort(voices.begin(), voices.end());
  return voices;
}

std::vector<std::string> task_types_of(const Json& config, const std::filesystem::path& file) {
  auto type = config.find("tts_model_type");
  if (type == config.end() || type->is_null()) return {};
  std::string name = type->is_string() ? lower_ascii(type->get<std::string>()) : "";
  name.erase(std::remove(name.begin(), name.end(), '_'), name.end());
  if (name == "customvoice") return {"CustomVoice"};
  if (name == "voicedesign") return {"VoiceDesign"};
  if (name == "base") return {"Base"};
  throw_error(ErrorCode::kLoadFailed, "{}: tts_model_type {} is not one of custom_voice, voice_design, base",
              file.string(), type->dump());
}

// The codec decoder and the talker's frame payloads.
class Code2WavStage final : public StreamingDecoderStage {
 public:
  explicit Code2WavStage(std::unique_ptr<CodecDecoder> decoder) : decoder_(std::move(decoder)) {}

  const StreamingAudioDecoder& decoder() const override { return *decoder_; }
  std::vector<int32_t> payload_codes(std::span<const uint8_t> payload) const override {
    return decode_codec_frames(payload, decoder_->codes_per_frame());
  }
  // In-context cloning: the reference frames the talker continued (additional_information.ref_code)
  // are decoded ahead of the generated ones, so the reply's first frames sound as they do after
  // the reference, and the reference's own audio is dropped.
  std::vector<int32_t> context_codes(const Json& info) const override {
    if (!info.is_object() || !info.contains("ref_code")) return {};
    const Json& codes = info["ref_code"];
    const size_t width = static_cast<size_t>(decoder_->codes_per_frame());
    if (!codes.is_array() || codes.size() % width != 0 ||
        !std::all_of(codes.begin(), codes.end(), [](const Json& c) { return c.is_number_integer(); })) {
      throw_error(ErrorCode::kInvalidArgument,
                  "additional_information.ref_code must be whole frames of {} integer codes", width);
    }
    return codes.get<std::vector<int32_t>>();
  }

 private:
  std::unique_ptr<CodecDecoder> decoder_;
};

}  // namespace

ModelFacts describe_checkpoint(const std::filesystem::path& model_dir) {
  const std::filesystem::path file = model_dir / "config.json";
  ModelFacts facts;
  if (!std::filesystem::exists(file)) return facts;
  const Json config = read_json_file(file);
  if (!config.is_object()) return facts;
  facts.voices = voices_of(config, file);
  facts.task_types = task_types_of(config, file);
  if (std::filesystem::exists(model_dir / "speech_tokenizer" / "config.json")) {
    facts.audio_sample_rate = read_codec_decoder_config(model_dir / "speech_tokenizer").output_sample_rate;
  }
  return facts;
}

std::optional<SpeakerEncoderModel> load_speaker_encoder(const std::filesystem::path& model_dir, tensor::Device device) {
  const TalkerConfig config = read_talker_config(model_dir);
  if (config.model_type != TtsModelType::kBase || !config.speaker_encoder) return std::nullopt;
  auto encoder = std::make_shared<const SpeakerEncoder>(Checkpoint::open(model_dir), *config.speaker_encoder, device);
  SpeakerEncoderModel model;
  model.sample_rate = encoder->config().sample_rate;
  model.embedding_size = static_cast<size_t>(encoder->config().enc_dim);
  model.embed = [encoder](std::span<const float> samples) { return encoder->embed(samples); };
  if (std::filesystem::exists(model_dir / "speech_tokenizer" / "config.json")) {
    std::shared_ptr<const SpeechEncoder> codes = SpeechEncoder::load(model_dir / "speech_tokenizer", device);
    if (codes && codes->config().sample_rate == model.sample_rate) {
      model.codes_per_frame = codes->config().valid_quantizers;
      model.reference_codes = [codes](std::span<const float> samples) { return codes->encode(samples); };
    }
  }
  return model;
}

std::unique_ptr<StreamingDecoderStage> load_code2wav_stage(const StageModelArgs& args) {
  require_checkpoint_weights(args, kCode2WavStageModel);
  return std::make_unique<Code2WavStage>(CodecDecoder::load(args.model_dir / "speech_tokenizer", args.device));
}

}  // namespace qwen3_tts

void register_qwen3_tts_stage_models(StageModels& models) {
  models.generation.add(std::string(qwen3_tts::kCode2WavStageModel), qwen3_tts::load_code2wav_stage,
                        qwen3_tts::describe_checkpoint);
  models.ar.add(
      std::string(qwen3_tts::kTalkerStageModel),
      [](const StageModelArgs& args) -> std::unique_ptr<ArStageModel> {
        require_checkpoint_weights(args, qwen3_tts::kTalkerStageModel);
        return std::make_unique<qwen3_tts::TalkerStageModel>(args.model_dir, args.engine_args, args.device);
      },
      qwen3_tts::describe_checkpoint);
  models.speaker_encoders.emplace(std::string(qwen3_tts::kTalkerStageModel), qwen3_tts::load_speaker_encoder);
}

}  // namespace omni::model
