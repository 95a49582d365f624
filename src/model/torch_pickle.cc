#include "model/torch_pickle.h"

#include <cstring>
#include <map>

#include "base/error.h"
#include "model/stored_zip.h"
#include "tensor/dtype.h"

namespace omni::model {

namespace {

using Ptr = PickleValue::Ptr;
using Kind = PickleValue::Kind;
using tensor::DType;

// The pickle opcodes (protocol 2) torch.save produces for the values this reader supports.
enum Opcode : uint8_t {
  kProto = 0x80,
  kStop = '.',
  kMark = '(',
  kEmptyDict = '}',
  kEmptyList = ']',
  kEmptyTuple = ')',
  kTuple = 't',
  kTuple1 = 0x85,
  kTuple2 = 0x86,
  kTuple3 = 0x87,
  kSetItem = 's',
  kSetItems = 'u',
  kAppend = 'a',
  kAppends = 'e',
  kBinUnicode = 'X',
  kBinInt = 'J',
  kBinInt1 = 'K',
  kBinInt2 = 'M',
  kLong1 = 0x8a,
  kBinFloat = 'G',
  kNone = 'N',
  kNewTrue = 0x88,
  kNewFalse = 0x89,
  kGlobal = 'c',
  kReduce = 'R',
  kBinPersId = 'Q',
  kBinPut = 'q',
  kLongBinPut = 'r',
  kBinGet = 'h',
  kLongBinGet = 'j',
};

constexpr const char* kRebuildTensor = "torch._utils._rebuild_tensor_v2";
constexpr const char* kOrderedDict = "collections.OrderedDict";

// The storage classes a persistent id may name, with the dtype of their bytes.
bool storage_class(const std::string& global, DType* dtype) {
  static const std::map<std::string, DType> kStorages = {
      {"torch.FloatStorage", DType::kF32}, {"torch.BFloat16Storage", DType::kBF16}, {"torch.HalfStorage", DType::kF16}};
  const auto it = kStorages.find(global);
  if (it == kStorages.end()) return false;
  if (dtype != nullptr) *dtype = it->second;
  return true;
}

Ptr make(Kind kind) {
  auto v = std::make_shared<PickleValue>();
  v->kind = kind;
  return v;
}

class Unpickler {
 public:
  Unpickler(const StoredZip& zip, std::string archive, std::span<const uint8_t> pickle)
      : zip_(zip), archive_(std::move(archive)), data_(pickle) {}

  Ptr run();

 private:
  struct StorageInfo {
    DType dtype = DType::kF32;
    int64_t numel = 0;
    std::span<const uint8_t> bytes;
  };

