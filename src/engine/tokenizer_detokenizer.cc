#include "engine/tokenizer_detokenizer.h"

#include "text/tokenizer/incremental_decoder.h"

namespace omni::engine {

namespace {

class IncrementalDecoderStream : public DetokenizerStream {
 public:
  IncrementalDecoderStream(const text::Tokenizer& tokenizer, bool skip_special_tokens)
      : decoder_(tokenizer, skip_special_tokens) {}

  std::string push(int32_t token_id) override { return decoder_.push(token_id); }

 private:
  text::IncrementalDecoder decoder_;
};

}  // namespace

std::unique_ptr<DetokenizerStream> TokenizerDetokenizer::start(std::span<const int32_t>,
                                                               bool skip_special_tokens) const {
  return std::make_unique<IncrementalDecoderStream>(tokenizer_, skip_special_tokens);
}

}  // namespace omni::engine
