// Tokenizer tests against golden ids from Hugging Face tokenizers 0.23.2
// (scripts/reference/tokenizer_golden.py, run on the GPU machine; inputs from
// scripts/reference/make_tokenizer_corpus.py and make_tokenizer_fixture.py).
#include "text/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "base/error.h"
#include "base/json.h"
#include "text/tokenizer/byte_level.h"
#include "text/tokenizer/incremental_decoder.h"
#include "text/tokenizer/utf8.h"
#include "tokenizer_test_support.h"

namespace omni::text {
namespace {

namespace fs = std::filesystem;
using testing::data_dir;
using testing::qwen3_dir;
using testing::read_jsonl;
using testing::TempDir;

std::vector<int32_t> ids_of(const Json& row, const char* key = "ids") {
  return row.at(key).get<std::vector<int32_t>>();
}

const Tokenizer& qwen3() {
  static const std::unique_ptr<Tokenizer> kTokenizer = Tokenizer::load(qwen3_dir());
  return *kTokenizer;
}

// Checks every golden row: exact ids, and decode(ids) equal to Hugging Face's decode (the
// input itself whenever the input is already NFC). Returns the number of rows checked.
size_t expect_matches_golden(const Tokenizer& tokenizer, const fs::path& golden_file) {
  const auto rows = read_jsonl(golden_file);
  size_t mismatches = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const Json& row = rows[i];
    const std::string text = row.at("text").get<std::string>();
    const auto expected = ids_of(row);
    const auto ids = tokenizer.encode(text);
    if (ids != expected && ++mismatches <= 5) {
      ADD_FAILURE() << golden_file.filename() << " line " << i + 1 << ": ids differ for " << Json(text).dump()
                    << "\n  got      " << Json(ids).dump() << "\n  expected " << Json(expected).dump();
    }
    const std::string decoded = tokenizer.decode(expected);
    EXPECT_EQ(decoded, row.at("decoded").get<std::string>()) << "line " << i + 1;
    if (!row.contains("ids_add_special_tokens")) EXPECT_EQ(tokenizer.encode(text, true), expected) << "line " << i + 1;
  }
  EXPECT_EQ(mismatches, 0u) << golden_file;
  return rows.size();
}

TEST(TokenizerTest, Qwen3EncodesTheCorpusExactlyAsHuggingFace) {
  const size_t checked = expect_matches_golden(qwen3(), data_dir() / "golden.jsonl");
  EXPECT_GE(checked, 500u);
}

TEST(TokenizerTest, Qwen3RoundTripsNfcText) {
  size_t round_trips = 0;
  for (const Json& row : read_jsonl(data_dir() / "corpus.jsonl")) {
    const std::string text = row.at("text").get<std::string>();
    const std::string decoded = qwen3().decode(qwen3().encode(text));
    // Decoding gives the NFC form of the input, which is the input itself for NFC text.
    if (Normalizer({NormalizationForm::kNfc}).normalize(text) == text) {
      EXPECT_EQ(decoded, text);
      ++round_trips;
    } else {
      EXPECT_NE(decoded, text);
    }
  }
  EXPECT_GT(round_trips, 450u);
}

TEST(TokenizerTest, Qwen3DecodesLikeHuggingFace) {
  // Random ids: lone bytes (broken UTF-8 -> U+FFFD), special tokens, ids past the vocabulary.
  const auto rows = read_jsonl(data_dir() / "decode_golden.jsonl");
  ASSERT_GE(rows.size(), 300u);
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto ids = ids_of(rows[i]);
    EXPECT_EQ(qwen3().decode(ids, false), rows[i].at("plain").get<std::string>()) << "line " << i + 1;
    EXPECT_EQ(qwen3().decode(ids, true), rows[i].at("skip_special").get<std::string>()) << "line " << i + 1;
  }
}

TEST(TokenizerTest, Qwen3Vocabulary) {
  const Tokenizer& t = qwen3();
  EXPECT_EQ(t.vocab_size(), 151669);
  EXPECT_EQ(t.token_to_id("<|im_end|>"), 151645);
  EXPECT_EQ(t.token_to_id("<think>"), 151667);
  EXPECT_EQ(t.token_to_id("assistant"), 77091);
  EXPECT_EQ(t.token_to_id("Ċ"), 198);
  EXPECT_EQ(t.token_to_id("no such token"), std::nullopt);
  EXPECT_EQ(t.id_to_token(198), "Ċ");
  EXPECT_EQ(t.id_to_token(151700), std::nullopt);
  EXPECT_EQ(t.token_bytes(198), "\n");
  EXPECT_TRUE(t.is_special(151645));
  EXPECT_FALSE(t.is_special(151667));  // <think> is an added token, but not a special one
  EXPECT_EQ(t.encode("<|im_start|>user\nhi<|im_end|>"), (std::vector<int32_t>{151644, 872, 198, 6023, 151645}));
}

