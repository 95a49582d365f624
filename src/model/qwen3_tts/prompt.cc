#include "model/qwen3_tts/prompt.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <span>

#include "base/error.h"
#include "base/utf8.h"

namespace omni::model::qwen3_tts {

namespace {

using tensor::DType;
using tensor::Tensor;

bool blank(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; });
}

std::string task_type_api_name(TtsModelType type) {
  switch (type) {
    case TtsModelType::kBase:
      return "Base";
    case TtsModelType::kCustomVoice:
      return "CustomVoice";
    case TtsModelType::kVoiceDesign:
      return "VoiceDesign";
  }
  return "?";
}

std::string allowed_voices(const TalkerConfig& config) {
  return fmt::format("{}", fmt::join(config.speaker_names(), ", "));
}

// Whether the request's instructions become prompt rows for this task and checkpoint.
bool uses_instructions(TtsModelType task, const TalkerConfig& config, const SpeechRequest& request) {
  if (request.instructions.empty()) return false;
  if (task == TtsModelType::kVoiceDesign) return true;
  // CustomVoice takes a style instruction on 1.7B only; the 0.6B CustomVoice model was not trained
  // with one, so (like the official wrapper) it is dropped there. Base has no instruction input.
  return task == TtsModelType::kCustomVoice && config.model_size != "0b6";
}

}  // namespace

bool uses_non_streaming_layout(const SpeechRequest& request, TtsModelType task) {
  return request.non_streaming_mode.value_or(task != TtsModelType::kBase);
}

TtsModelType resolve_task_type(const SpeechRequest& request, const TalkerConfig& config) {
  if (request.task_type.empty()) return config.model_type;
  const std::string lowered = lower_ascii(request.task_type);
  std::optional<TtsModelType> task;
  if (lowered == "customvoice" || lowered == "custom_voice") task = TtsModelType::kCustomVoice;
  if (lowered == "voicedesign" || lowered == "voice_design") task = TtsModelType::kVoiceDesign;
  if (lowered == "base") task = TtsModelType::kBase;
  if (!task) {
    throw_error(ErrorCode::kInvalidArgument, "task_type '{}' is not one of CustomVoice, VoiceDesign, Base",
                request.task_type);
  }
  if (*task != config.model_type) {
    throw_error(ErrorCode::kInvalidArgument, "task_type '{}': this model is a {} checkpoint and serves only {}",
                request.task_type, task_type_api_name(config.model_type), task_type_api_name(config.model_type));
  }
  return *task;
}

std::vector<int32_t> codec_prefix(const SpeechRequest& request, const TalkerConfig& config) {
  const TtsModelType task = resolve_task_type(request, config);
  std::optional<int32_t> speaker;
  std::string dialect;
  if (task == TtsModelType::kCustomVoice) {
    if (config.speaker_ids.empty()) {
      throw_error(ErrorCode::kInvalidArgument, "voice: this CustomVoice checkpoint lists no speakers (spk_id)");
    }
    if (request.voice.empty()) {
      throw_error(ErrorCode::kInvalidArgument, "voice is required; the voices are {}", allowed_voices(config));
    }
    speaker = config.speaker_id(request.voice);
    if (!speaker) {
      throw_error(ErrorCode::kInvalidArgument, "voice '{}' is not a voice of this model; the voices are {}",
                  request.voice, allowed_voices(config));
    }
    if (auto it = config.speaker_dialects.find(lower_ascii(request.voice)); it != config.speaker_dialects.end()) {
      dialect = it->second;
    }
  }

  const std::string language = request.language.empty() ? "auto" : lower_ascii(request.language);
  std::optional<int32_t> language_id;
  if (language != "auto") {
    language_id = config.language_id(language);
    if (!language_id) {
      std::vector<std::string> names{"Auto"};
      for (const auto& [name, id] : config.language_ids) names.push_back(name);
      throw_error(ErrorCode::kInvalidArgument, "language '{}' is not supported; the languages are {}", request.language,
                  fmt::join(names, ", "));
    }
  }
  // A dialect speaker speaks its dialect when the language is Chinese or left to the model.
  if (!dialect.empty() && (language == "auto" || language == "chinese")) language_id = config.language_ids.at(dialect);

  std::vector<int32_t> prefix;
  if (language_id) {
    prefix = {config.codec_think_id, config.codec_think_bos_id, *language_id, config.codec_think_eos_id};
  } else {
    prefix = {config.codec_nothink_id, config.codec_think_bos_id, config.codec_think_eos_id};
  }
  if (speaker) prefix.push_back(*speaker);
  if (task == TtsModelType::kBase) prefix.push_back(-1);
  prefix.push_back(config.codec_pad_id);
  prefix.push_back(config.codec_bos_id);
  return prefix;
}

size_t TalkerPromptPlan::num_rows() const {
  const size_t head = num_instruct + 3 + (codec_prefix.size() - 1);
  if (!ref_codes.empty()) {
    const size_t text = num_ref_text + num_text + 1, codec = ref_frames + 1;
    return head + (non_streaming ? text + codec : codec);
  }
  return head + (non_streaming ? num_text + 2 : 1);
}

