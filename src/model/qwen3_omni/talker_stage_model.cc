#include "model/qwen3_omni/talker_stage_model.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "base/error.h"
#include "model/qwen3_omni/talker_prompt.h"
#include "model/thinker_payload.h"

namespace omni::model::qwen3_omni {

namespace {

using tensor::DType;
using tensor::Tensor;
using Projection = qwen3_tts::Talker::Projection;

// Qwen3OmniMoeForConditionalGeneration.generate's talker defaults.
constexpr int kDefaultMaxFrames = 4096;
constexpr const char* kDefaultSpeaker = "ethan";

bool flag(const Json& engine_args, const char* key) {
  auto it = engine_args.find(key);
  if (it == engine_args.end() || it->is_null()) return true;
  if (!it->is_boolean()) throw_error(ErrorCode::kInvalidConfig, "engine argument {} must be a boolean", key);
  return it->get<bool>();
}

// A host float32 [rows, width] tensor of `values`.
Tensor matrix(std::span<const float> values, int64_t rows, int64_t width) {
  Tensor t = Tensor::empty({rows, width}, DType::kF32);
  std::copy(values.begin(), values.end(), t.data<float>());
  return t;
}

}  // namespace

struct TalkerStageModel::Request final : qwen3_tts::TalkerStream {
  std::string id;
  int32_t speaker = 0;
  bool input_open = false;
  // The thinker's rows so far: ids, embeddings, the prompt's hidden states, tts_bos/eos/pad.
  int64_t width = 0;
  size_t prompt_length = 0;
  TalkerPromptSize size;
  std::vector<int32_t> ids;
  std::vector<float> embeddings, hidden, specials;
  std::vector<float> thinker_positions;  // the thinker prompt's M-RoPE streams (empty: plain)
  // From the reply's first token on: the prompt and the text track so far (the reply's later rows,
  // then tts_eos once it is complete).
  bool built = false;
  qwen3_tts::TalkerPrompt prompt;
  std::vector<float> trailing;
  int64_t trailing_rows = 0;
  // Text-track rows that came but are not projected yet (thinker width; tts_eos last once the
  // reply is complete): forward_step projects those of its batch together, so that taking a
  // payload does no device work (one per thinker token and request, while the thinker shares the
  // device, would each wait for its turn there).
  std::vector<float> unprojected;
  int64_t unprojected_rows = 0;