  [[noreturn]] void fail(const std::string& what) const {
    const uint8_t op = op_at_ < data_.size() ? data_[op_at_] : 0;
    const char shown = op >= 0x20 && op < 0x7f ? static_cast<char>(op) : '?';
    throw_error(ErrorCode::kLoadFailed, "{}: {}data.pkl at byte {} (opcode 0x{:02x} '{}'): {}", zip_.path().string(),
                archive_, op_at_, op, shown, what);
  }
  uint8_t byte() {
    if (pos_ >= data_.size()) fail("the pickle ends without STOP");
    return data_[pos_++];
  }
  uint64_t little(int width) {
    uint64_t v = 0;
    for (int i = 0; i < width; ++i) v |= static_cast<uint64_t>(byte()) << (8 * i);
    return v;
  }
  std::string text(uint64_t n) {
    if (n > data_.size() - pos_) fail("a string runs past the end of the pickle");
    std::string s(reinterpret_cast<const char*>(data_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  std::string line() {
    std::string s;
    for (uint8_t c = byte(); c != '\n'; c = byte()) {
      s.push_back(static_cast<char>(c));
      if (s.size() > 256) fail("a global name longer than 256 bytes");
    }
    return s;
  }

  // The stack holds values; a null pointer is a MARK.
  void push(Ptr v) { stack_.push_back(std::move(v)); }
  void push_int(int64_t v) {
    Ptr i = make(Kind::kInt);
    i->integer = v;
    push(i);
  }
  Ptr pop() {
    if (stack_.empty()) fail("the stack is empty");
    Ptr v = std::move(stack_.back());
    stack_.pop_back();
    if (v == nullptr) fail("a MARK where a value was expected");
    return v;
  }
  std::vector<Ptr> pop_to_mark() {
    std::vector<Ptr> values;
    while (true) {
      if (stack_.empty()) fail("no MARK on the stack");
      Ptr v = std::move(stack_.back());
      stack_.pop_back();
      if (v == nullptr) break;
      values.push_back(std::move(v));
    }
    return {values.rbegin(), values.rend()};
  }
  PickleValue& top(Kind kind) {
    if (stack_.empty() || stack_.back() == nullptr || stack_.back()->kind != kind) {
      fail(fmt::format("expected a {} below the items", PickleValue::kind_name(kind)));
    }
    return *stack_.back();
  }
  static bool plain(const Ptr& v) { return v->kind != Kind::kGlobal && v->kind != Kind::kStorage; }

  void persistent_load();
  void reduce();
  Ptr rebuild_tensor(const PickleValue& args);
  int64_t int_arg(const PickleValue& v, const char* what) {
    if (v.kind != Kind::kInt)
      fail(fmt::format("_rebuild_tensor_v2: {} is a {}, not an int", what, PickleValue::kind_name(v.kind)));
    return v.integer;
  }

  const StoredZip& zip_;
  std::string archive_;  // "<archive>/"
  std::span<const uint8_t> data_;
  size_t pos_ = 0, op_at_ = 0;
  std::vector<Ptr> stack_;
  std::map<uint64_t, Ptr> memo_;
  std::map<const PickleValue*, StorageInfo> storages_;
};

Ptr Unpickler::run() {
  while (true) {
    op_at_ = pos_;
    const uint8_t op = byte();
    switch (op) {
      case kProto: {
        const uint8_t version = byte();
        if (version != 2) fail(fmt::format("pickle protocol {} (torch.save writes protocol 2)", version));
        break;
      }
      case kStop: {
        Ptr v = pop();
        if (!stack_.empty()) fail("values left on the stack at STOP");
        return v;
      }
      case kMark:
        stack_.push_back(nullptr);
        break;
      case kEmptyDict:
        push(make(Kind::kDict));
        break;
      case kEmptyList:
        push(make(Kind::kList));
        break;
      case kEmptyTuple:
        push(make(Kind::kTuple));
        break;
      case kTuple: {
        Ptr t = make(Kind::kTuple);
        t->items = pop_to_mark();
        push(t);
        break;
      }
      case kTuple1:
      case kTuple2:
      case kTuple3: {
        const int n = op - kTuple1 + 1;
        Ptr t = make(Kind::kTuple);
        t->items.resize(n);
        for (int i = n - 1; i >= 0; --i) t->items[i] = pop();
        push(t);
        break;
      }
      case kSetItem: {
        Ptr value = pop(), key = pop();
        if (!plain(key) || !plain(value)) fail("a global or a storage stored in a dict");
        top(Kind::kDict).entries.emplace_back(key, value);
        break;
      }
      case kSetItems: {
        const std::vector<Ptr> kv = pop_to_mark();
        if (kv.size() % 2 != 0) fail("an odd number of values for SETITEMS");
        PickleValue& dict = top(Kind::kDict);
        for (size_t i = 0; i < kv.size(); i += 2) {
          if (!plain(kv[i]) || !plain(kv[i + 1])) fail("a global or a storage stored in a dict");
          dict.entries.emplace_back(kv[i], kv[i + 1]);
        }
        break;
      }
      case kAppend: {
        Ptr value = pop();
        if (!plain(value)) fail("a global or a storage stored in a list");
        top(Kind::kList).items.push_back(value);
        break;
      }
      case kAppends: {
        const std::vector<Ptr> values = pop_to_mark();
        for (const Ptr& v : values) {
          if (!plain(v)) fail("a global or a storage stored in a list");
        }
        PickleValue& list = top(Kind::kList);
        list.items.insert(list.items.end(), values.begin(), values.end());
        break;
      }
      case kBinUnicode: {
        Ptr s = make(Kind::kString);
        s->text = text(little(4));
        push(s);
        break;
      }
      case kBinInt:
        push_int(static_cast<int32_t>(little(4)));
        break;
      case kBinInt1:
        push_int(byte());
        break;
      case kBinInt2:
        push_int(static_cast<int64_t>(little(2)));
        break;
      case kLong1: {
        const uint8_t n = byte();
        if (n > 8) fail(fmt::format("an integer of {} bytes (at most 8 are supported)", n));
        uint64_t v = n == 0 ? 0 : little(n);
        if (n > 0 && n < 8 && (v >> (8 * n - 1)) != 0) v |= ~uint64_t{0} << (8 * n);  // two's complement
        push_int(static_cast<int64_t>(v));
        break;
      }
      case kBinFloat: {
        uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | byte();  // big-endian
        Ptr f = make(Kind::kFloat);
        std::memcpy(&f->real, &bits, sizeof(bits));
        push(f);
        break;
      }
      case kNone:
        push(make(Kind::kNone));
        break;
      case kNewTrue:
      case kNewFalse: {
        Ptr b = make(Kind::kBool);
        b->boolean = op == kNewTrue;
        push(b);
        break;
      }
      case kGlobal: {
        const std::string module = line();
        const std::string full = module + "." + line();
        if (full != kRebuildTensor && full != kOrderedDict && !storage_class(full, nullptr)) {
          fail(fmt::format("the global '{}' (only tensors, OrderedDict and float storages are accepted)", full));
        }
        Ptr g = make(Kind::kGlobal);
        g->text = full;
        push(g);
        break;
      }
      case kBinPersId:
        persistent_load();
        break;
      case kReduce:
        reduce();
        break;
      case kBinPut:
      case kLongBinPut: {
        const uint64_t index = op == kBinPut ? byte() : little(4);
        if (stack_.empty() || stack_.back() == nullptr) fail("nothing to memoize");
        memo_[index] = stack_.back();
        break;
      }
      case kBinGet:
      case kLongBinGet: {
        const uint64_t index = op == kBinGet ? byte() : little(4);
        const auto it = memo_.find(index);
        if (it == memo_.end()) fail(fmt::format("memo entry {} was never stored", index));
        push(it->second);
        break;
      }
      default:
        fail("an opcode this reader does not support");
    }
  }
}

void Unpickler::persistent_load() {
  // ('storage', storage class, key, location, numel): the bytes of <archive>/data/<key>.
  const Ptr id = pop();
  if (id->kind != Kind::kTuple || id->items.size() != 5 || id->items[0]->kind != Kind::kString ||
      id->items[0]->text != "storage") {
    fail("a persistent id that is not ('storage', class, key, location, numel)");
  }
  const PickleValue &cls = *id->items[1], &key = *id->items[2], &location = *id->items[3], &numel = *id->items[4];
  StorageInfo info;
  if (cls.kind != Kind::kGlobal || !storage_class(cls.text, &info.dtype))
    fail("a persistent id without a storage class");
  if (key.kind != Kind::kString || location.kind != Kind::kString || numel.kind != Kind::kInt || numel.integer < 0) {
    fail("a persistent id whose key, location or numel has the wrong type");
  }
  info.numel = numel.integer;
  const std::string entry = archive_ + "data/" + key.text;
  if (!zip_.contains(entry)) fail(fmt::format("storage '{}' has no entry '{}' in the archive", key.text, entry));
  info.bytes = zip_.entry(entry);
  if (info.bytes.size() < static_cast<size_t>(info.numel) * tensor::dtype_size(info.dtype)) {
    fail(fmt::format("storage '{}' holds {} bytes, fewer than {} elements of {}", key.text, info.bytes.size(),
                     info.numel, tensor::dtype_name(info.dtype)));
  }
  Ptr storage = make(Kind::kStorage);
  storage->text = key.text;
  storages_[storage.get()] = info;
  push(storage);
}

void Unpickler::reduce() {
  const Ptr args = pop();
  const Ptr callable = pop();
  if (callable->kind != Kind::kGlobal || args->kind != Kind::kTuple) fail("REDUCE needs a global and a tuple");
  if (callable->text == kOrderedDict) {
    if (!args->items.empty()) fail("OrderedDict with arguments");
    push(make(Kind::kDict));
  } else if (callable->text == kRebuildTensor) {
    push(rebuild_tensor(*args));
  } else {
    fail(fmt::format("REDUCE of '{}'", callable->text));
  }
}

Ptr Unpickler::rebuild_tensor(const PickleValue& args) {
  // (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
  if (args.items.size() != 6 && args.items.size() != 7) {
    fail(fmt::format("_rebuild_tensor_v2 with {} arguments (expected 6 or 7)", args.items.size()));
  }
  const auto it = args.items[0]->kind == Kind::kStorage ? storages_.find(args.items[0].get()) : storages_.end();
  if (it == storages_.end()) fail("_rebuild_tensor_v2 without a storage");
  const StorageInfo& storage = it->second;
  const int64_t offset = int_arg(*args.items[1], "the storage offset");
  const PickleValue &size = *args.items[2], &stride = *args.items[3];
  if (size.kind != Kind::kTuple || stride.kind != Kind::kTuple || size.items.size() != stride.items.size()) {
    fail("_rebuild_tensor_v2: size and stride must be tuples of one length");
  }
  tensor::Shape shape;
  std::vector<int64_t> strides;
  int64_t last = offset;  // the largest storage index the tensor reads
  bool empty = false;
  for (size_t d = 0; d < size.items.size(); ++d) {
    shape.push_back(int_arg(*size.items[d], "a size"));
    strides.push_back(int_arg(*stride.items[d], "a stride"));
    if (shape.back() < 0 || strides.back() < 0) fail("_rebuild_tensor_v2: a negative size or stride");
    if (shape.back() == 0) empty = true;
    last += (shape.back() - 1) * strides.back();
  }
  if (offset < 0 || (!empty && last >= storage.numel)) {
    fail(fmt::format("_rebuild_tensor_v2: the view (offset {}, shape {}) reads past the storage's {} elements", offset,
                     tensor::shape_to_string(shape), storage.numel));
  }
  const PickleValue& requires_grad = *args.items[4];
  if (requires_grad.kind != Kind::kBool) fail("_rebuild_tensor_v2: requires_grad is not a bool");
  if (args.items[5]->kind != Kind::kDict || !args.items[5]->entries.empty()) {
    fail("_rebuild_tensor_v2: tensors with backward hooks are not supported");
  }
  if (args.items.size() == 7 && !(args.items[6]->kind == Kind::kDict && args.items[6]->entries.empty()) &&
      args.items[6]->kind != Kind::kNone) {
    fail("_rebuild_tensor_v2: tensors with metadata are not supported");
  }

  Ptr out = make(Kind::kTensor);
  out->tensor = tensor::Tensor::empty(shape, DType::kF32);
  float* dst = out->tensor.data<float>();
  const int64_t n = out->tensor.numel();
  const size_t width = tensor::dtype_size(storage.dtype);
  std::vector<int64_t> index(shape.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t at = offset;
    for (size_t d = 0; d < shape.size(); ++d) at += index[d] * strides[d];
    const uint8_t* src = storage.bytes.data() + static_cast<size_t>(at) * width;
    if (storage.dtype == DType::kF32) {
      std::memcpy(dst + i, src, sizeof(float));
    } else {
      uint16_t bits = 0;
      std::memcpy(&bits, src, sizeof(bits));
      dst[i] = storage.dtype == DType::kBF16 ? tensor::bf16_to_f32(bits) : tensor::f16_to_f32(bits);
    }
    for (size_t d = shape.size(); d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

// A loaded value must not keep the unpickler's internal kinds.
void check_plain(const PickleValue& v, const std::filesystem::path& path) {
  if (v.kind == Kind::kGlobal || v.kind == Kind::kStorage) {
    throw_error(ErrorCode::kLoadFailed, "{}: the pickle's result holds a bare {} '{}'", path.string(),
                v.kind == Kind::kGlobal ? "global" : "storage", v.text);
  }
  for (const Ptr& item : v.items) check_plain(*item, path);
  for (const auto& [k, value] : v.entries) {
    check_plain(*k, path);
    check_plain(*value, path);
  }
}

}  // namespace

const char* PickleValue::kind_name(Kind kind) {
  switch (kind) {
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "string";
    case Kind::kTuple:
      return "tuple";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return "dict";
    case Kind::kTensor:
      return "tensor";
    case Kind::kGlobal:
      return "global";
    case Kind::kStorage:
      return "storage";
  }
  return "?";
}

const PickleValue* PickleValue::find(std::string_view key) const {
  if (kind != Kind::kDict) return nullptr;
  for (const auto& [k, v] : entries) {
    if (k->kind == Kind::kString && k->text == key) return v.get();
  }
  return nullptr;
}

PickleValue::Ptr load_torch_file(const std::filesystem::path& path) {
  const StoredZip zip(path);
  // The pickle is <archive>/data.pkl for the one top-level folder torch.save names after the file.
  std::string archive;
  for (const std::string& name : zip.names()) {
    const size_t slash = name.find('/');
    if (slash != std::string::npos && name.substr(slash) == "/data.pkl") {
      if (!archive.empty()) {
        throw_error(ErrorCode::kLoadFailed, "{}: more than one data.pkl in the archive", path.string());
      }
      archive = name.substr(0, slash + 1);
    }
  }
  if (archive.empty()) {
    throw_error(ErrorCode::kLoadFailed, "{}: no <archive>/data.pkl: not a torch.save file (or a legacy, non-zip one)",
                path.string());
  }
  Unpickler unpickler(zip, archive, zip.entry(archive + "data.pkl"));
  Ptr result = unpickler.run();
  check_plain(*result, path);
  return result;
}

}  // namespace omni::model
