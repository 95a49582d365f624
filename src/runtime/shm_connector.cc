#include "runtime/shm_connector.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/error.h"

namespace omni::runtime {

namespace {

// NAME_MAX for a /dev/shm entry, less room for the '/'.
constexpr size_t kMaxSegmentName = 250;

std::string escape_key(std::string_view key) {
  std::string out;
  for (char c : key) {
    bool plain =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (plain) {
      out += c;
    } else {
      out += fmt::format("%{:02X}", static_cast<unsigned char>(c));
    }
  }
  return out;
}

uint64_t fnv1a(std::string_view text) {
  uint64_t hash = 14695981039346656037ull;
  for (char c : text) hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return hash;
}

struct FileDescriptor {
  int fd;
  ~FileDescriptor() {
    if (fd >= 0) close(fd);
  }
};

}  // namespace

SharedMemoryConnector::Options SharedMemoryConnector::Options::from_extra(const Json& extra,
                                                                          const ConnectorContext& context) {
  Options options{context.session, context.inline_threshold_bytes, context.retain_on_get, context.inline_always};
  if (extra.is_null()) return options;
  if (!extra.is_object())
    throw_error(ErrorCode::kInvalidConfig, "{}: extra must be a mapping", kSharedMemoryConnectorName);
  for (const auto& [key, value] : extra.items()) {
    if (key == "shm_threshold_bytes") {
      if (!value.is_number_integer() || value.get<int64_t>() < 0) {
        throw_error(ErrorCode::kInvalidConfig, "{}: extra.shm_threshold_bytes must be a non-negative integer, not {}",
                    kSharedMemoryConnectorName, value.dump());
      }
      options.inline_threshold_bytes = value.get<uint64_t>();
    } else {
      throw_error(ErrorCode::kInvalidConfig, "{}: unknown extra option '{}'; the known option is shm_threshold_bytes",
                  kSharedMemoryConnectorName, key);
    }
  }
  return options;
}

SharedMemoryConnector::SharedMemoryConnector(Options options) : options_(std::move(options)) {}

std::string SharedMemoryConnector::segment_name(const PayloadAddress& address) const {
  std::string key = escape_key(address.key());
  std::string suffix = "@" + std::to_string(address.to_stage);
  std::string name = std::string(kSegmentPrefix) + options_.session + "_" + key + suffix;
  if (name.size() > kMaxSegmentName) {
    // Long request ids keep a readable head and stay unique through the hash of the whole key.
    std::string hash = fmt::format("~{:016x}", fnv1a(key));
    size_t keep = kMaxSegmentName - (name.size() - key.size()) - hash.size();
    name = std::string(kSegmentPrefix) + options_.session + "_" + key.substr(0, keep) + hash + suffix;
  }
  return name;
}

PayloadRef SharedMemoryConnector::put(const PayloadAddress& address, std::span<const uint8_t> bytes) {
  PayloadRef ref{std::string(kSharedMemoryConnectorName), address, bytes.size(), "", {}};
  if (options_.inline_always || bytes.size() <= options_.inline_threshold_bytes) {
    ref.inline_bytes.assign(bytes.begin(), bytes.end());
    return ref;
  }
  std::string name = segment_name(address);
  auto fail = [&](const char* what) {
    int err = errno;
    shm_unlink(name.c_str());
    throw_error(ErrorCode::kUnavailable, "cannot {} shared-memory segment {} for payload {} ({} bytes): {}", what, name,
                address.key(), bytes.size(), std::strerror(err));
  };
  FileDescriptor file{shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600)};
  if (file.fd < 0 && errno == EEXIST) {
    // A segment of the same key and session can only be a leftover of an aborted attempt.
    shm_unlink(name.c_str());
    file.fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  }
  if (file.fd < 0) fail("create");
  // Reserving the pages now turns a full /dev/shm into an error here instead of a SIGBUS mid-copy.
  if (int err = posix_fallocate(file.fd, 0, static_cast<off_t>(bytes.size())); err != 0) {
    errno = err;
    fail("size");
  }
  void* data = mmap(nullptr, bytes.size(), PROT_READ | PROT_WRITE, MAP_SHARED, file.fd, 0);
  if (data == MAP_FAILED) fail("map");
  std::memcpy(data, bytes.data(), bytes.size());
  munmap(data, bytes.size());
  ref.location = name;
  return ref;
}

PayloadView SharedMemoryConnector::get(const PayloadRef& ref) {
  if (ref.is_inline()) {
    auto owner = std::make_shared<const std::vector<uint8_t>>(ref.inline_bytes);
    return PayloadView(owner->data(), owner->size(), owner);
  }
  FileDescriptor file{shm_open(ref.location.c_str(), O_RDONLY | O_CLOEXEC, 0)};
  if (file.fd < 0) {
    throw_error(ErrorCode::kNotFound,
                "payload {} for stage {}: shared-memory segment {} is gone (consumed, discarded, or never written): {}",
                ref.address.key(), ref.address.to_stage, ref.location, std::strerror(errno));
  }
  struct stat info {};
  if (fstat(file.fd, &info) != 0 || static_cast<uint64_t>(info.st_size) != ref.size) {
    shm_unlink(ref.location.c_str());
    throw_error(ErrorCode::kInternal, "payload {}: shared-memory segment {} holds {} bytes, the reference says {}",
                ref.address.key(), ref.location, static_cast<long long>(info.st_size), ref.size);
  }
  void* data = mmap(nullptr, ref.size, PROT_READ, MAP_SHARED, file.fd, 0);
  int map_error = errno;
  // The name goes now: the mapping keeps the bytes, and a consumer that dies leaves nothing behind.
  // Unless the head keeps it for a replay, and discards it once the consumer's stage finished.
  if (!options_.retain_on_get) shm_unlink(ref.location.c_str());
  if (data == MAP_FAILED) {
    throw_error(ErrorCode::kUnavailable, "payload {}: cannot map shared-memory segment {}: {}", ref.address.key(),
                ref.location, std::strerror(map_error));
  }
  size_t size = ref.size;
  std::shared_ptr<const void> owner(data, [size](const void* p) { munmap(const_cast<void*>(p), size); });
  return PayloadView(static_cast<const uint8_t*>(data), size, std::move(owner));
}

void SharedMemoryConnector::discard(const PayloadRef& ref) {
  if (!ref.is_inline()) shm_unlink(ref.location.c_str());
}

size_t SharedMemoryConnector::discard_session() { return unlink_session_segments(options_.session); }

size_t unlink_session_segments(const std::string& session) {
  std::string prefix = std::string(kSegmentPrefix.substr(1)) + session + "_";
  size_t removed = 0;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return 0;
  while (dirent* entry = readdir(dir)) {
    std::string_view name = entry->d_name;
    if (name.rfind(prefix, 0) != 0) continue;
    std::string segment(1, '/');
    segment.append(name);
    if (shm_unlink(segment.c_str()) == 0) ++removed;
  }
  closedir(dir);
  return removed;
}

}  // namespace omni::runtime