  const Tensor& prompt_rows() const override { return prompt.rows; }
  const float* text_track(int64_t k) const override {
    const int64_t h = prompt.tts_pad.numel();
    return k < trailing_rows ? trailing.data() + k * h : prompt.tts_pad.data<float>();
  }
  int64_t rows() const { return static_cast<int64_t>(ids.size()); }
};

TalkerStageModel::TalkerStageModel(const std::filesystem::path& dir, const Json& engine_args, tensor::Device device,
                                   bool random_weights, std::optional<tensor::DType> dtype)
    : config_(read_talker_config(dir)) {
  talker_ = std::make_unique<qwen3_tts::Talker>(dir, config_.talker, device, random_weights, dtype);
  steps_ = std::make_unique<qwen3_tts::TalkerSteps>(*talker_, "Qwen3-Omni talker");
  frame_steps_ = flag(engine_args, "code_predictor_frame_steps");
  decode_steps_ = flag(engine_args, "talker_decode_steps");
  info_.vocab_size = talker_->codec_vocab_size();
  info_.max_position_embeddings = config_.talker.talker.max_position_embeddings;
  info_.eos_token_ids = {config_.talker.codec_eos_id};
  info_.text_tokens = false;
}

void TalkerStageModel::forward(const ForwardBatch& /*batch*/, std::vector<float>& /*logits*/) {
  throw_error(ErrorCode::kUnsupported, "the Qwen3-Omni talker builds its own input rows; it takes no token ids");
}

bool TalkerStageModel::prepare_decode_steps(const std::vector<int>& batch_sizes, int max_blocks_per_seq,
                                            bool capture_graphs) {
  return decode_steps_ && steps_->prepare_decode_steps(batch_sizes, max_blocks_per_seq, capture_graphs);
}

size_t TalkerStageModel::activation_bytes(int max_tokens, int max_logit_rows) const {
  return talker_->talker_stack().activation_bytes(max_tokens, max_logit_rows);
}

ArSamplingDefaults TalkerStageModel::sampling_defaults() const {
  ArSamplingDefaults d;
  d.temperature = 0.9f;
  d.top_k = 50;
  d.top_p = 1.0f;
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
  const std::vector<std::string> speakers = config_.talker.speaker_names();
  const std::optional<std::string> voice = request_field<std::string>(info, "voice", id);
  std::optional<int32_t> speaker = config_.talker.speaker_id(voice.value_or(kDefaultSpeaker));
  if (!voice && !speaker && !speakers.empty()) speaker = config_.talker.speaker_id(speakers.front());
  if (!speaker) {
    throw_error(ErrorCode::kInvalidArgument, "request {}: voice '{}' is not a speaker of this model (speakers: {})", id,
                voice.value_or(kDefaultSpeaker), fmt::join(speakers, ", "));
  }
  request->speaker = *speaker;
  // The code predictor draws as the model's generate does, greedily when the talker does.
  if (input.greedy) {
    request->predictor = {.temperature = 0.0f, .top_k = 0, .top_p = 1.0f};
  } else {
    request->predictor = {.temperature = 1.0f, .top_k = 50, .top_p = 0.8f};
  }
  if (input.inputs.empty()) {
    throw_error(ErrorCode::kInvalidArgument, "request {}: the talker starts from the thinker's rows, and none came",
                id);
  }
  request->input_open = true;
  take(*request, input.inputs, !input.input_open);
  ArRequestStart start;
  start.num_prompt_rows = static_cast<int>(request->size.rows);
  start.max_tokens = input.max_tokens.value_or(kDefaultMaxFrames);
  start.seed = input.seed;
  start.suppressed_tokens = qwen3_tts::suppressed_codec_tokens(*talker_, input.ignore_eos);
  start.state = std::move(request);
  return start;
}

void TalkerStageModel::add_input(ArRequestState& state, std::span<const std::span<const uint8_t>> payloads, bool last) {
  take(static_cast<Request&>(state), payloads, last);
}

void TalkerStageModel::take(Request& r, std::span<const std::span<const uint8_t>> payloads, bool last) const {
  for (std::span<const uint8_t> bytes : payloads) {
    ThinkerPayload p = decode_thinker_payload(bytes);
    if (p.first_position != r.rows() || (r.width != 0 && p.width != r.width) ||
        (r.rows() == 0 && (p.specials.size() != 3 * static_cast<size_t>(p.width) || p.prompt_length == 0 ||
                           static_cast<size_t>(p.prompt_length) > p.ids.size()))) {
      throw_error(ErrorCode::kInvalidArgument,
                  "request {}: a thinker payload from position {} of width {} after {} rows of width {} (the first "
                  "must hold the whole prompt and the special embeddings)",
                  r.id, p.first_position, p.width, r.rows(), r.width);
    }
    if (p.width != config_.talker.text_hidden_size) {
      throw_error(ErrorCode::kInvalidArgument, "request {}: thinker rows of width {}, the talker reads {}", r.id,
                  p.width, config_.talker.text_hidden_size);
    }
    if (r.rows() == 0) {
      r.width = p.width;
      r.prompt_length = static_cast<size_t>(p.prompt_length);
      r.specials = std::move(p.specials);
      r.thinker_positions = std::move(p.positions);
      r.size = talker_prompt_size(config_, std::span<const int32_t>(p.ids).first(r.prompt_length));
    }
    // Rows before the reply's second token build the prompt; the later ones are the text track.
    const int64_t before = r.rows(), count = static_cast<int64_t>(p.ids.size());
    const int64_t keep = std::clamp<int64_t>(r.size.thinker_rows - before, 0, count);
    r.ids.insert(r.ids.end(), p.ids.begin(), p.ids.end());
    if (!r.built) {
      r.embeddings.insert(r.embeddings.end(), p.embeddings.begin(), p.embeddings.begin() + keep * r.width);
      r.hidden.insert(r.hidden.end(), p.hidden.begin(), p.hidden.end());
    }
    if (!r.built && r.rows() >= r.size.thinker_rows) {
      const int64_t n = r.size.thinker_rows;
      ThinkerRows rows;
      rows.ids = r.ids;
      rows.prompt_length = r.prompt_length;
      rows.embeddings = matrix(r.embeddings, n, r.width);
      rows.accepted_hidden = matrix(r.hidden, static_cast<int64_t>(r.hidden.size()) / r.width, r.width);
      rows.special_embeddings = matrix(r.specials, 3, r.width);
      rows.complete = false;
      r.prompt = build_talker_prompt(*talker_, config_, rows, r.speaker);
      TalkerPositions positions =
          talker_positions(config_, std::span<const int32_t>(r.ids).first(r.prompt_length), r.thinker_positions);
      r.mrope_positions = std::move(positions.streams);
      r.rope_delta = positions.rope_delta;
      r.built = true;
      spdlog::debug("Qwen3-Omni talker: request {}: prompt of {} rows built from {} thinker rows", r.id, r.size.rows,
                    r.rows());
      r.embeddings = {};
      r.hidden = {};
    }
    if (r.built && keep < count) {
      r.unprojected.insert(r.unprojected.end(), p.embeddings.begin() + keep * r.width, p.embeddings.end());
      r.unprojected_rows += count - keep;
    }
  }
  if (!last) return;
  r.input_open = false;
  if (!r.built) {
    throw_error(ErrorCode::kInvalidArgument,
                "request {}: the thinker's reply ended before its first token reached the talker ({} of the {} rows "
                "the talker's prompt is built from)",
                r.id, r.rows(), r.size.thinker_rows);
  }
  // The specials are tts_bos, tts_eos, tts_pad.
  const auto tts_eos = r.specials.begin() + r.width;
  r.unprojected.insert(r.unprojected.end(), tts_eos, tts_eos + r.width);
  ++r.unprojected_rows;
}

void TalkerStageModel::project_text_rows(std::span<Request* const> requests) const {
  int64_t rows = 0, width = 0;
  for (const Request* r : requests) {
    rows += r->unprojected_rows;
    if (r->unprojected_rows > 0) width = r->width;
  }
  if (rows == 0) return;
  Tensor all = Tensor::empty({rows, width}, DType::kF32);
  float* to = all.data<float>();
  for (const Request* r : requests) to = std::copy(r->unprojected.begin(), r->unprojected.end(), to);
  const Tensor text = talker_->project_rows(all, Projection::kText);
  const int64_t h = text.dim(1);
  const float* from = text.data<float>();
  for (Request* r : requests) {
    const int64_t n = r->unprojected_rows;
    r->trailing.insert(r->trailing.end(), from, from + n * h);
    r->trailing_rows += n;
    from += n * h;
    r->unprojected.clear();
    r->unprojected_rows = 0;
  }
}

bool TalkerStageModel::ready(const ArRequestState& state) const {
  const auto& r = static_cast<const Request&>(state);
  if (!r.built) return false;
  // Decode step k (frames = k + 1) adds text row k.
  return !r.input_open || r.frames == 0 || r.frames - 1 < r.trailing_rows + r.unprojected_rows;
}

void TalkerStageModel::prepare_requests(int max_num_seqs, const std::vector<int>& batch_sizes, bool capture_graphs) {
  steps_->prepare(max_num_seqs, batch_sizes, capture_graphs, frame_steps_);
}

void TalkerStageModel::acquire(ArRequestState& state) { steps_->acquire(static_cast<Request&>(state)); }

void TalkerStageModel::release(ArRequestState& state) { steps_->release(static_cast<Request&>(state)); }

void TalkerStageModel::forward_step(const ForwardBatch& batch, std::span<ArRequestState* const> states,
                                    std::vector<float>& logits) {
  std::vector<Request*> requests;
  for (ArRequestState* state : states) requests.push_back(static_cast<Request*>(state));
  project_text_rows(requests);
  std::vector<qwen3_tts::TalkerStream*> streams(requests.begin(), requests.end());
  steps_->forward(batch, streams, logits);
}

void TalkerStageModel::finish_step(std::span<const ArSampledRow> rows, std::vector<std::vector<uint8_t>>& outputs) {
  steps_->finish(rows, outputs);
}

}  // namespace omni::model::qwen3_omni
