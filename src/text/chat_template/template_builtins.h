// The filters, tests, methods and global functions chat templates call, with jinja2's and
// Python's semantics (and transformers' tojson, raise_exception and strftime_now). Failures
// throw TemplateError; raise_exception throws omni::Error(kInvalidArgument) with its message.
#pragma once

#include <string_view>

#include "text/chat_template/template_value.h"

namespace omni::text::jinja {

// Whether a filter or test of this name exists (the parser rejects unknown ones, as jinja2
// does when it compiles a template).
bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);

Value apply_filter(std::string_view name, const Value& value, CallArgs& args);
bool apply_test(std::string_view name, const Value& value, CallArgs& args);

// obj.name as jinja resolves it: a method or attribute first, then an item.
Value get_attribute(const Value& object, const std::string& name);
// obj[key] as jinja resolves it: an item first, then an attribute.
Value get_item(const Value& object, const Value& key);
// obj[start:stop:step]; null pointers are omitted parts.
Value get_slice(const Value& object, const Value* start, const Value* stop, const Value* step);

// The functions every template sees: range, namespace, dict, raise_exception, strftime_now.
Dict global_functions();

// The elements a for loop visits (list items, dict keys, string characters).
List iterate(const Value& value);

}  // namespace omni::text::jinja
