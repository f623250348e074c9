// The suggestions for names the key table does not know: the edit distance, "did you mean" for
// keys and sections (nearest keys of the same section first), and the message for an unknown key,
// which names another trainer's key's normlab equivalent first (keys_foreign.cpp). Split from
// keys.cpp, which holds the table.
#include <algorithm>
#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "config/keys.h"

namespace normlab::keytab {

// ---- Suggestions ------------------------------------------------------------------------------

// Optimal string alignment distance: Levenshtein plus adjacent transpositions ("modle" -> "model").
// Exact whenever it could pass close_enough() with either string as the query; when the lengths
// alone differ by more than half the longer one, that difference (a lower bound, and too far for
// a suggestion either way) is returned without the O(n m) table, so a 100 KB key from a hostile
// file costs no more than a short one.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  const std::size_t n = a.size(), m = b.size();
  const std::size_t diff = n > m ? n - m : m - n;
  if (diff > std::max<std::size_t>(2, std::max(n, m) / 2)) return diff;
  // Three rolling rows of the (n + 1) x (m + 1) table: i - 2, i - 1, i.
  std::vector<std::size_t> rows(3 * (m + 1));
  auto row = [&](std::size_t i) { return rows.data() + (i % 3) * (m + 1); };
  for (std::size_t j = 0; j <= m; ++j) row(0)[j] = j;
  for (std::size_t i = 1; i <= n; ++i) {
    // prev2 is row i - 2: (i + 1) % 3 == (i - 2) % 3.
    std::size_t *cur = row(i), *prev = row(i - 1), *prev2 = row(i + 1);
    cur[0] = i;
    for (std::size_t j = 1; j <= m; ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        cur[j] = std::min(cur[j], prev2[j - 2] + 1);
    }
  }
  return row(n)[m];
}

// A third of the name, at least two edits; one for names of up to three letters, of which two
// edits would leave one ("eps" is not "pos").
bool close_enough(std::size_t distance, std::string_view query) {
  return distance <= (query.size() <= 3 ? 1 : std::max<std::size_t>(2, query.size() / 3));
}

std::string did_you_mean(const std::optional<std::string>& s) {
  return s ? fmt::format(" (did you mean '{}'?)", *s) : std::string();
}

std::string did_you_mean(const std::vector<std::string>& keys) {
  if (keys.empty()) return {};
  std::string list = fmt::format("'{}'", keys[0]);
  for (std::size_t i = 1; i < keys.size(); ++i)
    list += fmt::format("{}'{}'", i + 1 == keys.size() ? " or " : ", ", keys[i]);
  return fmt::format(" (did you mean {}?)", list);
}

namespace {

// Whether `part` occurs in `whole` as whole words of a snake_case name ("warmup" in
// "warmup_steps", "window" in "sliding_window", not "pos" in "position").
bool contains_words(std::string_view whole, std::string_view part) {
  for (std::size_t at = whole.find(part); at != std::string_view::npos;
       at = whole.find(part, at + 1)) {
    const std::size_t end = at + part.size();
    if ((at == 0 || whole[at - 1] == '_') && (end == whole.size() || whole[end] == '_'))
      return true;
  }
  return false;
}

// How near the unknown name comes to key name `key`, as (kind, distance), smaller being nearer;
// nothing when it is not near at all. Kinds: 0 the same name, 1 a few edits away (close_enough),
// 2 a prefix of the key's name (`warmup` -> `warmup_steps`), 3 whole words of the key's name or
// the key's name among the words typed (`window` -> `sliding_window`, `adam_eps` -> `eps`). The
// distance orders kinds 0 and 1 only: every prefix or word match is as near as any other.
using Nearness = std::pair<int, std::size_t>;
std::optional<Nearness> nearness(std::string_view key, std::string_view name) {
  if (name == key) return Nearness{0, 0};
  const std::size_t d = edit_distance(name, key);
  if (close_enough(d, name)) return Nearness{1, d};
  if (name.size() >= 2 && key.starts_with(name)) return Nearness{2, 0};
  if ((name.size() >= 2 && contains_words(key, name)) ||
      (key.size() >= 3 && contains_words(name, key)))
    return Nearness{3, 0};
  return std::nullopt;
}

}  // namespace

// The nearest valid keys to `section.name`. The nearest ones of the same section (of every
// section when none is given), up to three that tie (`optim.beta` -> beta1, beta2); a key of the
// very same name in another section (`train.lr` -> `optim.lr`), before them unless they are a few
// edits away (`model.eps` -> `optim.eps`, `model.norm_eps`); and only when neither exists, the
// nearest ones of the other sections (`train.warmup` -> `optim.warmup_steps`).
std::vector<std::string> nearest_keys(std::string_view section, std::string_view name) {
  struct Best {
    std::optional<Nearness> n;
    std::vector<std::string> keys;
    void offer(const Nearness& x, const std::string& key) {
      if (!n || x < *n) n = x, keys = {key};
      else if (x == *n && keys.size() < 3) keys.push_back(key);
    }
  } same, other;
  std::vector<std::string> same_name;  // in another section
  for (const auto& k : key_table()) {
    const bool here = section.empty() || k.section == section;
    std::optional<Nearness> n = nearness(k.name, name);
    if (section.empty()) {  // "model_n_layer": against the full name too
      const std::size_t d = edit_distance(name, k.full);
      if (close_enough(d, name) && (!n || Nearness{1, d} < *n)) n = Nearness{1, d};
    }
    if (!n) continue;
    if (!here && n->first == 0) same_name.push_back(k.full);
    else (here ? same : other).offer(*n, k.full);
  }
  if (same_name.empty()) return !same.keys.empty() ? same.keys : other.keys;
  std::vector<std::string> out = same.n && same.n->first <= 1 ? same.keys : same_name;
  const auto& rest = same.n && same.n->first <= 1 ? same_name : same.keys;
  out.insert(out.end(), rest.begin(), rest.end());
  return out;
}

// ---- Unknown names (the table of other trainers' names is keys_foreign.cpp) ----------------

std::string unknown_key_message(std::string_view section, std::string_view name) {
  const std::string full =
      section.empty() ? std::string(name) : fmt::format("{}.{}", section, name);
  if (const ForeignKey* f = find_foreign_key(name)) {
    if (f->normlab.empty()) return fmt::format("key '{}' is not supported: {}", full, f->note);
    return fmt::format("unknown key '{}': normlab calls it '{}'{}", full, f->normlab,
                       f->note.empty() ? std::string() : fmt::format(" ({})", f->note));
  }
  return fmt::format("unknown key '{}'{}", full, did_you_mean(nearest_keys(section, name)));
}

// The nearest section: a few edits away, else one that begins the name or that the name begins
// (`[training]` -> train, `[optimizer]` -> optim, `[opt]` -> optim).
std::optional<std::string> nearest_section(std::string_view name) {
  std::optional<std::string> best;
  std::size_t best_d = std::numeric_limits<std::size_t>::max();
  for (const auto s : section_names()) {
    const std::size_t d = edit_distance(name, s);
    if (d < best_d) best_d = d, best = std::string(s);
  }
  if (close_enough(best_d, name)) return best;
  for (const auto s : section_names())
    if ((name.size() >= 3 && s.starts_with(name)) || name.starts_with(s)) return std::string(s);
  return std::nullopt;
}

}  // namespace normlab::keytab
