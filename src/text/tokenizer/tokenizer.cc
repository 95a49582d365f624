#include "text/tokenizer/tokenizer.h"

#include <algorithm>
#include <deque>
#include <fstream>
#include <functional>

#include "base/error.h"
#include "base/json.h"
#include "text/tokenizer/byte_level.h"
#include "text/tokenizer/tokenizer_json.h"
#include "text/tokenizer/utf8.h"

namespace omni::text {
namespace fs = std::filesystem;

namespace {

using Merges = std::vector<std::pair<std::string, std::string>>;

AddedToken added_token_from_json(const Json& j, int32_t id) {
  AddedToken t;
  t.id = id;
  t.content = j.at("content").get<std::string>();
  t.special = j.value("special", false);
  // Hugging Face's default for a token without the flag: normalized unless special.
  t.normalized = j.value("normalized", !t.special);
  t.lstrip = j.value("lstrip", false);
  t.rstrip = j.value("rstrip", false);
  t.single_word = j.value("single_word", false);
  return t;
}

// The text of a token field of tokenizer_config.json: a string or an AddedToken object.
std::optional<std::string> token_text(const Json& config, const char* key) {
  if (!config.contains(key) || config[key].is_null()) return std::nullopt;
  const Json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content")) return v["content"].get<std::string>();
  return std::nullopt;
}

template <typename F>
decltype(auto) with_source(const fs::path& file, F&& f) {
  try {
    return f();
  } catch (const Json::exception& e) {
    throw_error(ErrorCode::kLoadFailed, "{}: {}", file.string(), e.what());
  }
}

}  // namespace

Tokenizer::Tokenizer(BpeModel model, std::vector<AddedToken> added, bool split_special_tokens, Normalizer normalizer,
                     PreTokenizer pre_tokenizer)
    : model_(std::move(model)),
      added_(std::move(added), split_special_tokens),
      normalizer_(std::move(normalizer)),
      pre_tokenizer_(std::move(pre_tokenizer)) {
  int32_t size = 0;
  for (const auto& [token, id] : model_.vocab()) size = std::max(size, id + 1);
  for (const AddedToken& t : added_.tokens()) size = std::max(size, t.id + 1);
  id_to_token_.resize(size);
  token_bytes_.resize(size);
  special_.assign(size, 0);
  // Hugging Face's ByteLevel decoder maps a token through the byte alphabet, or keeps its text
  // as it is when one of its characters is outside the alphabet.
  auto bytes_of = [](const std::string& token) { return byte_level::decode(token).value_or(token); };
  for (const auto& [token, id] : model_.vocab()) {
    if (id < 0) continue;
    id_to_token_[id] = token;
    token_bytes_[id] = bytes_of(token);
  }
  for (const AddedToken& t : added_.tokens()) {
    if (t.id < 0) continue;
    id_to_token_[t.id] = t.content;
    token_bytes_[t.id] = bytes_of(t.content);
    special_[t.id] = t.special ? 1 : 0;
    added_ids_.emplace(t.content, t.id);
  }
}

std::unique_ptr<Tokenizer> Tokenizer::load(const fs::path& path) {
  if (fs::is_regular_file(path)) return from_tokenizer_json(path);
  if (fs::is_regular_file(path / "tokenizer.json")) return from_tokenizer_json(path / "tokenizer.json");
  if (fs::is_regular_file(path / "vocab.json") && fs::is_regular_file(path / "merges.txt")) {
    return from_vocab_merges(path / "vocab.json", path / "merges.txt", path / "tokenizer_config.json");
  }
  throw_error(ErrorCode::kNotFound, "{}: no tokenizer found (looked for tokenizer.json, and vocab.json + merges.txt)",
              path.string());
}

std::unique_ptr<Tokenizer> Tokenizer::from_tokenizer_json(const fs::path& file) {
  TokenizerJson contents = read_tokenizer_json(file);
  const Json& spec = contents.spec;
  const std::string source = file.string();
  return with_source(file, [&] {
    const Json& model = spec.at("model");
    const std::string type = model.value("type", "BPE");
    if (type != "BPE") {
      throw_error(ErrorCode::kLoadFailed, "{}: model.type '{}' is not supported (supported: BPE)", source, type);
    }
    if (model.value("byte_fallback", false)) {
      throw_error(ErrorCode::kLoadFailed, "{}: model.byte_fallback is not supported (only byte-level BPE)", source);
    }
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      if (model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty()) {
        throw_error(ErrorCode::kLoadFailed, "{}: model.{} is not supported", source, key);
      }
    }
    if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"].get<double>() != 0.0) {
      throw_error(ErrorCode::kLoadFailed, "{}: model.dropout is not supported (it makes encoding random)", source);
    }

    TokenIdMap vocab = std::move(contents.vocab);
    const Merges merges = std::move(contents.merges);
    const auto vocab_len = static_cast<int32_t>(vocab.size());
    BpeModel bpe(std::move(vocab), merges, model.value("ignore_merges", false),
                 [&](size_t i) { return fmt::format("{}: model.merges[{}]", source, i); });

    // Hugging Face ignores the ids written in added_tokens: a token spelled like a vocabulary
    // entry (or an earlier added token) takes that id, any other the next id after the
    // vocabulary and the added tokens so far.
    std::vector<AddedToken> added;
    TokenIdMap added_ids;
    int32_t max_added = -1;
    if (spec.contains("added_tokens")) {
      for (const Json& t : spec["added_tokens"]) {
        AddedToken token = added_token_from_json(t, 0);
        if (const auto it = bpe.vocab().find(token.content); it != bpe.vocab().end()) {
          token.id = it->second;
        } else if (const auto a = added_ids.find(token.content); a != added_ids.end()) {
          token.id = a->second;
        } else {
          token.id = max_added >= vocab_len ? max_added + 1 : vocab_len;
        }
        max_added = std::max(max_added, token.id);
        added_ids.emplace(token.content, token.id);
        added.push_back(std::move(token));
      }
    }
    Normalizer normalizer = Normalizer::from_json(spec.value("normalizer", Json()), source);
    PreTokenizer pre_tokenizer = PreTokenizer::from_json(spec.value("pre_tokenizer", Json()), source);
    if (!pre_tokenizer.byte_level()) {
      throw_error(ErrorCode::kLoadFailed, "{}: pre_tokenizer has no ByteLevel step (only byte-level BPE is supported)",
                  source);
    }
    const Json decoder = spec.value("decoder", Json());
    if (!decoder.is_object() || decoder.value("type", "") != "ByteLevel") {
      throw_error(ErrorCode::kLoadFailed, "{}: decoder {} is not supported (supported: ByteLevel)", source,
                  decoder.dump());
    }

    auto tokenizer = std::unique_ptr<Tokenizer>(
        new Tokenizer(std::move(bpe), std::move(added), false, std::move(normalizer), std::move(pre_tokenizer)));

    // The post-processor decides what add_special_tokens adds around a single sequence.
    std::function<void(const Json&)> read_post_processor = [&](const Json& pp) {
      if (pp.is_null()) return;
      const std::string pp_type = pp.value("type", "");
      if (pp_type == "ByteLevel") return;  // only adjusts offsets
      if (pp_type == "Sequence") {
        for (const Json& p : pp.at("processors")) read_post_processor(p);
      } else if (pp_type == "TemplateProcessing") {
        bool after = false;
        for (const Json& item : pp.at("single")) {
          if (item.contains("Sequence")) {
            after = true;
          } else if (item.contains("SpecialToken")) {
            const std::string name = item["SpecialToken"].at("id").get<std::string>();
            for (const Json& id : pp.at("special_tokens").at(name).at("ids")) {
              (after ? tokenizer->suffix_ids_ : tokenizer->prefix_ids_).push_back(id.get<int32_t>());
            }
          }
        }
      } else if (pp_type == "BertProcessing" || pp_type == "RobertaProcessing") {
        tokenizer->prefix_ids_.push_back(pp.at("cls").at(1).get<int32_t>());
        tokenizer->suffix_ids_.push_back(pp.at("sep").at(1).get<int32_t>());
      } else {
        throw_error(ErrorCode::kLoadFailed,
                    "{}: post_processor type '{}' is not supported (supported: ByteLevel, TemplateProcessing, "
                    "BertProcessing, RobertaProcessing, Sequence)",
                    source, pp_type);
      }
    };
    read_post_processor(spec.value("post_processor", Json()));
    return tokenizer;
  });
}

