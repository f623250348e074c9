// tokenizer.json normalizers (NFC, NFD, NFKC and NFKD through utf8proc, Prepend, Replace, and
// Sequences of them): reading the component, and normalizing a piece of text.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <utf8proc.h>

#include "normlab/errors.h"
#include "text/hf_pipeline.h"

namespace normlab::text::hf {

void read_normalizer(const Reader& r, const json& v, const std::string& path,
                     std::vector<NormStep>& out) {
  if (v.is_null()) return;
  const std::string type = r.type_of(v, path);
  NormStep s{};
  if (type == "Sequence") {
    r.each_in(v, path, "normalizers",
              [&](const json& m, const std::string& at) { read_normalizer(r, m, at, out); });
    return;
  }
  if (type == "NFC") s.kind = NormStep::kNfc;
  else if (type == "NFD") s.kind = NormStep::kNfd;
  else if (type == "NFKC") s.kind = NormStep::kNfkc;
  else if (type == "NFKD") s.kind = NormStep::kNfkd;
  else if (type == "Prepend") {
    s.kind = NormStep::kPrepend;
    s.text = r.string(v, path, "prepend");
  } else if (type == "Replace") {
    s.kind = NormStep::kReplace;
    s.pattern = read_pattern(r, v, path);
    s.text = r.string(v, path, "content");
  } else {
    r.unsupported(path, type, "NFC, NFD, NFKC, NFKD, Prepend, Replace, Sequence");
  }
  out.push_back(std::move(s));
}

namespace {

std::string utf8proc_normalize(std::string_view s, int options) {
  std::uint8_t* dst = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const std::uint8_t*>(s.data()),
                              static_cast<utf8proc_ssize_t>(s.size()), &dst,
                              static_cast<utf8proc_option_t>(options | UTF8PROC_STABLE));
  if (n < 0) {
    std::free(dst);
    throw InputError(fmt::format("[tokenizer] Unicode normalization failed: {}",
                                 utf8proc_errmsg(n)));
  }
  std::string out(reinterpret_cast<const char*>(dst), static_cast<std::size_t>(n));
  std::free(dst);
  return out;
}

}  // namespace

std::string normalize(const std::vector<NormStep>& steps, std::string_view in) {
  std::string s(in);
  for (const NormStep& st : steps) {
    switch (st.kind) {
      case NormStep::kNfc: s = utf8proc_normalize(s, UTF8PROC_COMPOSE); break;
      case NormStep::kNfd: s = utf8proc_normalize(s, UTF8PROC_DECOMPOSE); break;
      case NormStep::kNfkc: s = utf8proc_normalize(s, UTF8PROC_COMPOSE | UTF8PROC_COMPAT); break;
      case NormStep::kNfkd: s = utf8proc_normalize(s, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT); break;
      case NormStep::kPrepend:
        if (!s.empty()) s.insert(0, st.text);
        break;
      case NormStep::kReplace: s = replace_all(s, st.pattern, st.text); break;
    }
  }
  return s;
}

}  // namespace normlab::text::hf
