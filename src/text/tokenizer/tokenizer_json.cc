#include "text/tokenizer/tokenizer_json.h"

#include "base/error.h"

namespace omni::text {
namespace {

// Forwards every event to a DOM builder, except the contents of model.vocab and model.merges,
// which it stores itself (the DOM gets a null in their place).
class Reader {
 public:
  Reader(TokenizerJson& out, std::string source) : out_(out), dom_(out.spec), source_(std::move(source)) {}

  bool null() {
    return value([&] { return dom_.null(); }, "null");
  }
  bool boolean(bool v) {
    return value([&] { return dom_.boolean(v); }, "a boolean");
  }
  bool number_integer(Json::number_integer_t v) {
    if (mode_ == Mode::kVocab) return vocab_id(v);
    return value([&] { return dom_.number_integer(v); }, "a number");
  }
  bool number_unsigned(Json::number_unsigned_t v) {
    if (mode_ == Mode::kVocab) return vocab_id(static_cast<int64_t>(v));
    return value([&] { return dom_.number_unsigned(v); }, "a number");
  }
  bool number_float(Json::number_float_t v, const Json::string_t& s) {
    return value([&] { return dom_.number_float(v, s); }, "a number");
  }
  bool binary(Json::binary_t& v) {
    return value([&] { return dom_.binary(v); }, "binary data");
  }

  bool string(Json::string_t& s) {
    if (mode_ == Mode::kMerges) {
      if (pair_depth_ > 0) {
        pair_.push_back(std::move(s));
      } else {
        out_.merges.push_back(split_merge(s, merge_location()));
      }
      return true;
    }
    return value([&] { return dom_.string(s); }, "a string");
  }

  bool start_object(std::size_t n) {
    if (mode_ == Mode::kPendingVocab) {
      mode_ = Mode::kVocab;
      if (n != static_cast<std::size_t>(-1)) out_.vocab.reserve(n);
      return dom_.null();
    }
    if (mode_ != Mode::kDom) fail("model.merges holds an object");
    keys_.resize(++depth_ + 1);
    return dom_.start_object(n);
  }

  bool key(Json::string_t& k) {
    if (mode_ == Mode::kVocab) {
      key_ = std::move(k);
      return true;
    }
    keys_[depth_] = k;
    // model.vocab and model.merges: depth 2, under the root's "model" key.
    if (depth_ == 2 && keys_[1] == "model" && (k == "vocab" || k == "merges")) {
      mode_ = k == "vocab" ? Mode::kPendingVocab : Mode::kPendingMerges;
    }
    return dom_.key(k);
  }

  bool end_object() {
    if (mode_ == Mode::kVocab) {
      mode_ = Mode::kDom;
      return true;
    }
    --depth_;
    return dom_.end_object();
  }

  bool start_array(std::size_t n) {
    if (mode_ == Mode::kPendingMerges) {
      mode_ = Mode::kMerges;
      return dom_.null();
    }
    if (mode_ == Mode::kMerges) {
      if (pair_depth_ > 0) fail(fmt::format("{} is nested too deeply", merge_location()));
      pair_depth_ = 1;
      pair_.clear();
      return true;
    }
    if (mode_ != Mode::kDom) fail("model.vocab holds an array");
    keys_.resize(++depth_ + 1);
    return dom_.start_array(n);
  }

  bool end_array() {
    if (mode_ == Mode::kMerges) {
      if (pair_depth_ == 0) {
        mode_ = Mode::kDom;
        return true;
      }
      pair_depth_ = 0;
      if (pair_.size() != 2) fail(fmt::format("{} is not a pair of tokens", merge_location()));
      out_.merges.emplace_back(std::move(pair_[0]), std::move(pair_[1]));
      return true;
    }
    --depth_;
    return dom_.end_array();
  }

  bool parse_error(std::size_t position, const std::string& last_token, const nlohmann::detail::exception& e) {
    throw_error(ErrorCode::kLoadFailed, "{}: JSON syntax error at byte {} near '{}': {}", source_, position, last_token,
                e.what());
  }

 private:
  enum class Mode { kDom, kPendingVocab, kVocab, kPendingMerges, kMerges };

  [[noreturn]] void fail(const std::string& what) const {
    throw_error(ErrorCode::kLoadFailed, "{}: {}", source_, what);
  }

  std::string merge_location() const { return fmt::format("{}: model.merges[{}]", source_, out_.merges.size()); }

  template <typename F>
  bool value(F&& forward, const char* what) {
    switch (mode_) {
      case Mode::kDom:
        return forward();
      case Mode::kVocab:
        fail(fmt::format("model.vocab['{}'] is {}, not a token id", key_, what));
      case Mode::kMerges:
        fail(fmt::format("{} is {}, not tokens", merge_location(), what));
      default:
        fail(fmt::format("model.{} is {}", mode_ == Mode::kPendingVocab ? "vocab" : "merges", what));
    }
  }

  bool vocab_id(int64_t id) {
    if (id < 0 || id > INT32_MAX) fail(fmt::format("model.vocab['{}'] has the invalid id {}", key_, id));
    out_.vocab.emplace(std::move(key_), static_cast<int32_t>(id));
    return true;
  }

  TokenizerJson& out_;
  nlohmann::detail::json_sax_dom_parser<Json> dom_;
  std::string source_;
  Mode mode_ = Mode::kDom;
  int depth_ = 0;
  std::vector<std::string> keys_{1};
  std::string key_;
  int pair_depth_ = 0;
  std::vector<std::string> pair_;
};

}  // namespace

std::pair<std::string, std::string> split_merge(std::string_view merge, std::string_view where) {
  const size_t space = merge.find(' ');
  if (space == std::string_view::npos || space == 0 || space + 1 >= merge.size() ||
      merge.find(' ', space + 1) != std::string_view::npos) {
    throw_error(ErrorCode::kLoadFailed, "{}: merge '{}' is not two tokens separated by one space", where, merge);
  }
  return {std::string(merge.substr(0, space)), std::string(merge.substr(space + 1))};
}

TokenizerJson read_tokenizer_json(const std::filesystem::path& file) {
  const std::string text = read_text_file(file);
  TokenizerJson out;
  Reader reader(out, file.string());
  Json::sax_parse(text, &reader);
  if (!out.spec.is_object()) throw_error(ErrorCode::kLoadFailed, "{}: not a JSON object", file.string());
  return out;
}

}  // namespace omni::text