TalkerPromptPlan plan_talker_prompt(const SpeechRequest& request, const Talker& talker,
                                    const text::Tokenizer& tokenizer, int max_instructions_length) {
  const TalkerConfig& config = talker.config();
  if (blank(request.text)) throw_error(ErrorCode::kInvalidArgument, "text (input) must not be empty");
  const TtsModelType task = resolve_task_type(request, config);
  if (code_points(request.instructions) > static_cast<size_t>(max_instructions_length)) {
    throw_error(ErrorCode::kInvalidArgument,
                "instructions are {} characters long; at most {} are allowed (--tts-max-instructions-length)",
                code_points(request.instructions), max_instructions_length);
  }
  if (task == TtsModelType::kVoiceDesign && blank(request.instructions)) {
    throw_error(ErrorCode::kInvalidArgument, "instructions are required for VoiceDesign (they describe the voice)");
  }
  const int64_t h = talker.hidden_size();
  if (task == TtsModelType::kBase && static_cast<int64_t>(request.speaker_embedding.size()) != h) {
    throw_error(ErrorCode::kInvalidArgument,
                "speaker_embedding: Base needs the speaker's x-vector of {} floats (got {}), given or computed "
                "from ref_audio",
                h, request.speaker_embedding.size());
  }
  TalkerPromptPlan plan;
  plan.codec_prefix = codec_prefix(request, config);
  if (task == TtsModelType::kBase) plan.speaker_embedding = request.speaker_embedding;
  std::vector<int32_t> ref_ids;
  if (!request.ref_codes.empty()) {
    if (task != TtsModelType::kBase) {
      throw_error(ErrorCode::kInvalidArgument, "ref_audio: in-context cloning needs a Base checkpoint");
    }
    if (blank(request.ref_text)) {
      throw_error(ErrorCode::kInvalidArgument,
                  "ref_text is required for in-context voice cloning: the transcript of ref_audio");
    }
    const size_t groups = static_cast<size_t>(talker.num_code_groups());
    if (request.ref_codes.size() % groups != 0) {
      throw_error(ErrorCode::kInvalidArgument, "ref_code: {} codes are not whole frames of {}",
                  request.ref_codes.size(), groups);
    }
    for (size_t i = 0; i < request.ref_codes.size(); ++i) {
      const int32_t code = request.ref_codes[i];
      if (code < 0 || code >= talker.codebook_size()) {
        throw_error(ErrorCode::kInvalidArgument, "ref_code: frame {} codebook {} holds {}, outside [0, {})", i / groups,
                    i % groups, code, talker.codebook_size());
      }
    }
    plan.ref_codes = request.ref_codes;
    plan.ref_frames = request.ref_codes.size() / groups;
    const std::vector<int32_t> ref = tokenizer.encode("<|im_start|>assistant\n" + request.ref_text + "<|im_end|>\n");
    // Role (3 ids), the transcript, then <|im_end|> and a newline.
    if (ref.size() <= 5) {
      throw_error(ErrorCode::kInvalidArgument, "ref_text: '{}' does not tokenize to any text tokens", request.ref_text);
    }
    ref_ids.assign(ref.begin() + 3, ref.end() - 2);
  }

  const std::vector<int32_t> ids =
      tokenizer.encode("<|im_start|>assistant\n" + request.text + "<|im_end|>\n<|im_start|>assistant\n");
  // The layout is role (3 ids), the text, then 5 ids closing the turn and opening the next.
  if (ids.size() <= 8 || ids[0] != config.im_start_token_id || ids[1] != config.assistant_token_id) {
    throw_error(ErrorCode::kInvalidArgument, "text: '{}' does not tokenize to any text tokens", request.text);
  }
  std::vector<int32_t> instruct_ids;
  if (uses_instructions(task, config, request)) {
    instruct_ids = tokenizer.encode("<|im_start|>user\n" + request.instructions + "<|im_end|>\n");
  }

  // Everything on the text track goes through the text projection in one call: instructions,
  // role, text, then tts_pad, tts_bos, tts_eos.
  plan.text_track = instruct_ids;
  plan.text_track.insert(plan.text_track.end(), ids.begin(), ids.begin() + 3);
  plan.text_track.insert(plan.text_track.end(), ref_ids.begin(), ref_ids.end());
  plan.text_track.insert(plan.text_track.end(), ids.begin() + 3, ids.end() - 5);
  plan.text_track.push_back(config.tts_pad_token_id);
  plan.text_track.push_back(config.tts_bos_token_id);
  plan.text_track.push_back(config.tts_eos_token_id);
  plan.num_instruct = instruct_ids.size();
  plan.num_ref_text = ref_ids.size();
  plan.num_text = ids.size() - 8;
  plan.non_streaming = uses_non_streaming_layout(request, task);
  plan.text_ids.assign(ids.begin() + 3, ids.end() - 5);
  return plan;
}

