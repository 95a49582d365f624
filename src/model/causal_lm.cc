#include "model/causal_lm.h"

#include "base/error.h"

namespace omni::model {

std::optional<MultimodalPrompt> CausalLm::prepare_multimodal_prompt(std::span<const int32_t>,
                                                                    const Json& additional_information) {
  auto media = additional_information.find(kMultiModalData);
  if (media == additional_information.end() || media->is_null() || media->empty()) return std::nullopt;
  std::string source = "the request";
  if (media->is_object() && !media->begin()->empty() && media->begin()->is_array()) {
    const Json& first = media->begin()->front();
    if (first.is_object() && first.contains("source") && first["source"].is_string()) source = first["source"];
  }
  throw_error(ErrorCode::kInvalidArgument, "'{}': the served model reads no {} input", source,
              media->is_object() ? media->begin().key() : std::string("media"));
}

std::vector<uint8_t> CausalLm::encode_downstream_rows(const DownstreamRows& rows) const {
  (void)rows;
  throw_error(ErrorCode::kUnsupported, "this model gives no rows to a downstream stage");
}

void CausalLm::launch_step(const ForwardBatch& batch, std::span<const tensor::ops::SamplingParams> params,
                           std::span<const int32_t> previous_rows) {
  if (!previous_rows.empty() && previous_rows.size() != batch.token_ids.size()) {
    throw_error(ErrorCode::kInvalidArgument, "launch_step: {} previous rows for {} tokens", previous_rows.size(),
                batch.token_ids.size());
  }
  const ForwardBatch* run = &batch;
  ForwardBatch substituted;
  for (size_t i = 0; i < previous_rows.size(); ++i) {
    const int32_t row = previous_rows[i];
    if (row < 0) continue;
    if (static_cast<size_t>(row) >= launched_ids_.size()) {
      throw_error(ErrorCode::kInvalidArgument, "launch_step: token {} reads row {} of a previous step with {} rows", i,
                  row, launched_ids_.size());
    }
    if (run == &batch) {
      substituted = batch;
      run = &substituted;
    }
    substituted.token_ids[i] = launched_ids_[row];
  }
  std::vector<int32_t> ids;
  if (params.empty()) {
    forward_greedy(*run, ids);
  } else {
    forward_sample(*run, params, ids);
  }
  launched_ids_ = ids;
  unwaited_ids_.push_back(std::move(ids));
}

void CausalLm::wait_step(std::vector<int32_t>& token_ids) {
  if (unwaited_ids_.empty()) throw_error(ErrorCode::kInternal, "wait_step: no launched step is outstanding");
  token_ids = std::move(unwaited_ids_.front());
  unwaited_ids_.pop_front();
}

}  // namespace omni::model
