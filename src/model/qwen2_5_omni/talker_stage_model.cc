#include "model/qwen2_5_omni/talker_stage_model.h"

#include <algorithm>
#include <cctype>

#include "base/error.h"
#include "model/qwen2_5_omni/speaker_dict.h"
#include "model/qwen2_5_omni/thinker.h"
#include "model/qwen2_5_omni/token2wav_config.h"
#include "model/qwen3_tts/codec_frames.h"
#include "model/safetensors.h"
#include "model/thinker_payload.h"

namespace omni::model::qwen2_5_omni {

namespace {

using tensor::DType;
using tensor::Tensor;

constexpr int kDefaultMaxCodes = 4096;
constexpr const char* kDefaultSpeaker = "chelsie";

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

std::map<std::string, int64_t> read_speaker_bos_tokens(const std::filesystem::path& dir) {
  const std::filesystem::path file = dir / "config.json";
  const Json config = read_json_file(file);
  auto t2w = config.find("token2wav_config");
  if (t2w == config.end()) throw_error(ErrorCode::kLoadFailed, "{}: missing field 'token2wav_config'", file.string());
  const Token2WavConfig c = parse_token2wav_config(config, file.string());
  const SpeakerDict dict = SpeakerDict::load(dir / "spk_dict.pt", c.dit.enc_emb_dim, c.dit.mel_dim);
  std::map<std::string, int64_t> out;
  for (const std::string& name : dict.names()) out[name] = dict.find(name)->bos_token;
  return out;
}

struct TalkerStageModel::Request final : ArRequestState {
  std::string id;
  std::string speaker;  // lower case
  bool input_open = true;
  // The thinker's rows so far.
  int64_t width = 0;
  size_t prompt_length = 0;
  std::vector<int32_t> ids;
  std::vector<float> embeddings, hidden, positions;
  // Once complete: the prompt, the codes sampled so far.
  bool built = false;
  TalkerPrompt prompt;
  TalkerTextRows text;
  int64_t steps = 0;
  int32_t last_code = 0;
};

TalkerStageModel::TalkerStageModel(const std::filesystem::path& dir, tensor::Device device, bool random_weights,
                                   std::optional<tensor::DType> dtype)
    : TalkerStageModel(dir, read_speaker_bos_tokens(dir), device, random_weights, dtype) {}

TalkerStageModel::TalkerStageModel(const std::filesystem::path& dir, const std::map<std::string, int64_t>& speakers,
                                   tensor::Device device, bool random_weights, std::optional<tensor::DType> dtype) {
  const std::filesystem::path file = dir / "config.json";
  const Json config = read_json_file(file);
  const TalkerConfig talker = parse_talker_config(config, file.string());
  talker_ = std::make_unique<Talker>(dir, talker, device, random_weights, dtype);
  // The thinker's embeddings of the text rows the talker adds itself.
  const TextModelConfig thinker = parse_thinker_text_config(config, file.string());
  const Checkpoint ckpt = random_weights ? Checkpoint::random(dir, 0) : Checkpoint::open(dir);
  const int64_t e = talker.embedding_size;
  if (thinker.hidden_size != e) {
    throw_error(ErrorCode::kLoadFailed, "{}: talker_config.embedding_size {} is not the thinker's hidden size {}",
                file.string(), e, thinker.hidden_size);
  }
  const auto row = [&](int64_t id, const std::string& what) {
    if (id < 0 || id >= thinker.vocab_size) {
      throw_error(ErrorCode::kLoadFailed, "{}: {} {} is outside the thinker's vocabulary of {}", file.string(), what,
                  id, thinker.vocab_size);
    }
    std::vector<float> out(static_cast<size_t>(e));
    ckpt.load_f32_slice_into("thinker.model.embed_tokens.weight", {thinker.vocab_size, e}, 0, id, 1, out.data());
    return out;
  };
  eos_pad_.text_eos = row(talker.text_eos, "talker_config.tts_text_end_token_id");
  eos_pad_.text_pad = row(talker.text_pad, "talker_config.tts_text_pad_token_id");
  for (const auto& [name, bos] : speakers) {
    speaker_bos_[lower(name)] = row(bos, "the bos_token of speaker " + name);
    speaker_names_[lower(name)] = name;
  }
  if (speaker_bos_.empty()) throw_error(ErrorCode::kLoadFailed, "{}: the talker has no speakers", dir.string());
  info_.vocab_size = talker.text.vocab_size;
  info_.max_position_embeddings = talker.text.max_position_embeddings;
  info_.eos_token_ids = talker.text.eos_token_ids;
  info_.text_tokens = false;
}

std::vector<std::string> TalkerStageModel::speakers() const {
  std::vector<std::string> names;
  for (const auto& [key, name] : speaker_names_) names.push_back(name);
  return names;
}

void TalkerStageModel::forward(const ForwardBatch& /*batch*/, std::vector<float>& /*logits*/) {
  throw_error(ErrorCode::kUnsupported, "the Qwen2.5-Omni talker builds its own input rows; it takes no token ids");
}

ArSamplingDefaults TalkerStageModel::sampling_defaults() const {
  ArSamplingDefaults d;
  d.temperature = 0.9f;
  d.top_k = 40;
  d.top_p = 0.8f;
  d.repetition_penalty = 1.05f;
  return d;
}

ArRequestStart TalkerStageModel::start_request(const ArRequestInput& input) {
  const std::string_view id = input.request_id;
  const Json& info = input.additional_information;
  if (!info.is_object())
    throw_error(ErrorCode::kInvalidArgument, "request {}: additional_information must be an object", id);
  auto request = std::make_unique<Request>();
  request->id = std::string(id);
  const std::optional<std::string> voice = request_field<std::string>(info, "voice", id);
  std::string speaker = lower(voice.value_or(kDefaultSpeaker));
  if (!voice && !speaker_bos_.contains(speaker)) speaker = speaker_bos_.begin()->first;
  if (!speaker_bos_.contains(speaker)) {
    throw_error(ErrorCode::kInvalidArgument, "request {}: voice '{}' is not a speaker of this model (speakers: {})", id,
                *voice, fmt::join(speakers(), ", "));
  }
  request->speaker = speaker;
  if (input.inputs.empty()) {
    throw_error(ErrorCode::kInvalidArgument, "request {}: the talker starts from the thinker's rows, and none came",
                id);
  }
  take(*request, input.inputs, !input.input_open);
  ArRequestStart start;
  start.num_prompt_rows = static_cast<int>(request->prompt_length) + 2;
  start.max_tokens = input.max_tokens.value_or(kDefaultMaxCodes);
  start.seed = input.seed;
  const int32_t bos = talker_->config().codec_bos;
  start.suppressed_tokens = {TokenRange{bos, bos + 1}};
  start.state = std::move(request);
  return start;
}

void TalkerStageModel::add_input(ArRequestState& state, std::span<const std::span<const uint8_t>> payloads, bool last) {
  take(static_cast<Request&>(state), payloads, last);
}

void TalkerStageModel::take(Request& r, std::span<const std::span<const uint8_t>> payloads, bool last) const {
  for (std::span<const uint8_t> bytes : payloads) {
    ThinkerPayload p = decode_thinker_payload(bytes);
    const auto rows = static_cast<int64_t>(r.ids.size());
    if (p.first_position != rows || (rows > 0 && p.width != r.width) || (rows == 0 && p.prompt_length == 0) ||
        p.hidden.size() != p.embeddings.size()) {
      throw_error(ErrorCode::kInvalidArgument,
                  "request {}: a thinker payload from position {} of width {} with {} hidden rows after {} rows (each "
                  "must continue the last and carry every row's hidden state)",
                  r.id, p.first_position, p.width, p.hidden.size() / std::max(p.width, 1), rows);
    }
    if (rows == 0) {
      r.width = p.width;
      r.prompt_length = static_cast<size_t>(p.prompt_length);
      r.positions = std::move(p.positions);
    }
    r.ids.insert(r.ids.end(), p.ids.begin(), p.ids.end());
    r.embeddings.insert(r.embeddings.end(), p.embeddings.begin(), p.embeddings.end());
    r.hidden.insert(r.hidden.end(), p.hidden.begin(), p.hidden.end());
  }
  if (!last) return;
  r.input_open = false;
  r.text = eos_pad_;
  r.text.speaker_bos = speaker_bos_.at(r.speaker);
  ThinkerOutput thinker{.ids = r.ids,
                        .prompt_length = r.prompt_length,
                        .width = r.width,
                        .embeddings = r.embeddings,
                        .hidden = r.hidden,
                        .positions = r.positions};
  try {
    r.prompt = build_talker_prompt(*talker_, thinker, r.text);
  } catch (const Error& e) {
    throw_error(ErrorCode::kInvalidArgument, "request {}: {}", r.id, e.what());
  }
  r.built = true;
  r.embeddings = {};
  r.hidden = {};
}

bool TalkerStageModel::ready(const ArRequestState& state) const { return static_cast<const Request&>(state).built; }

void TalkerStageModel::forward_step(const ForwardBatch& batch, std::span<ArRequestState* const> states,
                                    std::vector<float>& logits) {
  const int64_t e = talker_->config().embedding_size;
  const auto tokens = static_cast<int64_t>(batch.positions.size());
  Tensor rows = Tensor::empty({tokens, e}, DType::kF32);
  float* out = rows.data<float>();
  bool mrope = false;
  for (ArRequestState* state : states) mrope |= !static_cast<Request*>(state)->prompt.mrope_positions.empty();
  ForwardBatch step = batch;
  if (mrope) step.mrope_positions.assign(static_cast<size_t>(3 * tokens), 0.0f);
  for (size_t i = 0; i < batch.seqs.size(); ++i) {
    const SequenceSlice& seq = batch.seqs[i];
    Request& r = *static_cast<Request*>(states[i]);
    const int64_t prompt_rows = r.prompt.rows.dim(0);
    for (int32_t k = 0; k < seq.query_len; ++k) {
      const int64_t t = seq.query_start + k;
      const int64_t pos = batch.positions[static_cast<size_t>(t)];
      float* row = out + t * e;
      if (pos < prompt_rows) {
        std::copy_n(r.prompt.rows.data<float>() + pos * e, e, row);
      } else {
        std::copy_n(talker_text_row(r.prompt, r.text, pos - prompt_rows), e, row);
        talker_->add_codec_embedding(r.last_code, row);
      }
      if (!mrope) continue;
      for (int s = 0; s < 3; ++s) {
        step.mrope_positions[static_cast<size_t>(s * tokens + t)] =
            r.prompt.mrope_positions.empty() ? static_cast<float>(pos)
            : pos < prompt_rows              ? r.prompt.mrope_positions[static_cast<size_t>(s * prompt_rows + pos)]
                                             : static_cast<float>(pos) + r.prompt.rope_delta;
      }
    }
  }
  talker_->forward(step, rows, logits);
}

void TalkerStageModel::finish_step(std::span<const ArSampledRow> rows, std::vector<std::vector<uint8_t>>& outputs) {
  outputs.assign(rows.size(), {});
  const TalkerConfig& c = talker_->config();
  for (size_t i = 0; i < rows.size(); ++i) {
    auto& r = *static_cast<Request*>(rows[i].state);
    r.last_code = rows[i].token;
    ++r.steps;
    if (rows[i].token == c.codec_pad || rows[i].token == c.codec_eos) continue;
    const int32_t code = rows[i].token;
    outputs[i] = qwen3_tts::encode_codec_frames(std::span<const int32_t>(&code, 1), 1);
  }
}

}  // namespace omni::model::qwen2_5_omni