TEST(TokenizerTest, VocabMergesLayoutGivesTheSameIds) {
  // The Qwen3-TTS layout, derived from the same tokenizer.json: vocab.json, merges.txt (pairs
  // joined by a space after a #version header) and tokenizer_config.json with its
  // added_tokens_decoder. transformers 5.17's Qwen2Tokenizer on these files gives the golden ids
  // too (tests/data/tokenizer/meta.json: vocab_merges_mismatch_count 0).
  TempDir dir;
  const Json spec = read_json_file(qwen3_dir() / "tokenizer.json");
  {
    std::ofstream vocab(dir.path() / "vocab.json");
    vocab << spec["model"]["vocab"].dump();
    std::ofstream merges(dir.path() / "merges.txt");
    merges << "#version: 0.2\n";
    for (const Json& m : spec["model"]["merges"])
      merges << m[0].get<std::string>() << ' ' << m[1].get<std::string>() << '\n';
  }
  fs::copy_file(qwen3_dir() / "tokenizer_config.json", dir.path() / "tokenizer_config.json");
  const auto tokenizer = Tokenizer::load(dir.path());
  EXPECT_EQ(tokenizer->vocab_size(), 151669);
  EXPECT_GE(expect_matches_golden(*tokenizer, data_dir() / "golden.jsonl"), 500u);
}

TEST(TokenizerTest, AddedTokenFlagsMatchHuggingFace) {
  // lstrip, rstrip, single_word, normalized and overlapping tokens, on a small BPE whose
  // tokenizer.json writes merges as "a b" strings.
  const auto tokenizer = Tokenizer::load(data_dir() / "small_bpe");
  EXPECT_GE(expect_matches_golden(*tokenizer, data_dir() / "small_bpe" / "golden.jsonl"), 600u);
}

TEST(TokenizerTest, IncrementalDecoderNeverEmitsBrokenUtf8) {
  const Tokenizer& t = qwen3();
  size_t held_back = 0;
  auto check = [&](const std::vector<int32_t>& ids, bool skip_special, const std::string& expected) {
    IncrementalDecoder decoder(t, skip_special);
    std::string streamed;
    for (int32_t id : ids) {
      const std::string piece = decoder.push(id);
      EXPECT_FALSE(utf8::find_invalid(piece).has_value()) << Json(ids).dump();
      if (decoder.pending_bytes() > 0) ++held_back;
      streamed += piece;
    }
    streamed += decoder.finish();
    EXPECT_EQ(streamed, expected) << Json(ids).dump();
    EXPECT_EQ(decoder.pending_bytes(), 0u);
  };
  for (const Json& row : read_jsonl(data_dir() / "golden.jsonl")) check(ids_of(row), false, row.at("decoded"));
  for (const Json& row : read_jsonl(data_dir() / "decode_golden.jsonl")) {
    check(ids_of(row), false, row.at("plain"));
    check(ids_of(row), true, row.at("skip_special"));
  }
  // CJK and emoji in this corpus are split over byte tokens, so characters were held back.
  EXPECT_GT(held_back, 100u);
}

TEST(TokenizerTest, IncrementalDecoderHoldsAPartialCharacterUntilItCompletes) {
  const Tokenizer& t = qwen3();
  // "€" is E2 82 AC; the single-byte tokens spell it one byte at a time.
  std::vector<int32_t> bytes;
  for (unsigned char b : std::string("\xE2\x82\xAC"))
    bytes.push_back(*t.token_to_id(byte_level::encode(std::string(1, static_cast<char>(b)))));
  IncrementalDecoder decoder(t);
  EXPECT_EQ(decoder.push(bytes[0]), "");
  EXPECT_EQ(decoder.push(bytes[1]), "");
  EXPECT_EQ(decoder.pending_bytes(), 2u);
  EXPECT_EQ(decoder.push(bytes[2]), "€");
  // A sequence that can no longer complete is replaced at once, and the rest goes on.
  EXPECT_EQ(decoder.push(bytes[0]), "");
  EXPECT_EQ(decoder.push(*t.token_to_id("A")),
            "\xEF\xBF\xBD"
            "A");
  EXPECT_EQ(decoder.push(bytes[0]), "");
  EXPECT_EQ(decoder.finish(), "\xEF\xBF\xBD");
}

