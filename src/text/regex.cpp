// PCRE2 wrapper for tokenizer.json patterns: compile once (UTF, UCP, JIT), match with per-thread
// match data and a per-thread JIT stack so that encoding from many threads needs no lock.
#include "text/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdexcept>

#include <fmt/format.h>

#include "normlab/errors.h"
#include "text/utf8.h"

namespace normlab::text {

namespace {

// One match-data block (group 0 only) and one JIT stack per thread, shared by every Regex: the
// JIT's default 32 KiB stack overflows on long runs of one character class.
struct ThreadMatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  ThreadMatchState() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(64 * 1024, 16 * 1024 * 1024, nullptr);
    if (context && stack) pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~ThreadMatchState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

ThreadMatchState& thread_state() {
  thread_local ThreadMatchState state;
  return state;
}

}  // namespace

Regex::Regex(std::string_view pattern) {
  int err = 0;
  PCRE2_SIZE off = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                        PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &off, nullptr);
  if (!code_) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw std::invalid_argument(
        fmt::format("{} at offset {}", reinterpret_cast<const char*>(msg), off));
  }
  // Without JIT (unsupported CPU) PCRE2 falls back to its interpreter: same answers, slower.
  pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);
}

Regex::~Regex() { pcre2_code_free(code_); }

std::size_t Regex::char_len(std::string_view s, std::size_t i) {
  std::size_t bad = 0;
  const std::size_t n = utf8_sequence(s, i, &bad);
  return n ? n : bad;
}

bool Regex::find(std::string_view s, std::size_t start, std::size_t* b, std::size_t* e) const {
  ThreadMatchState& st = thread_state();
  if (!st.data || !st.context) throw InputError("[tokenizer] out of memory for regex matching");
  const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), start, 0,
                             st.data, st.context);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(rc, msg, sizeof msg);
    throw InputError(fmt::format("[tokenizer] regular expression matching failed at byte {}: {}",
                                 start, reinterpret_cast<const char*>(msg)));
  }
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
  *b = ov[0];
  *e = ov[1];
  return true;
}

std::vector<std::pair<std::size_t, std::size_t>> Regex::matches(std::string_view s) const {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for_each_match(s, [&](std::size_t b, std::size_t e) { out.emplace_back(b, e); });
  return out;
}

}  // namespace normlab::text
