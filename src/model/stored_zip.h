// Reading a zip archive whose entries are stored uncompressed, the container torch.save writes
// (PyTorch's zip serialization: `<archive>/data.pkl`, `<archive>/data/<key>`, ...). The whole file
// is read into memory: for small side files of a checkpoint (Qwen2.5-Omni's spk_dict.pt), never
// for weights. Zip64 sizes and offsets are understood; a compressed or encrypted entry, a split
// archive or a malformed record is kLoadFailed naming the file, the entry or the byte offset.
// Immutable after opening; safe to read from several threads.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace omni::model {

class StoredZip {
 public:
  // kNotFound for a missing file, kLoadFailed for anything this reader does not accept.
  explicit StoredZip(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }
  // Entry names in archive order.
  const std::vector<std::string>& names() const { return names_; }
  bool contains(const std::string& name) const { return entries_.count(name) > 0; }
  // The bytes of entry `name` (kLoadFailed naming the file and the entry when it is absent); valid
  // while this object lives.
  std::span<const uint8_t> entry(const std::string& name) const;

 private:
  struct Span {
    uint64_t offset = 0, size = 0;
  };
  std::filesystem::path path_;
  std::vector<uint8_t> bytes_;
  std::vector<std::string> names_;
  std::map<std::string, Span> entries_;
};

}  // namespace omni::model
