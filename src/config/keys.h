// The configuration's key table (private to src/config): one entry per `section.key`, bound to its
// field of Config, with the conversions the TOML, JSON and override front ends share, and the
// messages for unknown names (nearest keys, other trainers' names). See keys.cpp.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "config/key_checks.h"
#include "normlab/config.h"

namespace normlab::keytab {

// A value as it arrives from TOML, JSON or an override, before it is checked against its key.
// A list of strings is the one non-scalar (source.unknown).
using StringList = std::vector<std::string>;
using Scalar = std::variant<bool, std::int64_t, std::uint64_t, double, std::string, StringList>;

enum class Kind { integer, unsigned_integer, floating, boolean, string, enumeration, string_list };

struct KeySpec {
  std::string section;  // "model"
  std::string name;     // "n_layer"
  std::string full;     // "model.n_layer"
  Kind kind;
  std::span<const std::string_view> allowed;  // enum names; empty unless kind == enumeration
  std::function<Scalar(const Config&)> get;
  // Stores `v` into the field, or leaves the config untouched and says what is wrong with `v`.
  std::function<std::optional<std::string>(Config&, const Scalar&)> set;
  // Empty when a resumed run may change the key (`train --resume RUN --set key=value`); else what
  // a change would alter, for the refusal ("the parameter shapes"). See the table in keys.cpp.
  std::string_view fixed_on_resume;
  // What the key's value must satisfy on its own (key_checks.h): its range, enum membership.
  // validation_errors runs them in table order; rules over several keys live there.
  std::vector<BoundCheck> checks;
  // The key's earlier name ("optim.momentum" for "optim.muon.momentum"), still read so that older
  // configs and checkpoints load; written and suggested under its own name only. Empty: none.
  std::string_view legacy;
};

// Whether a resumed run (`train --resume RUN --set key=value`) may change a key. It may when the
// change alters only how training goes on from the checkpoint: the length of the run, the
// learning-rate schedule and the optimizer settings that do not define the saved moments, logging,
// evaluation, checkpoints, diagnostics, the guards, threads and reduction settings. It may not
// when the change would alter what the checkpoint holds or what the run trains on; the reason
// names what, for the refusal "<key> cannot change on resume: it changes <reason>".
namespace resume {
constexpr std::string_view resumable = "";
constexpr std::string_view shapes = "the parameter shapes";
constexpr std::string_view model_fn = "the model the checkpoint was trained as";
constexpr std::string_view moments = "the meaning of the saved optimizer moments";
constexpr std::string_view optimizer = "the optimizer whose state the checkpoint holds (start a new run "
                                       "from it with --init-from, which starts a fresh state)";
constexpr std::string_view batches = "the batches the run draws";
constexpr std::string_view start = "how the run started (initialization and data order)";
constexpr std::string_view objective = "the training objective";
constexpr std::string_view data = "the training and validation data";
}  // namespace resume

// TOML text of a value ("2.0", "\"peri\"", "true"); a TOML basic string; "2.0 (a float)".
std::string toml_text(const Scalar& v);
std::string quote(std::string_view s);
std::string describe(const Scalar& v);
std::string expected(Kind kind, std::span<const std::string_view> allowed);
// What a key accepts, for messages ("a positive integer", "one of: post, pre, ...").
std::string expected(const KeySpec& k);

// Every key, in the order of the structs; after [optim]'s own keys, each optimizer's section
// ([optim.muon], [optim.soap], ...: the keys its file declares, option_keys.h) in the order of
// optim.name's values.
const std::vector<KeySpec>& key_table();
// Adds a key of an optimizer's section to the table (OptionKey's constructor, at static
// initialization); a key registered after key_table() was first built is a programming error
// and aborts with its name.
void register_option_key(KeySpec k);
std::vector<std::string_view> section_names();
bool is_section(std::string_view name);
const KeySpec* find_key(std::string_view section, std::string_view name);
// Runs the checks of every key of `section` (of every section when empty), in table order.
void check_keys(const Config& c, std::string_view section, Problems& out);

// Suggestions: optimal string alignment distance, whether it is close enough to suggest, and
// " (did you mean 'x'?)" (or " (did you mean 'x' or 'y'?)") or nothing.
std::size_t edit_distance(std::string_view a, std::string_view b);
bool close_enough(std::size_t distance, std::string_view query);
std::string did_you_mean(const std::optional<std::string>& s);
std::string did_you_mean(const std::vector<std::string>& keys);
// The valid keys nearest to the unknown `section.name` (section empty: a bare name), nearest
// first, the same section before the others: a few edits away, a prefix of a key's name, whole
// words of one, or the same name in another section (see keys.cpp). Empty when nothing is near.
std::vector<std::string> nearest_keys(std::string_view section, std::string_view name);

// A name another trainer uses (nanoGPT, Hugging Face, OLMo): the normlab key that does the same,
// or none (empty) and, in `note`, what normlab does instead.
struct ForeignKey {
  std::string_view name;     // "n_embd", in whatever section it is put
  std::string_view normlab;  // "model.d_model"; empty: normlab has nothing like it
  std::string_view note;     // what to know; required when `normlab` is empty
};
std::span<const ForeignKey> foreign_keys();
const ForeignKey* find_foreign_key(std::string_view name);
// The message for an unknown key: "unknown key 'model.n_embd': normlab calls it 'model.d_model'",
// "key 'model.dropout' is not supported: normlab has no dropout ...", or "unknown key
// 'optim.warmup_step' (did you mean 'optim.warmup_steps'?)".
std::string unknown_key_message(std::string_view section, std::string_view name);
std::optional<std::string> nearest_section(std::string_view name);

}  // namespace normlab::keytab