TEST(TokenizerTest, RejectsInvalidUtf8Input) {
  try {
    qwen3().encode("ok \xC3\x28 broken");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("byte 3"), std::string::npos) << e.what();
  }
}

TEST(TokenizerTest, LoadErrorsNameTheFileAndTheProblem) {
  TempDir dir;
  auto expect_error = [&](ErrorCode code, const std::string& needle) {
    try {
      Tokenizer::load(dir.path());
      FAIL() << "expected an error containing " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(ErrorCode::kNotFound, "no tokenizer found");

  std::ofstream(dir.path() / "vocab.json") << R"({"a": 0, "b": 1, "ab": 2})";
  std::ofstream(dir.path() / "merges.txt") << "#version: 0.2\na b\na c\n";
  expect_error(ErrorCode::kLoadFailed, "merges.txt line 3: merge 'a c': 'c' is not in the vocabulary");

  std::ofstream(dir.path() / "merges.txt") << "#version: 0.2\na b\n";
  std::ofstream(dir.path() / "tokenizer_config.json") << R"({"tokenizer_class": "LlamaTokenizer"})";
  expect_error(ErrorCode::kLoadFailed,
               "tokenizer_class 'LlamaTokenizer' is not supported with vocab.json + merges.txt");
  std::filesystem::remove(dir.path() / "tokenizer_config.json");

  std::ofstream(dir.path() / "merges.txt") << "#version: 0.2\na b c\n";
  expect_error(ErrorCode::kLoadFailed, "merges.txt line 2: merge 'a b c' is not two tokens separated by one space");

  Json spec = read_json_file(data_dir() / "small_bpe" / "tokenizer.json");
  spec["normalizer"] = {{"type", "Lowercase"}};
  std::ofstream(dir.path() / "tokenizer.json") << spec.dump();
  expect_error(ErrorCode::kLoadFailed, "normalizer type 'Lowercase' is not supported");

  spec["normalizer"] = nullptr;
  spec["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  std::ofstream(dir.path() / "tokenizer.json") << spec.dump();
  expect_error(ErrorCode::kLoadFailed, "cannot compile the pre-tokenizer regex '(unclosed'");
}

TEST(TokenizerTest, EncodesConcurrentlyWithTheSameResults) {
  // encode() is called from many server threads at once; the shared word cache must not change
  // results.
  const auto rows = read_jsonl(data_dir() / "golden.jsonl");
  std::vector<std::thread> threads;
  std::atomic<size_t> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = static_cast<size_t>(t); i < rows.size() + static_cast<size_t>(t); ++i) {
        const Json& row = rows[i % rows.size()];
        if (qwen3().encode(row.at("text").get<std::string>()) != ids_of(row)) ++mismatches;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0u);
}

TEST(TokenizerTest, TemplatePostProcessorAddsSpecialTokensOnRequest) {
  TempDir dir;
  Json spec = read_json_file(data_dir() / "small_bpe" / "tokenizer.json");
  const int32_t bos = spec["added_tokens"][1]["id"];  // <|im_start|>
  const int32_t eos = spec["added_tokens"][2]["id"];  // <|im_end|>
  spec["post_processor"] = {{"type", "TemplateProcessing"},
                            {"single", Json::parse(R"([{"SpecialToken": {"id": "<|im_start|>", "type_id": 0}},
                                {"Sequence": {"id": "A", "type_id": 0}},
                                {"SpecialToken": {"id": "<|im_end|>", "type_id": 0}}])")},
                            {"special_tokens", {{"<|im_start|>", {{"ids", {bos}}}}, {"<|im_end|>", {{"ids", {eos}}}}}}};
  std::ofstream(dir.path() / "tokenizer.json") << spec.dump();
  const auto t = Tokenizer::load(dir.path());
  const auto plain = t->encode("hi");
  auto wrapped = t->encode("hi", true);
  ASSERT_EQ(wrapped.size(), plain.size() + 2);
  EXPECT_EQ(wrapped.front(), bos);
  EXPECT_EQ(wrapped.back(), eos);
}

}  // namespace
}  // namespace omni::text
