// The talker's prompt (docs/models/qwen3_tts.md, "Prompt"): the rows of inputs_embeds that prefill the
// talker for one utterance, and the text-track vectors added to the following decode steps.
// Layouts: CustomVoice (a built-in speaker's codec row), VoiceDesign (the voice described by
// instructions), Base with a speaker embedding (an x-vector) alone, and Base in-context (ICL)
// cloning: the x-vector, the reference audio's transcript (ref_text) and its codec frames
// (ref_codes, from the speech-tokenizer encoder, speech_encoder.h), which the talker continues. Two text layouts,
// chosen per request as vLLM-Omni chooses them (its non_streaming_mode; by default the official wrappers' choice per
// task):
//   - non-streaming (default for CustomVoice and VoiceDesign): every text token in the prefill,
//     then tts_eos + codec pad and tts_pad + codec bos; every decode step adds tts_pad;
//   - streaming text (default for Base): one prefill row for the first text token with codec bos;
//     decode step k adds the text token k+1, then tts_eos, then tts_pad for the rest.
// ICL replaces that tail: the text track T = [ref_text ids ++ text ids, tts_eos] and the codec
// track C = [codec bos, the frame embedding of each reference frame] are, non-streaming, all of T
// (each + codec pad) then all of C (each + tts_pad); streaming, row i = T[i] + C[i] for as many
// rows as C has (T padded with tts_pad when shorter), the rest of T going to the decode steps.
//
// Errors: omni::Error(kInvalidArgument) naming the request field at fault (text, voice,
// language, instructions, task_type, speaker_embedding) and, for names, the allowed values.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "model/qwen3_tts/config.h"
#include "model/qwen3_tts/talker.h"
#include "tensor/tensor.h"
#include "text/tokenizer/tokenizer.h"

namespace omni::model::qwen3_tts {

// vLLM-Omni's default of --tts-max-instructions-length (characters).
inline constexpr int kDefaultMaxInstructionsLength = 500;

struct SpeechRequest {
  std::string text;
  // "CustomVoice", "VoiceDesign" or "Base" (any case); empty = the checkpoint's own type.
  std::string task_type;
  std::string voice;                     // CustomVoice: a built-in speaker (any case)
  std::string language;                  // a codec language (any case) or "Auto"; empty = Auto
  std::string instructions;              // VoiceDesign: the voice description; CustomVoice (1.7B): a style
  std::vector<float> speaker_embedding;  // Base: the x-vector (talker hidden size floats)
  // The text layout: true = non-streaming, false = streaming; unset = the task's default.
  std::optional<bool> non_streaming_mode;
  // Base, in-context cloning: the reference's codec frames (num_code_groups codes each,
  // frame-major) and its transcript. Empty ref_codes: no ICL.
  std::vector<int32_t> ref_codes;
  std::string ref_text;
};

struct TalkerPrompt {
  tensor::Tensor rows;            // [n, H]: the prefill inputs_embeds
  tensor::Tensor trailing;        // [m, H]: text track of decode steps 0..m-1 (later steps: tts_pad)
  tensor::Tensor tts_pad;         // [H]
  std::vector<int32_t> text_ids;  // the text's token ids (for logging and tests)
};

// The task type a request runs as: its task_type when set (it must be the checkpoint's), else the
// checkpoint's.
TtsModelType resolve_task_type(const SpeechRequest& request, const TalkerConfig& config);

// The layout a request gets: its non_streaming_mode when set, else non-streaming except for Base.
bool uses_non_streaming_layout(const SpeechRequest& request, TtsModelType task);

// A prompt before its text projection: the request checked and tokenized, its layout decided.
// Planning is cheap; the projection (two text_hidden² matrix products over the text track) is what
// a prompt costs, and projecting many prompts' tracks in one call reads those weights once.
struct TalkerPromptPlan {
  std::vector<int32_t> text_track;    // instructions, role, text, then tts_pad, tts_bos, tts_eos
  std::vector<int32_t> codec_prefix;  // codec_prefix() of the request
  std::vector<float> speaker_embedding;
  size_t num_instruct = 0;         // instruction ids at the start of text_track
  size_t num_ref_text = 0;         // ICL: reference transcript ids (after the 3 role ids)
  size_t num_text = 0;             // text ids (after the role and reference ids)
  std::vector<int32_t> ref_codes;  // ICL: the reference frames; empty otherwise
  size_t ref_frames = 0;
  bool non_streaming = true;
  std::vector<int32_t> text_ids;
  // The prefill rows the prompt will have.
  size_t num_rows() const;
};

// Checks and tokenizes the request (the errors of build_talker_prompt; for ICL also ref_text
// missing or blank, ref_codes that are not whole frames or hold a code outside the codebook, and
// ref_codes for a task other than Base). `max_instructions_length`
// bounds the instructions in characters (Unicode code points).
TalkerPromptPlan plan_talker_prompt(const SpeechRequest& request, const Talker& talker,
                                    const text::Tokenizer& tokenizer,
                                    int max_instructions_length = kDefaultMaxInstructionsLength);

// The prompts of `plans`, their text tracks projected in one call; each prompt equals the one
// build_talker_prompt gives for its request alone (the projection is row by row). Throws only what
// Talker::project_text throws.
std::vector<TalkerPrompt> build_talker_prompts(std::span<const TalkerPromptPlan> plans, const Talker& talker);

// Plans and builds one prompt.
TalkerPrompt build_talker_prompt(const SpeechRequest& request, const Talker& talker, const text::Tokenizer& tokenizer,
                                 int max_instructions_length = kDefaultMaxInstructionsLength);

// The codec prefix of docs/models/qwen3_tts.md (think/nothink, language, the speaker slot, pad, bos) as codec ids,
// with -1 standing for a speaker row that is not a codec id (Base's x-vector). Exposed for tests.
std::vector<int32_t> codec_prefix(const SpeechRequest& request, const TalkerConfig& config);

}  // namespace omni::model::qwen3_tts
