#include "config/deploy_schema.h"

#include <algorithm>

#include "base/error.h"
#include "config/json_merge.h"

namespace omni::config {

namespace {

enum class FieldType { kInt, kFloat, kBool, kString, kAny };

template <typename T>
constexpr FieldType field_type_of() {
  if constexpr (std::is_same_v<T, int64_t>) return FieldType::kInt;
  if constexpr (std::is_same_v<T, double>) return FieldType::kFloat;
  if constexpr (std::is_same_v<T, bool>) return FieldType::kBool;
  if constexpr (std::is_same_v<T, std::string>) return FieldType::kString;
  return FieldType::kAny;
}

struct FieldInfo {
  std::string_view name;
  FieldType type;
};

#define OMNI_FIELD_INFO(name, type) FieldInfo{#name, field_type_of<type>()},
constexpr FieldInfo kStageEngineFields[] = {OMNI_STAGE_ENGINE_FIELDS(OMNI_FIELD_INFO)};
constexpr FieldInfo kPipelineWideFields[] = {OMNI_PIPELINE_WIDE_FIELDS(OMNI_FIELD_INFO)};
#undef OMNI_FIELD_INFO

template <typename Range>
const FieldInfo* find_field(const Range& fields, std::string_view name) {
  for (const FieldInfo& field : fields) {
    if (field.name == name) return &field;
  }
  return nullptr;
}

template <typename Range>
bool contains(const Range& names, std::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

template <typename T>
void put_if_set(OrderedJson& out, std::string_view name, const std::optional<T>& value) {
  if (value) out[std::string(name)] = *value;
}

}  // namespace

bool is_stage_engine_field(std::string_view name) { return find_field(kStageEngineFields, name) != nullptr; }
bool is_pipeline_wide_field(std::string_view name) { return find_field(kPipelineWideFields, name) != nullptr; }
bool is_stage_reserved_key(std::string_view name) { return contains(kStageReservedKeys, name); }
bool is_deep_merge_key(std::string_view name) { return contains(kDeepMergeKeys, name); }

void check_field_type(std::string_view name, const OrderedJson& value, std::string_view where) {
  const FieldInfo* field = find_field(kStageEngineFields, name);
  if (!field) field = find_field(kPipelineWideFields, name);
  if (!field || value.is_null()) return;
  const char* expected = nullptr;
  switch (field->type) {
    case FieldType::kInt:
      if (!value.is_number_integer()) expected = "an integer";
      break;
    case FieldType::kFloat:
      if (!value.is_number()) expected = "a number";
      break;
    case FieldType::kBool:
      if (!value.is_boolean()) expected = "true or false";
      break;
    case FieldType::kString:
      if (!value.is_string()) expected = "a string";
      break;
    case FieldType::kAny:
      break;
  }
  if (expected) {
    throw_error(ErrorCode::kInvalidConfig, "{}: {} must be {}, got {}", where, name, expected, json_text(value));
  }
}

OrderedJson StageDeployConfig::engine_fields() const {
  OrderedJson out = OrderedJson::object();
#define OMNI_PUT_FIELD(name, type) put_if_set(out, #name, name);
  OMNI_STAGE_ENGINE_FIELDS(OMNI_PUT_FIELD)
#undef OMNI_PUT_FIELD
  return out;
}

OrderedJson DeployConfig::pipeline_wide_fields() const {
  OrderedJson out = OrderedJson::object();
#define OMNI_PUT_FIELD(name, type) put_if_set(out, #name, name);
  OMNI_PIPELINE_WIDE_FIELDS(OMNI_PUT_FIELD)
#undef OMNI_PUT_FIELD
  return out;
}

const StageDeployConfig* DeployConfig::find_stage(int stage_id) const {
  for (const auto& stage : stages) {
    if (stage.stage_id == stage_id) return &stage;
  }
  return nullptr;
}

}  // namespace omni::config
