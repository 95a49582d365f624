#include "model/z_image/text_encoder.h"

#include <algorithm>

#include "base/error.h"
#include "model/hf_config.h"
#include "model/safetensors.h"

namespace omni::model::z_image {

TextEncoder::TextEncoder(const std::filesystem::path& dir, const Placement& placement) {
  const auto encoder_dir = dir / "text_encoder";
  const auto tokenizer_dir = dir / "tokenizer";
  tokenizer_ = text::Tokenizer::load(tokenizer_dir);
  chat_template_ = text::ChatTemplate::load(tokenizer_dir);
  if (!chat_template_) {
    throw_error(ErrorCode::kLoadFailed, "{}: the tokenizer has no chat template (Z-Image renders the prompt with it)",
                tokenizer_dir.string());
  }
  TextModelConfig config = read_text_model_config(encoder_dir);
  if (config.num_hidden_layers < 2) {
    throw_error(ErrorCode::kLoadFailed, "{}/config.json: a text encoder of {} layer(s) has no second-to-last layer",
                encoder_dir.string(), config.num_hidden_layers);
  }
  // The last layer and the final norm do not feed hidden_states[-2]; nor does an output head.
  config.num_hidden_layers -= 1;
  config.sliding_window.resize(static_cast<size_t>(config.num_hidden_layers));
  config.tie_word_embeddings = true;
  DecoderWeights weights;
  weights.prefix = Checkpoint::open(encoder_dir).contains("model.embed_tokens.weight") ? "model." : "";
  hidden_size_ = config.hidden_size;
  CausalLmLoadOptions options;
  options.device = placement.device;
  options.dtype = placement.dtype;
  model_ = std::make_unique<DecoderLm>(encoder_dir, config, DecoderVariant{.qk_norm = true}, weights, options);
}

std::vector<int32_t> TextEncoder::tokenize(const std::string& prompt, int max_sequence_length) const {
  OrderedJson messages = OrderedJson::array();
  messages.push_back({{"role", "user"}, {"content", prompt}});
  const std::string rendered =
      chat_template_->apply(messages, OrderedJson(), /*add_generation_prompt=*/true, {{"enable_thinking", true}});
  std::vector<int32_t> ids = tokenizer_->encode(rendered);
  if (max_sequence_length > 0 && static_cast<int>(ids.size()) > max_sequence_length) {
    ids.resize(static_cast<size_t>(max_sequence_length));
  }
  return ids;
}

tensor::Tensor TextEncoder::encode(const std::vector<int32_t>& ids) {
  if (ids.empty()) throw_error(ErrorCode::kInvalidArgument, "text encoder: no tokens to encode");
  const int32_t n = static_cast<int32_t>(ids.size());
  const int blocks = (n + kKvBlockSize - 1) / kKvBlockSize;
  if (blocks > kv_blocks_) {
    model_->init_kv_cache(blocks);
    kv_blocks_ = blocks;
  }
  ForwardBatch batch;
  batch.token_ids = ids;
  batch.all_logits = true;
  SequenceSlice seq;
  seq.query_len = n;
  for (int b = 0; b < blocks; ++b) seq.block_table.push_back(b);
  batch.seqs.push_back(seq);
  for (int32_t i = 0; i < n; ++i) batch.positions.push_back(i);
  tensor::Tensor hidden;
  model_->forward_hidden(batch, hidden);
  return host_f32(hidden);
}

}  // namespace omni::model::z_image