std::unique_ptr<Tokenizer> Tokenizer::from_vocab_merges(const fs::path& vocab_file, const fs::path& merges_file,
                                                        const fs::path& config_file) {
  const Json vocab_json = read_json_file(vocab_file);
  TokenIdMap vocab = with_source(vocab_file, [&] {
    if (!vocab_json.is_object()) throw_error(ErrorCode::kLoadFailed, "{}: not a JSON object", vocab_file.string());
    TokenIdMap v;
    v.reserve(vocab_json.size());
    for (const auto& [token, id] : vocab_json.items()) v.emplace(token, id.get<int32_t>());
    return v;
  });

  std::ifstream in(merges_file, std::ios::binary);
  if (!in) throw_error(ErrorCode::kNotFound, "{}: cannot open", merges_file.string());
  Merges merges;
  std::string line;
  size_t line_number = 0;
  std::vector<size_t> merge_lines;
  const std::string merges_source = merges_file.string();
  while (std::getline(in, line)) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    // The first line is a "#version: 0.2" header; blank lines carry no merge.
    if ((line_number == 1 && line.rfind("#version", 0) == 0) || line.empty()) continue;
    merges.push_back(split_merge(line, fmt::format("{} line {}", merges_source, line_number)));
    merge_lines.push_back(line_number);
  }
  BpeModel bpe(std::move(vocab), merges, false,
               [&](size_t i) { return fmt::format("{} line {}", merges_source, merge_lines[i]); });

  Json config = Json::object();
  if (!config_file.empty() && fs::exists(config_file)) config = read_json_file(config_file);
  std::vector<AddedToken> added;
  bool split_special_tokens = false;
  std::vector<int32_t> prefix, suffix;
  with_source(config_file, [&] {
    if (config.contains("added_tokens_decoder")) {
      for (const auto& [id, t] : config["added_tokens_decoder"].items()) {
        int32_t parsed = 0;
        try {
          parsed = std::stoi(id);
        } catch (const std::exception&) {
          throw_error(ErrorCode::kLoadFailed, "{}: added_tokens_decoder key '{}' is not a token id",
                      config_file.string(), id);
        }
        added.push_back(added_token_from_json(t, parsed));
      }
    }
    split_special_tokens = config.value("split_special_tokens", false);
    // The pre-tokenizer regex of this layout is implied by the tokenizer class.
    const std::string tokenizer_class = config.value("tokenizer_class", "Qwen2Tokenizer");
    if (tokenizer_class != "Qwen2Tokenizer" && tokenizer_class != "Qwen2TokenizerFast") {
      throw_error(ErrorCode::kLoadFailed,
                  "{}: tokenizer_class '{}' is not supported with vocab.json + merges.txt (supported: "
                  "Qwen2Tokenizer, Qwen2TokenizerFast; other tokenizers need a tokenizer.json)",
                  config_file.string(), tokenizer_class);
    }
    return 0;
  });

  auto tokenizer =
      std::unique_ptr<Tokenizer>(new Tokenizer(std::move(bpe), std::move(added), split_special_tokens,
                                               Normalizer({NormalizationForm::kNfc}), PreTokenizer::qwen2()));
  // Qwen2Tokenizer adds a BOS/EOS only when the config asks for it (Qwen's configs do not).
  auto add_if_configured = [&](const char* flag, const char* key, std::vector<int32_t>& target) {
    if (!config.value(flag, false)) return;
    const auto text = token_text(config, key);
    const auto id = text ? tokenizer->token_to_id(*text) : std::nullopt;
    if (!id) {
      throw_error(ErrorCode::kLoadFailed, "{}: {} is set but {} names no token", config_file.string(), flag, key);
    }
    target.push_back(*id);
  };
  add_if_configured("add_bos_token", "bos_token", tokenizer->prefix_ids_);
  add_if_configured("add_eos_token", "eos_token", tokenizer->suffix_ids_);
  return tokenizer;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  if (const auto bad = utf8::find_invalid(text)) {
    throw_error(ErrorCode::kInvalidArgument, "text to tokenize is not valid UTF-8 (byte {})", *bad);
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 8);
  if (add_special_tokens) ids.insert(ids.end(), prefix_ids_.begin(), prefix_ids_.end());
  std::vector<AddedVocabulary::Piece> raw;
  added_.split(text, false, raw);
  std::vector<AddedVocabulary::Piece> normalized_pieces;
  for (const auto& piece : raw) {
    if (piece.id >= 0) {
      ids.push_back(piece.id);
      continue;
    }
    if (normalizer_.empty()) {
      encode_text(piece.text, ids);
      continue;
    }
    const std::string normalized = normalizer_.normalize(piece.text);
    normalized_pieces.clear();
    added_.split(normalized, true, normalized_pieces);
    for (const auto& p : normalized_pieces) {
      if (p.id >= 0) {
        ids.push_back(p.id);
      } else {
        encode_text(p.text, ids);
      }
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

void Tokenizer::encode_text(std::string_view text, std::vector<int32_t>& ids) const {
  std::vector<std::string_view> words;
  std::deque<std::string> storage;
  pre_tokenizer_.split(text, words, storage);
  for (std::string_view word : words) model_.encode_word(word, ids);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size() || (skip_special_tokens && special_[id])) continue;
    bytes += token_bytes_[id];
  }
  if (!utf8::find_invalid(bytes)) return bytes;
  std::string text;
  utf8::append_lossy(bytes, text);
  return text;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const auto it = added_ids_.find(token); it != added_ids_.end()) return it->second;
  if (const auto it = model_.vocab().find(token); it != model_.vocab().end()) return it->second;
  return std::nullopt;
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || id >= vocab_size() || (id_to_token_[id].empty() && token_bytes_[id].empty())) return std::nullopt;
  return id_to_token_[id];
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return token_bytes_[id];
}

bool Tokenizer::is_special(int32_t id) const { return id >= 0 && id < vocab_size() && special_[id]; }

}  // namespace omni::text
