#include "model/stored_zip.h"

#include <fstream>
#include <iterator>

#include "base/error.h"

namespace omni::model {

namespace {

constexpr uint32_t kEndOfCentralDirectory = 0x06054b50, kZip64Locator = 0x07064b50, kZip64End = 0x06064b50;
constexpr uint32_t kCentralHeader = 0x02014b50, kLocalHeader = 0x04034b50;
constexpr uint16_t kZip64Extra = 0x0001;

// Little-endian reads inside the file, each checked against its end.
class Reader {
 public:
  Reader(const std::vector<uint8_t>& bytes, const std::filesystem::path& path) : bytes_(bytes), path_(path) {}

  uint64_t u(uint64_t offset, int width) const {
    need(offset, width);
    uint64_t v = 0;
    for (int i = width - 1; i >= 0; --i) v = (v << 8) | bytes_[offset + i];
    return v;
  }
  void need(uint64_t offset, uint64_t size) const {
    if (offset > bytes_.size() || size > bytes_.size() - offset) {
      fail(offset, fmt::format("a record of {} bytes runs past the end of the file ({} bytes)", size, bytes_.size()));
    }
  }
  [[noreturn]] void fail(uint64_t offset, const std::string& what) const {
    throw_error(ErrorCode::kLoadFailed, "{}: not a zip archive this reader accepts: at byte {}: {}", path_.string(),
                offset, what);
  }

 private:
  const std::vector<uint8_t>& bytes_;
  const std::filesystem::path& path_;
};

}  // namespace

StoredZip::StoredZip(const std::filesystem::path& path) : path_(path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_error(ErrorCode::kNotFound, "{}: cannot open the file", path.string());
  bytes_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  const Reader r(bytes_, path_);
  if (bytes_.size() < 22) r.fail(0, "too short for an end-of-central-directory record");

  // The end record is the last 22 bytes plus a comment of at most 65535 bytes.
  uint64_t end = bytes_.size() - 22;
  const uint64_t lowest = bytes_.size() > 22 + 65535 ? bytes_.size() - 22 - 65535 : 0;
  while (r.u(end, 4) != kEndOfCentralDirectory) {
    if (end == lowest) r.fail(0, "no end-of-central-directory record");
    --end;
  }
  if (r.u(end + 4, 2) != 0 || r.u(end + 6, 2) != 0) r.fail(end, "a split (multi-disk) archive");
  uint64_t count = r.u(end + 10, 2), directory_size = r.u(end + 12, 4), directory = r.u(end + 16, 4);
  if (count == 0xFFFF || directory_size == 0xFFFFFFFF || directory == 0xFFFFFFFF) {
    if (end < 20 || r.u(end - 20, 4) != kZip64Locator) r.fail(end, "zip64 sizes without a zip64 locator");
    const uint64_t record = r.u(end - 20 + 8, 8);
    if (r.u(record, 4) != kZip64End) r.fail(record, "no zip64 end-of-central-directory record");
    count = r.u(record + 32, 8);
    directory_size = r.u(record + 40, 8);
    directory = r.u(record + 48, 8);
  }
  r.need(directory, directory_size);

  uint64_t at = directory;
  for (uint64_t i = 0; i < count; ++i) {
    if (r.u(at, 4) != kCentralHeader) r.fail(at, fmt::format("central directory entry {} has a bad signature", i));
    const uint64_t flags = r.u(at + 8, 2), method = r.u(at + 10, 2);
    uint64_t compressed = r.u(at + 20, 4), size = r.u(at + 24, 4);
    const uint64_t name_len = r.u(at + 28, 2), extra_len = r.u(at + 30, 2), comment_len = r.u(at + 32, 2);
    uint64_t local = r.u(at + 42, 4);
    r.need(at + 46, name_len + extra_len + comment_len);
    const std::string name(reinterpret_cast<const char*>(bytes_.data() + at + 46), name_len);
    // A zip64 extra field holds, in order, the 64-bit values of the fields saturated above.
    for (uint64_t e = at + 46 + name_len; e + 4 <= at + 46 + name_len + extra_len;) {
      const uint64_t id = r.u(e, 2), len = r.u(e + 2, 2);
      if (id == kZip64Extra) {
        uint64_t field = e + 4;
        for (uint64_t* v : {&size, &compressed, &local}) {
          if (*v == 0xFFFFFFFF) {
            if (field + 8 > e + 4 + len) r.fail(e, fmt::format("entry '{}': a short zip64 extra field", name));
            *v = r.u(field, 8);
            field += 8;
          }
        }
      }
      e += 4 + len;
    }
    if (flags & 0x1) r.fail(at, fmt::format("entry '{}' is encrypted", name));
    if (method != 0 || compressed != size) {
      r.fail(at,
             fmt::format("entry '{}' is compressed (method {}); torch.save stores entries uncompressed", name, method));
    }
    if (r.u(local, 4) != kLocalHeader) r.fail(local, fmt::format("entry '{}' has no local header", name));
    const uint64_t data = local + 30 + r.u(local + 26, 2) + r.u(local + 28, 2);
    r.need(data, size);
    if (entries_.count(name) > 0) r.fail(at, fmt::format("entry '{}' appears twice", name));
    entries_[name] = Span{data, size};
    names_.push_back(name);
    at += 46 + name_len + extra_len + comment_len;
  }
}

std::span<const uint8_t> StoredZip::entry(const std::string& name) const {
  const auto it = entries_.find(name);
  if (it == entries_.end())
    throw_error(ErrorCode::kLoadFailed, "{}: the archive has no entry '{}'", path_.string(), name);
  return {bytes_.data() + it->second.offset, static_cast<size_t>(it->second.size)};
}

}  // namespace omni::model
