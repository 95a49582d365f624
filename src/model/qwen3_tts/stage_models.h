// The Qwen3-TTS stage models (model/stage_model_registry.h) and what a checkpoint tells the API.
//
//   "qwen3_tts_code2wav" (llm_generation): the 12 Hz codec decoder of the checkpoint's
//     speech_tokenizer/ (codec_decoder.h) on the stage's device; its input payloads are the
//     talker's codec frames (codec_frames.h).
//   "qwen3_tts_talker" (llm_ar): the talker (talker.h), registered with the AR stage models.
// Both describe the checkpoint with describe_checkpoint(). The talker's checkpoint also gives the
// speaker encoder of a Base checkpoint (load_speaker_encoder) for voice cloning.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string_view>

#include "model/model_facts.h"
#include "model/stage_model_registry.h"

namespace omni::model::qwen3_tts {

inline constexpr std::string_view kTalkerStageModel = "qwen3_tts_talker";
inline constexpr std::string_view kCode2WavStageModel = "qwen3_tts_code2wav";

// The checkpoint's facts for the speech API, from `model_dir`/config.json without loading weights:
// voices = talker_config.spk_id's names as config.json spells them, sorted (none for a Base or
// VoiceDesign checkpoint); task_types = {"CustomVoice" | "VoiceDesign" | "Base"} from
// tts_model_type (custom_voice, voice_design, base; any case, with or without the underscore),
// empty when it is absent; audio_sample_rate = speech_tokenizer/config.json's output sample rate
// when that file exists. No config.json: empty facts. Throws omni::Error(kLoadFailed) naming the
// file for malformed JSON, an spk_id that is not an object or an unknown tts_model_type.
ModelFacts describe_checkpoint(const std::filesystem::path& model_dir);

// The speaker encoder (speaker_encoder.h) of a Base checkpoint with a speaker_encoder_config, on
// `device`, with the speech-tokenizer encoder (speech_encoder.h, on the same device) as its
// reference_codes when speech_tokenizer/config.json has an encoder_config at the same sample rate;
// nullopt for other checkpoints. Throws what the loaders throw.
std::optional<SpeakerEncoderModel> load_speaker_encoder(const std::filesystem::path& model_dir, tensor::Device device);

// Loads `args.model_dir`/speech_tokenizer onto args.device; throws what CodecDecoder::load throws.
std::unique_ptr<StreamingDecoderStage> load_code2wav_stage(const StageModelArgs& args);

}  // namespace omni::model::qwen3_tts
