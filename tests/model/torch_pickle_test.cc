// The torch.save reader against files written the way torch.save writes them
// (tests/data/torch_pickle, made by scripts/reference/make_torch_pickle_fixture.py without torch):
// values, views with offsets and strides, bfloat16 storages, shared storages, and its errors.
#include "model/torch_pickle.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "base/error.h"
#include "model/stored_zip.h"
#include "support/temp_dir.h"

namespace omni::model {
namespace {

const std::filesystem::path kFixture = std::filesystem::path(OMNI_SOURCE_DIR) / "tests/data/torch_pickle";

using Kind = PickleValue::Kind;

std::string error_of(const std::filesystem::path& path) {
  try {
    load_torch_file(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(StoredZipTest, ListsTheEntriesTorchSaveWrites) {
  const StoredZip zip(kFixture / "spk_dict.pt");
  ASSERT_EQ(zip.names().size(), 8u);
  EXPECT_EQ(zip.names()[0], "spk_dict/data.pkl");
  EXPECT_TRUE(zip.contains("spk_dict/data/3"));
  const std::span<const uint8_t> order = zip.entry("spk_dict/byteorder");
  EXPECT_EQ(std::string(order.begin(), order.end()), "little");
  EXPECT_EQ(zip.entry("spk_dict/data/3").size(), 180u * 4);
  EXPECT_THROW(zip.entry("spk_dict/data/9"), Error);
}

TEST(TorchPickleTest, ReadsADictOfDictsOfTensorsAndScalars) {
  const PickleValue::Ptr root = load_torch_file(kFixture / "spk_dict.pt");
  ASSERT_EQ(root->kind, Kind::kDict);
  ASSERT_EQ(root->entries.size(), 2u);
  EXPECT_EQ(root->entries[0].first->text, "Chelsie");  // insertion order
  EXPECT_EQ(root->entries[1].first->text, "Ethan");

  const PickleValue* chelsie = root->find("Chelsie");
  ASSERT_NE(chelsie, nullptr);
  const PickleValue* cond = chelsie->find("cond");
  ASSERT_NE(cond, nullptr);
  ASSERT_EQ(cond->kind, Kind::kTensor);
  ASSERT_EQ(cond->tensor.shape(), (tensor::Shape{1, 12}));
  for (int i = 0; i < 12; ++i) EXPECT_EQ(cond->tensor.data<float>()[i], 0.25f * i - 1.0f) << i;
  // ref_mel[0, t, m] = storage[5 + 9 m + t]: a transposed view at offset 5, made contiguous.
  const tensor::Tensor& mel = chelsie->find("ref_mel")->tensor;
  ASSERT_EQ(mel.shape(), (tensor::Shape{1, 9, 20}));
  for (int t = 0; t < 9; ++t) {
    for (int m = 0; m < 20; ++m) {
      EXPECT_FLOAT_EQ(mel.data<float>()[t * 20 + m], 0.01f * static_cast<float>(m * 9 + t) + 0.5f) << t << "," << m;
    }
  }
  EXPECT_EQ(chelsie->find("bos_token")->kind, Kind::kInt);
  EXPECT_EQ(chelsie->find("bos_token")->integer, 151870);

  const PickleValue* ethan = root->find("Ethan");
  const tensor::Tensor& bf16 = ethan->find("cond")->tensor;  // a BFloat16Storage, widened
  ASSERT_EQ(bf16.shape(), (tensor::Shape{12}));
  for (int i = 0; i < 12; ++i) EXPECT_EQ(bf16.data<float>()[i], 0.125f * i - 0.5f) << i;
  EXPECT_EQ(ethan->find("bos_token")->integer, 151871);
  EXPECT_EQ(ethan->find("missing"), nullptr);

  const PickleValue* extras = ethan->find("extras");
  ASSERT_NE(extras, nullptr);
  ASSERT_EQ(extras->kind, Kind::kList);
  ASSERT_EQ(extras->items.size(), 8u);
  EXPECT_EQ(extras->items[0]->kind, Kind::kBool);
  EXPECT_TRUE(extras->items[0]->boolean);
  EXPECT_EQ(extras->items[1]->kind, Kind::kNone);
  EXPECT_EQ(extras->items[2]->kind, Kind::kFloat);
  EXPECT_EQ(extras->items[2]->real, 0.5);
  EXPECT_EQ(extras->items[3]->integer, -7);
  EXPECT_EQ(extras->items[4]->integer, int64_t{1} << 40);  // LONG1
  EXPECT_EQ(extras->items[5]->text, "text");
  ASSERT_EQ(extras->items[6]->kind, Kind::kTuple);
  EXPECT_EQ(extras->items[6]->items[1]->integer, 2);
  // A second view of Ethan's ref_mel storage (a memoized persistent id): elements 20..39.
  const tensor::Tensor& view = extras->items[7]->tensor;
  ASSERT_EQ(view.numel(), 20);
  for (int i = 0; i < 20; ++i) EXPECT_FLOAT_EQ(view.data<float>()[i], -0.02f * static_cast<float>(20 + i));
}

TEST(TorchPickleTest, RefusesGlobalsItDoesNotKnow) {
  const std::string message = error_of(kFixture / "bad_global.pt");
  EXPECT_NE(message.find("bad_global.pt"), std::string::npos) << message;
  EXPECT_NE(message.find("data.pkl at byte"), std::string::npos) << message;
  EXPECT_NE(message.find("getcwd"), std::string::npos) << message;
  EXPECT_NE(message.find("opcode 0x63 'c'"), std::string::npos) << message;
}

TEST(TorchPickleTest, RefusesOtherPickleProtocols) {
  const std::string message = error_of(kFixture / "protocol4.pt");
  EXPECT_NE(message.find("pickle protocol 4"), std::string::npos) << message;
  EXPECT_NE(message.find("at byte 0"), std::string::npos) << message;
}

TEST(TorchPickleTest, NamesTheFileOfATruncatedOrMissingArchive) {
  std::ifstream in(kFixture / "spk_dict.pt", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  testing::TempDir dir;
  const auto cut = dir.write("cut.pt", bytes.substr(0, bytes.size() / 2));
  const std::string message = error_of(cut);
  EXPECT_NE(message.find("cut.pt"), std::string::npos) << message;
  EXPECT_NE(message.find("zip"), std::string::npos) << message;
  try {
    load_torch_file(dir.path() / "absent.pt");
    FAIL() << "no error for a missing file";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  }
  // A file that is no zip archive at all.
  const auto text = dir.write("plain.pt", "not a zip at all, just text long enough to be searched for a record");
  EXPECT_NE(error_of(text).find("no end-of-central-directory record"), std::string::npos) << error_of(text);
}

}  // namespace
}  // namespace omni::model
