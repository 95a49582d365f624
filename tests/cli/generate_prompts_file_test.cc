// `omnistage generate --prompts-file`: many prompts through one engine, end to end on the real
// binary and the tiny reference checkpoints.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/json.h"
#include "support/subprocess.h"
#include "text/tokenizer/tokenizer.h"

namespace omni {
namespace {

namespace fs = std::filesystem;
using testing::run_process;

const fs::path kModel = fs::path(OMNI_SOURCE_DIR) / "tests/data/tiny_qwen/qwen3_gqa2_tied_bf16_v5";
const fs::path kTokenizer = fs::path(OMNI_SOURCE_DIR) / "tests/data/tokenizer/small_bpe/tokenizer.json";

class GeneratePromptsFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ref_ = read_json_file(kModel / "reference.json");
    tmp_ = fs::temp_directory_path() / ("omni_prompts_file_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(tmp_);
  }
  void TearDown() override { fs::remove_all(tmp_); }

  fs::path write_file(const std::string& name, const std::vector<Json>& lines) {
    fs::path path = tmp_ / name;
    std::ofstream out(path);
    for (const Json& line : lines) out << line.dump() << "\n";
    return path;
  }

  testing::ProcessResult generate(const fs::path& file, std::vector<std::string> extra = {},
                                  const fs::path& model = kModel) {
    std::vector<std::string> argv = {OMNISTAGE_BINARY, "generate",       "--model",
                                     model.string(),   "--prompts-file", file.string()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run_process(argv);
  }

  // The output lines, parsed.
  static std::vector<Json> lines_of(const std::string& out) {
    std::vector<Json> lines;
    size_t start = 0;
    while (start < out.size()) {
      size_t end = out.find('\n', start);
      lines.push_back(Json::parse(out.substr(start, end - start)));
      start = end + 1;
    }
    return lines;
  }

  std::vector<int32_t> prompt(int i) const { return ref_["prompts"][i].get<std::vector<int32_t>>(); }

  // Greedy to the end, sampled with a per-request seed, with penalties; prompts of 1, 9 and 37 tokens.
  std::vector<Json> mixed_lines() const {
    return {
        {{"prompt_token_ids", prompt(2)},
         {"sampling_params", {{"temperature", 0}, {"ignore_eos", true}, {"max_tokens", 24}}}},
        {{"prompt_token_ids", prompt(0)},
         {"sampling_params", {{"temperature", 1.2}, {"top_p", 0.9}, {"seed", 5}, {"max_tokens", 40}}}},
        {{"prompt_token_ids", prompt(1)},
         {"sampling_params",
          {{"temperature", 0}, {"repetition_penalty", 1.3}, {"presence_penalty", 0.4}, {"max_tokens", 30}}}},
        {{"prompt_token_ids", prompt(2)},
         {"sampling_params", {{"temperature", 0.8}, {"top_k", 20}, {"min_p", 0.02}, {"seed", 6}, {"max_tokens", 50}}}},
    };
  }

  Json ref_;
  fs::path tmp_;
};

TEST_F(GeneratePromptsFileTest, BatchedLinesEqualTheirSoloRunsAndTransformers) {
  std::vector<Json> lines = mixed_lines();
  auto batched = generate(write_file("all.jsonl", lines));
  ASSERT_EQ(batched.exit_code, 0) << batched.err;
  std::vector<Json> out = lines_of(batched.out);
  ASSERT_EQ(out.size(), lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(out[i]["index"], i);
    auto solo = generate(write_file("solo.jsonl", {lines[i]}));
    ASSERT_EQ(solo.exit_code, 0) << solo.err;
    Json alone = lines_of(solo.out).at(0);
    EXPECT_EQ(out[i]["token_ids"], alone["token_ids"]) << "line " << i;
    EXPECT_EQ(out[i]["finish_reason"], alone["finish_reason"]) << "line " << i;
    EXPECT_EQ(out[i]["text"], "") << "no tokenizer, no text";
  }
  EXPECT_EQ(out[0]["token_ids"], ref_["greedy_continuations"][2]) << "greedy matches transformers";
  EXPECT_EQ(out[0]["finish_reason"], "length");

  // The engine flags apply: a KV cache of one max-length (96-token) sequence forces preemptions, a
  // small token budget chunks the 37-token prompts, and the outputs stay the same.
  auto squeezed = generate(write_file("all.jsonl", lines),
                           {"--num-gpu-blocks-override", "6", "--max-model-len", "96", "--max-num-seqs", "3",
                            "--max-num-batched-tokens", "16", "--no-enable-prefix-caching"});
  ASSERT_EQ(squeezed.exit_code, 0) << squeezed.err;
  EXPECT_EQ(lines_of(squeezed.out), out);
  EXPECT_NE(squeezed.err.find("6 KV blocks"), std::string::npos) << squeezed.err;
  EXPECT_NE(squeezed.err.find("max_num_seqs 3, max_num_batched_tokens 16"), std::string::npos) << squeezed.err;
  EXPECT_NE(squeezed.err.find("prefix caching off"), std::string::npos) << squeezed.err;
  EXPECT_EQ(squeezed.err.find(" 0 preemptions"), std::string::npos) << squeezed.err;

  auto cached = generate(write_file("all.jsonl", lines), {"--enable-prefix-caching", "--max-num-seqs", "1"});
  ASSERT_EQ(cached.exit_code, 0) << cached.err;
  EXPECT_EQ(lines_of(cached.out), out);
  EXPECT_NE(cached.err.find("prefix cache: 2 of"), std::string::npos) << "line 3 reuses line 0's two full blocks\n"
                                                                      << cached.err;
}

TEST_F(GeneratePromptsFileTest, LineSamplingParamsOverrideTheFlags) {
  auto r = generate(write_file("p.jsonl", {{{"prompt_token_ids", prompt(1)}},
                                           {{"prompt_token_ids", prompt(1)}, {"sampling_params", {{"max_tokens", 3}}}},
                                           {{"prompt_token_ids", prompt(1)},
                                            {"sampling_params", {{"n", 2}, {"temperature", 1.0}, {"seed", 9}}}}}),
                    {"--temperature", "0", "--max-tokens", "6", "--ignore-eos"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<Json> out = lines_of(r.out);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0]["token_ids"].size(), 6u);
  EXPECT_EQ(out[1]["token_ids"].size(), 3u);
  EXPECT_EQ(std::vector<int32_t>(out[1]["token_ids"].begin(), out[1]["token_ids"].end()),
            std::vector<int32_t>(out[0]["token_ids"].begin(), out[0]["token_ids"].begin() + 3));
  EXPECT_EQ(out[2]["index"], 2);
  EXPECT_EQ(out[2]["completion"], 0);
  EXPECT_EQ(out[3]["completion"], 1);
  EXPECT_EQ(out[2]["token_ids"].size(), 6u) << "max_tokens and ignore_eos still come from the flags";
  EXPECT_NE(out[2]["token_ids"], out[3]["token_ids"]) << "seeds 9 and 10";
}

TEST_F(GeneratePromptsFileTest, BadLinesAreUsageErrorsNamingFileLineAndField) {
  auto message = [&](const std::vector<Json>& lines) {
    auto r = generate(write_file("bad.jsonl", lines));
    EXPECT_EQ(r.exit_code, 64) << r.err;
    return r.err;
  };
  const std::string file = (tmp_ / "bad.jsonl").string();
  std::string err =
      message({{{"prompt_token_ids", {1}}}, {{"prompt_token_ids", {1}}, {"sampling_params", {{"top_p", 2}}}}});
  EXPECT_NE(err.find(file + ":2: sampling parameter 'top_p' must be in (0, 1], got 2"), std::string::npos) << err;
  err = message({{{"prompt_token_ids", {1}}, {"temperature", 0}}});
  EXPECT_NE(err.find(file + ":1: unknown field 'temperature'"), std::string::npos) << err;
  err = message({{{"prompt", "hello"}}});
  EXPECT_NE(err.find(file + ":1: a text \"prompt\" needs a tokenizer"), std::string::npos) << err;
  err = message({{{"prompt_token_ids", {1}}, {"sampling_params", {{"stop", "x"}}}}});
  EXPECT_NE(err.find("'stop' needs the output text"), std::string::npos) << err;
  err = message({{{"prompt_token_ids", {1, 999}}}});
  EXPECT_NE(err.find(file + ":1: token id 999 at index 1 is outside the vocabulary [0, 384)"), std::string::npos)
      << err;
  err = message({{{"prompt_token_ids", {1}}, {"prompt", "x"}}});
  EXPECT_NE(err.find("give exactly one of \"prompt_token_ids\" and \"prompt\""), std::string::npos) << err;
}

TEST_F(GeneratePromptsFileTest, WithATokenizerPromptsAreTextAndStopStringsCutTheText) {
  const fs::path model = tmp_ / "model";
  fs::create_directories(model);
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors"}) {
    fs::copy_file(kModel / f, model / f);
  }
  fs::copy_file(kTokenizer, model / "tokenizer.json");
  auto tokenizer = text::Tokenizer::load(model);