namespace {

// One prompt from its plan and its text track's projected rows.
TalkerPrompt assemble_talker_prompt(const TalkerPromptPlan& plan, const float* projected, const Talker& talker) {
  const TalkerConfig& config = talker.config();
  const int64_t h = talker.hidden_size();
  auto text_row = [&](size_t i) { return projected + i * h; };
  const size_t pad_row = plan.text_track.size() - 3, bos_row = pad_row + 1, eos_row = pad_row + 2;
  const std::vector<int32_t>& prefix = plan.codec_prefix;
  const size_t n_prefix = prefix.size();
  const size_t num_text = plan.num_text;
  TalkerPrompt prompt;
  prompt.rows = Tensor::zeros({static_cast<int64_t>(plan.num_rows()), h}, DType::kF32);
  size_t row = 0;
  auto next_row = [&](size_t text_index) {
    float* out = prompt.rows.data<float>() + row++ * h;
    std::copy_n(text_row(text_index), h, out);
    return out;
  };
  for (size_t i = 0; i < plan.num_instruct + 3; ++i) next_row(i);
  for (size_t j = 0; j + 1 < n_prefix; ++j) {
    float* out = next_row(j + 2 < n_prefix ? pad_row : bos_row);
    if (prefix[j] < 0) {
      for (int64_t i = 0; i < h; ++i) out[i] += plan.speaker_embedding[i];
    } else {
      talker.add_codec_embedding(prefix[j], out);
    }
  }
  const size_t first_text = plan.num_instruct + 3;
  // The text-track rows of the decode steps: the text not in the prefill, then tts_eos.
  std::vector<size_t> trailing;
  if (!plan.ref_codes.empty()) {
    // ICL: text track [ref ++ text, tts_eos], codec track [bos, reference frames].
    const size_t t1 = plan.num_ref_text + num_text + 1, t2 = plan.ref_frames + 1;
    const size_t groups = plan.ref_codes.size() / plan.ref_frames;
    auto text_index = [&](size_t i) { return i + 1 < t1 ? first_text + i : eos_row; };
    auto add_codec = [&](size_t j, float* out) {
      if (j == 0) return talker.add_codec_embedding(config.codec_bos_id, out);
      talker.add_frame_embedding(std::span(plan.ref_codes).subspan((j - 1) * groups, groups), out);
    };
    if (plan.non_streaming) {
      for (size_t i = 0; i < t1; ++i) talker.add_codec_embedding(config.codec_pad_id, next_row(text_index(i)));
      for (size_t j = 0; j < t2; ++j) add_codec(j, next_row(pad_row));
      trailing.push_back(pad_row);
    } else {
      for (size_t j = 0; j < t2; ++j) add_codec(j, next_row(j < t1 ? text_index(j) : pad_row));
      for (size_t i = t2; i < t1; ++i) trailing.push_back(text_index(i));
      if (t1 <= t2) trailing.push_back(pad_row);
    }
  } else if (plan.non_streaming) {
    for (size_t i = 0; i < num_text; ++i) talker.add_codec_embedding(config.codec_pad_id, next_row(first_text + i));
    talker.add_codec_embedding(config.codec_pad_id, next_row(eos_row));
    talker.add_codec_embedding(config.codec_bos_id, next_row(pad_row));
    trailing.push_back(pad_row);
  } else {
    talker.add_codec_embedding(config.codec_bos_id, next_row(first_text));
    for (size_t i = 1; i < num_text; ++i) trailing.push_back(first_text + i);
    trailing.push_back(eos_row);
  }

  prompt.tts_pad = Tensor::empty({h}, DType::kF32);
  std::copy_n(text_row(pad_row), h, prompt.tts_pad.data<float>());
  prompt.trailing = Tensor::empty({static_cast<int64_t>(trailing.size()), h}, DType::kF32);
  for (size_t i = 0; i < trailing.size(); ++i) {
    std::copy_n(text_row(trailing[i]), h, prompt.trailing.data<float>() + i * h);
  }
  prompt.text_ids = plan.text_ids;
  return prompt;
}

}  // namespace

std::vector<TalkerPrompt> build_talker_prompts(std::span<const TalkerPromptPlan> plans, const Talker& talker) {
  std::vector<int32_t> tracks;
  for (const TalkerPromptPlan& plan : plans)
    tracks.insert(tracks.end(), plan.text_track.begin(), plan.text_track.end());
  const Tensor projected = talker.project_text(tracks);
  const int64_t h = talker.hidden_size();
  std::vector<TalkerPrompt> prompts;
  prompts.reserve(plans.size());
  size_t at = 0;
  for (const TalkerPromptPlan& plan : plans) {
    prompts.push_back(assemble_talker_prompt(plan, projected.data<float>() + at * h, talker));
    at += plan.text_track.size();
  }
  return prompts;
}

TalkerPrompt build_talker_prompt(const SpeechRequest& request, const Talker& talker, const text::Tokenizer& tokenizer,
                                 int max_instructions_length) {
  const TalkerPromptPlan plan = plan_talker_prompt(request, talker, tokenizer, max_instructions_length);
  return std::move(build_talker_prompts(std::span(&plan, 1), talker).front());
}

}  // namespace omni::model::qwen3_tts
