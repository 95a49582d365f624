// `omnistage tokenize` end to end: the real binary on the real Qwen3 tokenizer, checked against
// the Hugging Face golden ids.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "base/json.h"
#include "support/subprocess.h"
#include "tokenizer_test_support.h"

namespace omni {
namespace {

using testing::data_dir;
using testing::qwen3_dir;
using testing::run_process;
using testing::TempDir;

TEST(TokenizeCliTest, TextPrintsOneJsonLineOfIds) {
  const auto r = run_process(
      {OMNISTAGE_BINARY, "tokenize", "--tokenizer", qwen3_dir().string(), "--text", "<|im_start|>user\nhi<|im_end|>"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "{\"ids\":[151644,872,198,6023,151645]}\n");
}

TEST(TokenizeCliTest, JsonlPrintsTheGoldenIdsForEveryLine) {
  const auto golden = testing::read_jsonl(data_dir() / "golden.jsonl");
  TempDir dir;
  const auto input = dir.path() / "in.jsonl";
  {
    std::ofstream out(input);
    for (const Json& row : golden) out << Json{{"text", row["text"]}}.dump() << "\n";
  }
  const auto r =
      run_process({OMNISTAGE_BINARY, "tokenize", "--tokenizer", qwen3_dir().string(), "--jsonl", input.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream lines(r.out);
  std::string line;
  size_t i = 0;
  while (std::getline(lines, line)) {
    ASSERT_LT(i, golden.size());
    EXPECT_EQ(Json::parse(line)["ids"], golden[i]["ids"]) << "line " << i + 1;
    ++i;
  }
  EXPECT_EQ(i, golden.size());
}

TEST(TokenizeCliTest, BadInputIsAnErrorNamingTheLine) {
  TempDir dir;
  const auto input = dir.path() / "in.jsonl";
  std::ofstream(input) << "{\"text\": \"fine\"}\n\n{\"prompt\": \"wrong field\"}\n";
  const auto r =
      run_process({OMNISTAGE_BINARY, "tokenize", "--tokenizer", qwen3_dir().string(), "--jsonl", input.string()});
  EXPECT_EQ(r.exit_code, 64) << r.err;
  EXPECT_EQ(r.out, "{\"ids\":[62057]}\n");
  EXPECT_NE(r.err.find("in.jsonl line 3: expected an object with a string field \"text\""), std::string::npos) << r.err;

  const auto missing = run_process({OMNISTAGE_BINARY, "tokenize", "--tokenizer", dir.path().string(), "--text", "x"});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("no tokenizer found"), std::string::npos) << missing.err;

  const auto neither = run_process({OMNISTAGE_BINARY, "tokenize", "--tokenizer", qwen3_dir().string()});
  EXPECT_EQ(neither.exit_code, 64);
  EXPECT_NE(neither.err.find("--text or --jsonl"), std::string::npos) << neither.err;
}

}  // namespace
}  // namespace omni
