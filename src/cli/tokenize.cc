#include "cli/tokenize.h"

#include <cstdio>
#include <fstream>
#include <memory>

#include "base/error.h"
#include "base/json.h"
#include "text/tokenizer/tokenizer.h"

namespace omni::cli {
namespace {

struct TokenizeOptions {
  std::string tokenizer;
  std::string text;
  std::string jsonl;
  bool add_special_tokens = false;
};

void print_ids(const std::vector<int32_t>& ids) {
  std::string line = Json{{"ids", ids}}.dump();
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stdout);
}

int run_tokenize(const TokenizeOptions& options) {
  const auto tokenizer = text::Tokenizer::load(options.tokenizer);
  if (options.jsonl.empty()) {
    print_ids(tokenizer->encode(options.text, options.add_special_tokens));
    return 0;
  }
  std::ifstream in(options.jsonl, std::ios::binary);
  if (!in) throw_error(ErrorCode::kNotFound, "--jsonl {}: cannot open", options.jsonl);
  std::string line;
  size_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{} line {}", options.jsonl, line_number);
    const Json row = parse_json(line, where);
    if (!row.is_object() || !row.contains("text") || !row["text"].is_string()) {
      throw_error(ErrorCode::kInvalidArgument, "{}: expected an object with a string field \"text\"", where);
    }
    print_ids(tokenizer->encode(row["text"].get_ref<const std::string&>(), options.add_special_tokens));
  }
  return 0;
}

}  // namespace

Command tokenize_command() {
  return {"tokenize", "Print the token ids of text as JSON lines {\"ids\": [...]}", [](CLI::App& sub) {
            auto options = std::make_shared<TokenizeOptions>();
            sub.add_option("--tokenizer", options->tokenizer,
                           "Model directory with tokenizer.json, or vocab.json + merges.txt (+ tokenizer_config.json)")
                ->required();
            auto* text = sub.add_option("--text", options->text, "Text to tokenize");
            auto* jsonl =
                sub.add_option("--jsonl", options->jsonl, "File of JSON lines {\"text\": ...}; one output line each");
            text->excludes(jsonl);
            sub.add_flag("--add-special-tokens", options->add_special_tokens,
                         "Add the tokens the tokenizer's post-processor puts around a text (none for Qwen)");
            sub.callback([text, jsonl] {
              if (text->count() == 0 && jsonl->count() == 0) throw CLI::RequiredError("--text or --jsonl");
            });
            return [options] { return run_tokenize(*options); };
          }};
}

}  // namespace omni::cli