  Json greedy = {{"temperature", 0}, {"ignore_eos", true}, {"max_tokens", 30}};
  auto full =
      generate(write_file("full.jsonl", {{{"prompt_token_ids", prompt(2)}, {"sampling_params", greedy}}}), {}, model);
  ASSERT_EQ(full.exit_code, 0) << full.err;
  Json out = lines_of(full.out).at(0);
  std::vector<int32_t> ids = out["token_ids"].get<std::vector<int32_t>>();
  std::string text = out["text"];
  EXPECT_EQ(text, tokenizer->decode(ids, true));

  // A stop string made of the end of one token's text and the start of a later one's.
  size_t cut = std::string::npos;
  std::string stop;
  for (size_t i = 3; i < ids.size() && cut == std::string::npos; ++i) {
    std::string before = tokenizer->decode(std::vector<int32_t>(ids.begin(), ids.begin() + i), true);
    if (before.size() < 2 || before.size() + 2 > text.size() || text.compare(0, before.size(), before) != 0) continue;
    std::string candidate = text.substr(before.size() - 2, 4);
    bool ascii = std::all_of(candidate.begin(), candidate.end(), [](char c) { return c > 0x20 && c < 0x7f; });
    if (ascii && text.find(candidate) == before.size() - 2) {
      cut = before.size() - 2;
      stop = candidate;
    }
  }
  ASSERT_NE(cut, std::string::npos) << "no token boundary to put a stop string across in: " << text;
  Json with_stop = greedy;
  with_stop["stop"] = {stop};
  auto stopped = generate(write_file("stop.jsonl", {{{"prompt_token_ids", prompt(2)}, {"sampling_params", with_stop}}}),
                          {}, model);
  ASSERT_EQ(stopped.exit_code, 0) << stopped.err;
  Json s = lines_of(stopped.out).at(0);
  EXPECT_EQ(s["finish_reason"], "stop");
  EXPECT_EQ(s["text"], text.substr(0, cut));

