#include "text/tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include "base/error.h"

namespace omni::text {
namespace {

// Qwen2Tokenizer's PRETOKENIZE_REGEX (transformers), used by the vocab.json + merges.txt layout.
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// GPT-2's regex, which a ByteLevel pre-tokenizer with use_regex applies.
constexpr std::string_view kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Oniguruma's Unicode \s includes U+0085 (NEL); PCRE2's (with UCP) does not. Rewrites \s and \S
// so that both engines split the same text the same way.
std::string widen_whitespace_classes(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 16);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      ++i;
      if (e == 's') {
        out += in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
      } else if (e == 'S' && !in_class) {
        out += "[^\\s\\x{85}]";
      } else {
        out += '\\';
        out += e;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
      const size_t close = pattern.find(":]", i + 2);
      if (close != std::string_view::npos) {
        out.append(pattern.substr(i, close + 2 - i));
        i = close + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

}  // namespace

struct TokenizerRegex::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Impl() { pcre2_code_free(code); }
};

TokenizerRegex::TokenizerRegex(std::string_view pattern, bool literal, std::string_view source)
    : impl_(std::make_unique<Impl>()) {
  const std::string compiled = literal ? std::string(pattern) : widen_whitespace_classes(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  const uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK | (literal ? PCRE2_LITERAL : 0);
  impl_->code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compiled.data()), compiled.size(), options, &error, &offset, nullptr);
  if (impl_->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    throw_error(ErrorCode::kLoadFailed, "{}: cannot compile the pre-tokenizer regex '{}' at offset {}: {}", source,
                pattern, offset, reinterpret_cast<const char*>(message));
  }
  // Without JIT (an unsupported CPU) the interpreter gives the same matches, only slower.
  impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;
}

TokenizerRegex::~TokenizerRegex() = default;
TokenizerRegex::TokenizerRegex(TokenizerRegex&&) noexcept = default;
TokenizerRegex& TokenizerRegex::operator=(TokenizerRegex&&) noexcept = default;

void TokenizerRegex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) const {
  matches.clear();
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
      pcre2_match_data_create_from_pattern(impl_->code, nullptr), &pcre2_match_data_free);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t offset = 0;
  while (offset < text.size()) {
    const int rc =
        impl_->jit ? pcre2_jit_match(impl_->code, subject, text.size(), offset, 0, data.get(), nullptr)
                   : pcre2_match(impl_->code, subject, text.size(), offset, PCRE2_NO_UTF_CHECK, data.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      throw_error(ErrorCode::kInternal, "pre-tokenizer regex failed at byte {}: {}", offset,
                  reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
    const size_t start = ovector[0];
    const size_t end = ovector[1];
    if (end == start) {
      // An empty match splits nothing; step over one character and search on.
      offset = start + 1;
      while (offset < text.size() && (static_cast<unsigned char>(text[offset]) & 0xC0) == 0x80) ++offset;
      continue;
    }
    matches.emplace_back(start, end);
    offset = end;
  }
}

PreTokenizer PreTokenizer::qwen2() {
  PreTokenizer p;
  p.steps_.push_back({std::make_shared<const TokenizerRegex>(kQwen2Regex, false, "Qwen2 pre-tokenizer"),
                      Behavior::kIsolated, false, false});
  p.steps_.push_back({nullptr, Behavior::kIsolated, false, false});
  p.byte_level_ = true;
  return p;
}

PreTokenizer PreTokenizer::from_json(const Json& spec, std::string_view source) {
  PreTokenizer p;
  append_steps(spec, source, p);
  return p;
}

void PreTokenizer::append_steps(const Json& spec, std::string_view source, PreTokenizer& out) {
  if (spec.is_null()) return;
  const std::string type = spec.value("type", "");
  if (type == "Sequence") {
    for (const Json& s : spec.at("pretokenizers")) append_steps(s, source, out);
    return;
  }
  if (type == "ByteLevel") {
    Step step;
    step.add_prefix_space = spec.value("add_prefix_space", false);
    if (spec.value("use_regex", true)) {
      step.regex = std::make_shared<const TokenizerRegex>(kGpt2Regex, false, source);
    }
    out.steps_.push_back(std::move(step));
    out.byte_level_ = true;
    return;
  }
  if (type == "Split") {
    Step step;
    const Json& pattern = spec.at("pattern");
    if (pattern.contains("Regex")) {
      step.regex = std::make_shared<const TokenizerRegex>(pattern["Regex"].get<std::string>(), false, source);
    } else if (pattern.contains("String")) {
      step.regex = std::make_shared<const TokenizerRegex>(pattern["String"].get<std::string>(), true, source);
    } else {
      throw_error(ErrorCode::kLoadFailed, "{}: pre_tokenizer Split: pattern must have 'Regex' or 'String'", source);
    }
    const std::string behavior = spec.value("behavior", "Isolated");
    if (behavior == "Removed") {
      step.behavior = Behavior::kRemoved;
    } else if (behavior == "Isolated") {
      step.behavior = Behavior::kIsolated;
    } else if (behavior == "MergedWithPrevious") {
      step.behavior = Behavior::kMergedWithPrevious;
    } else if (behavior == "MergedWithNext") {
      step.behavior = Behavior::kMergedWithNext;
    } else if (behavior == "Contiguous") {
      step.behavior = Behavior::kContiguous;
    } else {
      throw_error(ErrorCode::kLoadFailed,
                  "{}: pre_tokenizer Split: behavior '{}' is not one of Removed, Isolated, MergedWithPrevious, "
                  "MergedWithNext, Contiguous",
                  source, behavior);
    }
    step.invert = spec.value("invert", false);
    out.steps_.push_back(std::move(step));
    return;
  }
  throw_error(ErrorCode::kLoadFailed,
              "{}: pre_tokenizer type '{}' is not supported (supported: Split, ByteLevel, Sequence)", source, type);
}

void PreTokenizer::split_one(const Step& step, std::string_view piece, std::vector<std::string_view>& out) {
  if (!step.regex) {
    out.push_back(piece);
    return;
  }
  // Spans covering the whole piece, each flagged as a delimiter (a match, unless inverted) or not.
  std::vector<std::pair<size_t, size_t>> found;
  step.regex->find_all(piece, found);
  struct Span {
    size_t start, end;
    bool is_match;
  };
  std::vector<Span> spans;
  size_t prev = 0;
  for (const auto& [s, e] : found) {
    if (s > prev) spans.push_back({prev, s, step.invert});
    spans.push_back({s, e, !step.invert});
    prev = e;
  }
  if (prev < piece.size()) spans.push_back({prev, piece.size(), step.invert});

  std::vector<std::pair<size_t, size_t>> pieces;
  switch (step.behavior) {
    case Behavior::kRemoved:
      for (const Span& s : spans) {
        if (!s.is_match) pieces.emplace_back(s.start, s.end);
      }
      break;
    case Behavior::kIsolated:
      for (const Span& s : spans) pieces.emplace_back(s.start, s.end);
      break;
    case Behavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !pieces.empty()) {
          pieces.back().second = s.end;
        } else {
          pieces.emplace_back(s.start, s.end);
        }
        previous_match = s.is_match;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool previous_match = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !pieces.empty()) {
          pieces.back().first = it->start;
        } else {
          pieces.emplace_back(it->start, it->end);
        }
        previous_match = it->is_match;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
    }
    case Behavior::kContiguous: {
      bool previous_match = false;
      for (const Span& s : spans) {
        if (s.is_match == previous_match && !pieces.empty()) {
          pieces.back().second = s.end;
        } else {
          pieces.emplace_back(s.start, s.end);
        }
        previous_match = s.is_match;
      }
      break;
    }
  }
  for (const auto& [s, e] : pieces) {
    if (e > s) out.push_back(piece.substr(s, e - s));
  }
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& words,
                         std::deque<std::string>& storage) const {
  words.clear();
  if (text.empty()) return;
  words.push_back(text);
  std::vector<std::string_view> next;
  for (const Step& step : steps_) {
    next.clear();
    for (std::string_view piece : words) {
      if (step.add_prefix_space && piece.front() != ' ') {
        std::string& prefixed = storage.emplace_back(1, ' ');
        prefixed.append(piece);
        piece = prefixed;
      }
      split_one(step, piece, next);
    }
    words.swap(next);
  }
}

}  // namespace omni::text
