#include "runtime/shm_connector.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/connector.h"

namespace omni::runtime {
namespace {

std::vector<uint8_t> pattern(size_t size, uint8_t seed) {
  std::vector<uint8_t> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 9));
  return bytes;
}

bool segment_exists(const std::string& name) { return std::filesystem::exists("/dev/shm" + name); }

// The /proc/self/maps line of the mapping that contains `address`, or "".
std::string mapping_of(const void* address) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  auto target = reinterpret_cast<uintptr_t>(address);
  while (std::getline(maps, line)) {
    uintptr_t begin = 0, end = 0;
    char dash;
    std::istringstream in(line);
    in >> std::hex >> begin >> dash >> end;
    if (target >= begin && target < end) return line;
  }
  return "";
}

class ShmConnectorTest : public ::testing::Test {
 protected:
  std::string session_ = "test" + std::to_string(getpid());
  SharedMemoryConnector connector_{{session_, 1024}};
  void TearDown() override { unlink_session_segments(session_); }
};

TEST_F(ShmConnectorTest, SmallPayloadsTravelInlineWithoutASegment) {
  auto bytes = pattern(1024, 3);
  PayloadRef ref = connector_.put({"req", 0, 1, 0}, bytes);
  EXPECT_TRUE(ref.is_inline());
  EXPECT_EQ(ref.inline_bytes, bytes);
  EXPECT_EQ(ref.size, 1024u);
  EXPECT_FALSE(segment_exists(connector_.segment_name({"req", 0, 1, 0})));
  PayloadView view = connector_.get(ref);
  EXPECT_EQ(std::vector<uint8_t>(view.bytes().begin(), view.bytes().end()), bytes);
}

TEST_F(ShmConnectorTest, LargePayloadIsASegmentReadInPlaceAndUnlinkedOnRead) {
  auto bytes = pattern(1025, 9);
  PayloadAddress address{"req-7", 0, 1, 2};
  PayloadRef ref = connector_.put(address, bytes);
  ASSERT_FALSE(ref.is_inline());
  EXPECT_TRUE(ref.inline_bytes.empty());
  EXPECT_EQ(ref.location, "/omnistage_" + session_ + "_req-7_0_2@1");
  EXPECT_EQ(ref.address.key(), "req-7_0_2");
  ASSERT_TRUE(segment_exists(ref.location));

  PayloadView view = connector_.get(ref);
  EXPECT_FALSE(segment_exists(ref.location)) << "the consumer unlinks the name once mapped";
  ASSERT_EQ(view.size(), bytes.size());
  EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), view.bytes().begin()));
  // Zero copy: the bytes the consumer reads are the shared-memory mapping itself.
  EXPECT_NE(mapping_of(view.bytes().data()).find("/dev/shm" + ref.location), std::string::npos)
      << mapping_of(view.bytes().data());
  // Consumed: a second read fails and names the key.
  try {
    connector_.get(ref);
    FAIL() << "a consumed payload was read twice";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find("req-7_0_2"), std::string::npos) << e.what();
  }
}

TEST_F(ShmConnectorTest, DiscardUnlinksAnUnconsumedSegmentAndIsIdempotent) {
  PayloadRef ref = connector_.put({"gone", 1, 2, 0}, pattern(4096, 1));
  ASSERT_TRUE(segment_exists(ref.location));
  connector_.discard(ref);
  EXPECT_FALSE(segment_exists(ref.location));
  connector_.discard(ref);
  EXPECT_THROW(connector_.get(ref), Error);
}

TEST_F(ShmConnectorTest, SessionSweepRemovesOnlyThisSessionsSegments) {
  SharedMemoryConnector other({session_ + "b", 0});
  PayloadRef mine1 = connector_.put({"a", 0, 1, 0}, pattern(2000, 1));
  PayloadRef mine2 = connector_.put({"b", 0, 1, 0}, pattern(2000, 2));
  PayloadRef theirs = other.put({"a", 0, 1, 0}, pattern(2000, 3));
  EXPECT_EQ(connector_.discard_session(), 2u);
  EXPECT_FALSE(segment_exists(mine1.location));
  EXPECT_FALSE(segment_exists(mine2.location));
  EXPECT_TRUE(segment_exists(theirs.location));
  EXPECT_EQ(other.discard_session(), 1u);
}

TEST_F(ShmConnectorTest, RequestIdsAreEscapedAndLongOnesStayUniqueWithinNameMax) {
  EXPECT_EQ(connector_.segment_name({"chat/1 x", 0, 1, 0}), "/omnistage_" + session_ + "_chat%2F1%20x_0_0@1");
  std::string long_a(400, 'a');
  std::string long_b = long_a + "b";
  std::string name_a = connector_.segment_name({long_a, 0, 1, 0});
  std::string name_b = connector_.segment_name({long_b, 0, 1, 0});
  EXPECT_LE(name_a.size(), 250u);
  EXPECT_NE(name_a, name_b);
  PayloadRef ref = connector_.put({long_b, 0, 1, 0}, pattern(5000, 4));
  EXPECT_EQ(connector_.get(ref).size(), 5000u);
}

TEST_F(ShmConnectorTest, AnotherProcessReadsWhatThisOneWrote) {
  PayloadAddress address{"xproc", 0, 1, 0};
  auto bytes = pattern(1 << 20, 5);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    SharedMemoryConnector producer({session_, 1024});
    PayloadRef ref = producer.put(address, bytes);
    _exit(ref.is_inline() ? 1 : 0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  PayloadRef ref{"SharedMemoryConnector", address, bytes.size(), connector_.segment_name(address), {}};
  PayloadView view = connector_.get(ref);
  EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), view.bytes().begin()));
}

TEST_F(ShmConnectorTest, AWrongSizeInTheReferenceIsAnError) {
  PayloadRef ref = connector_.put({"size", 0, 1, 0}, pattern(3000, 1));
  ref.size = 2999;
  EXPECT_THROW(connector_.get(ref), Error);
  EXPECT_FALSE(segment_exists(ref.location));
}

TEST(ConnectorRegistryTest, BuildsSharedMemoryConnectorWithExtraThreshold) {
  ConnectorContext context{"reg" + std::to_string(getpid()), 10};
  auto connector = make_connector({"SharedMemoryConnector", Json{{"shm_threshold_bytes", 100}}}, context);
  EXPECT_TRUE(connector->put({"r", 0, 1, 0}, pattern(100, 0)).is_inline());
  PayloadRef big = connector->put({"r", 0, 1, 1}, pattern(101, 0));
  EXPECT_FALSE(big.is_inline());
  connector->discard(big);
  // Without extra the context's threshold (--shm-threshold-bytes) applies.
  auto plain = make_connector({}, context);
  PayloadRef eleven = plain->put({"r", 0, 1, 2}, pattern(11, 0));
  EXPECT_FALSE(eleven.is_inline());
  plain->discard(eleven);
}

TEST(ConnectorRegistryTest, UnknownNamesAndOptionsAreConfigErrors) {
  try {
    make_connector({"MooncakeStoreConnector", Json::object()}, {"s", 0});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidConfig);
    EXPECT_NE(std::string(e.what()).find("connector 'MooncakeStoreConnector' is not known; the known connectors are "
                                         "SharedMemoryConnector"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(make_connector({"SharedMemoryConnector", Json{{"shm_threshold_bytes", -1}}}, {"s", 0}), Error);
  EXPECT_THROW(make_connector({"SharedMemoryConnector", Json{{"segment", "x"}}}, {"s", 0}), Error);
}

}  // namespace
}  // namespace omni::runtime