  // Text prompts: encoded by the tokenizer, the same as giving their ids.
  // The prompt's ids must fit the tiny model's 384-token vocabulary.
  std::string words;
  std::vector<int32_t> encoded;
  for (std::string candidate : {"a b", "ab", "x y z", "e", "a"}) {
    encoded = tokenizer->encode(candidate);
    if (std::all_of(encoded.begin(), encoded.end(), [](int32_t id) { return id < 384; })) {
      words = candidate;
      break;
    }
  }
  ASSERT_FALSE(words.empty());
  auto by_text = generate(write_file("text.jsonl", {{{"prompt", words}, {"sampling_params", greedy}}}), {}, model);
  auto by_ids =
      generate(write_file("ids.jsonl", {{{"prompt_token_ids", encoded}, {"sampling_params", greedy}}}), {}, model);
  ASSERT_EQ(by_text.exit_code, 0) << by_text.err;
  EXPECT_EQ(by_text.out, by_ids.out);

  auto single = run_process({OMNISTAGE_BINARY, "generate", "--model", model.string(), "--prompt", words,
                             "--temperature", "0", "--ignore-eos", "--max-tokens", "30"});
  ASSERT_EQ(single.exit_code, 0) << single.err;
  EXPECT_EQ(single.out, lines_of(by_text.out).at(0)["text"].get<std::string>() + "\n");

  // Chat messages: without a chat template they are refused; with one, they render through it
  // (here to the concatenated contents) and generate like the rendered text.
  std::vector<std::string> chat = {
      OMNISTAGE_BINARY, "generate",   "--model",
      model.string(),   "--messages", Json::array({{{"role", "user"}, {"content", words}}}).dump(),
      "--temperature",  "0",          "--ignore-eos",
      "--max-tokens",   "30"};
  auto no_template = run_process(chat);
  EXPECT_NE(no_template.exit_code, 0);
  EXPECT_NE(no_template.err.find("--messages needs a chat template"), std::string::npos) << no_template.err;
  std::ofstream(model / "chat_template.jinja") << "{% for m in messages %}{{ m['content'] }}{% endfor %}";
  auto by_messages = run_process(chat);
  ASSERT_EQ(by_messages.exit_code, 0) << by_messages.err;
  EXPECT_EQ(by_messages.out, single.out);
}

}  // namespace
}  // namespace omni
