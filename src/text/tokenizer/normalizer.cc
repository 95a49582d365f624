#include "text/tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "base/error.h"

namespace omni::text {
namespace {

void append_forms(const Json& spec, std::string_view source, std::vector<NormalizationForm>& forms) {
  if (spec.is_null()) return;
  const std::string type = spec.value("type", "");
  if (type == "NFC") {
    forms.push_back(NormalizationForm::kNfc);
  } else if (type == "NFD") {
    forms.push_back(NormalizationForm::kNfd);
  } else if (type == "NFKC") {
    forms.push_back(NormalizationForm::kNfkc);
  } else if (type == "NFKD") {
    forms.push_back(NormalizationForm::kNfkd);
  } else if (type == "Sequence" && spec.contains("normalizers")) {
    for (const Json& n : spec["normalizers"]) append_forms(n, source, forms);
  } else {
    throw_error(ErrorCode::kLoadFailed,
                "{}: normalizer type '{}' is not supported (supported: NFC, NFD, NFKC, NFKD, Sequence)", source, type);
  }
}

utf8proc_option_t options_for(NormalizationForm form) {
  switch (form) {
    case NormalizationForm::kNfc:
      return static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    case NormalizationForm::kNfd:
      return static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
    case NormalizationForm::kNfkc:
      return static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
    case NormalizationForm::kNfkd:
      return static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  }
  return UTF8PROC_STABLE;
}

bool is_ascii(std::string_view text) {
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

}  // namespace

Normalizer Normalizer::from_json(const Json& spec, std::string_view source) {
  std::vector<NormalizationForm> forms;
  append_forms(spec, source, forms);
  return Normalizer(std::move(forms));
}

std::string Normalizer::normalize(std::string_view text) const {
  // ASCII is invariant under every normalization form; most text is ASCII.
  if (forms_.empty() || is_ascii(text)) return std::string(text);
  std::string current(text);
  for (NormalizationForm form : forms_) {
    utf8proc_uint8_t* mapped = nullptr;
    const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(current.data()),
                                            static_cast<utf8proc_ssize_t>(current.size()), &mapped, options_for(form));
    if (n < 0) {
      throw_error(ErrorCode::kInvalidArgument, "cannot normalize text: {}", utf8proc_errmsg(n));
    }
    std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owner(mapped, &std::free);
    current.assign(reinterpret_cast<const char*>(mapped), static_cast<size_t>(n));
  }
  return current;
}

}  // namespace omni::text
