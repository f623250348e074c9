// Tests of the config's unknown keys and sections (src/config/config_file.cpp,
// src/config/keys.cpp): each is reported with the nearest valid names (a few edits away, a prefix,
// whole words, the same name elsewhere; the same section first), or with none when nothing is
// close, in TOML, overrides and JSON alike; names from nanoGPT, Hugging Face and OLMo are answered
// with the normlab key or with what normlab does instead; and a huge key is reported quickly.
#include "normlab/config_file.h"

#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/keys.h"
#include "config_file_fixtures.h"

namespace normlab {
namespace {

using test::has_problem;
using test::parse_problems;
using test::problems_of;

// The problem the unknown key `section.name` gives in a TOML file, in an override and in JSON,
// each without its location prefix; all three must agree.
std::string unknown_everywhere(const std::string& section, const std::string& name) {
  const auto toml = parse_problems(fmt::format("[{}]\n{} = 1\n", section, name));
  const std::string set = fmt::format("{}.{}=1", section, name);
  const auto over = parse_problems("", {set});
  const auto json = problems_of(
      [&] { config_from_json(nlohmann::json{{section, {{name, 1}}}}); });
  if (toml.size() != 1 || over.size() != 1 || json.size() != 1) {
    ADD_FAILURE() << section << "." << name << ": expected one problem from each front end";
    return {};
  }
  const std::string pre_toml = "cfg.toml:2: ", pre_set = fmt::format("--set '{}': ", set),
                    pre_json = "json: ";
  EXPECT_EQ(toml[0].substr(0, pre_toml.size()), pre_toml);
  EXPECT_EQ(over[0].substr(0, pre_set.size()), pre_set);
  EXPECT_EQ(json[0].substr(0, pre_json.size()), pre_json);
  const std::string t = toml[0].substr(pre_toml.size());
  EXPECT_EQ(over[0].substr(pre_set.size()), t);
  EXPECT_EQ(json[0].substr(pre_json.size()), t);
  return t;
}

// The edit distance alone missed these: a prefix of a key, whole words of one, a key's name among
// the words typed, a name that ties two keys; the same section comes first.
TEST(ConfigFile, UnknownKeySuggestsPrefixesAndWords) {
  EXPECT_EQ(unknown_everywhere("optim", "warmup"),
            "unknown key 'optim.warmup' (did you mean 'optim.warmup_steps'?)");
  EXPECT_EQ(unknown_everywhere("train", "warmup"),
            "unknown key 'train.warmup' (did you mean 'optim.warmup_steps'?)");
  EXPECT_EQ(unknown_everywhere("model", "window"),
            "unknown key 'model.window' (did you mean 'model.sliding_window'?)");
  EXPECT_EQ(unknown_everywhere("optim", "adam_eps"),
            "unknown key 'optim.adam_eps' (did you mean 'optim.eps'?)");
  EXPECT_EQ(unknown_everywhere("optim", "beta"),
            "unknown key 'optim.beta' (did you mean 'optim.beta1' or 'optim.beta2'?)");
  EXPECT_EQ(unknown_everywhere("model", "softcap"),
            "unknown key 'model.softcap' (did you mean 'model.attn_softcap' or "
            "'model.final_softcap'?)");
  // The key of that very name in another section, and the same section's near ones as well.
  EXPECT_EQ(unknown_everywhere("model", "eps"),
            "unknown key 'model.eps' (did you mean 'optim.eps' or 'model.norm_eps'?)");
  EXPECT_EQ(unknown_everywhere("train", "warmup_steps"),
            "unknown key 'train.warmup_steps' (did you mean 'optim.warmup_steps' or "
            "'train.steps'?)");
  EXPECT_EQ(unknown_everywhere("optim", "n_layer"),
            "unknown key 'optim.n_layer' (did you mean 'model.n_layer'?)");
  EXPECT_EQ(unknown_everywhere("train", "lr"),
            "unknown key 'train.lr' (did you mean 'optim.lr'?)");
  // Words, not letters: "pos" inside "position" is no match.
  EXPECT_EQ(unknown_everywhere("data", "positional"), "unknown key 'data.positional'");
}

// What nanoGPT's train.py (and Hugging Face, OLMo) call a setting: the normlab key, or "not
// supported" with what normlab does instead; never a bare "unknown".
TEST(ConfigFile, NamesFromOtherTrainersAreAnswered) {
  EXPECT_EQ(unknown_everywhere("model", "n_embd"),
            "unknown key 'model.n_embd': normlab calls it 'model.d_model'");
  EXPECT_EQ(unknown_everywhere("model", "block_size"),
            "unknown key 'model.block_size': normlab calls it 'model.seq_len'");
  EXPECT_EQ(unknown_everywhere("model", "context_length"),
            "unknown key 'model.context_length': normlab calls it 'model.seq_len'");
  EXPECT_EQ(unknown_everywhere("train", "learning_rate"),
            "unknown key 'train.learning_rate': normlab calls it 'optim.lr'");
  EXPECT_EQ(unknown_everywhere("train", "max_iters"),
            "unknown key 'train.max_iters': normlab calls it 'train.steps'");
  EXPECT_EQ(unknown_everywhere("train", "max_steps"),
            "unknown key 'train.max_steps': normlab calls it 'train.steps'");
  EXPECT_EQ(unknown_everywhere("train", "iters"),
            "unknown key 'train.iters': normlab calls it 'train.steps'");
  EXPECT_EQ(unknown_everywhere("optim", "min_lr"),
            "unknown key 'optim.min_lr': normlab calls it 'optim.min_lr_ratio' (a fraction of "
            "optim.lr, not a learning rate)");
  EXPECT_EQ(unknown_everywhere("model", "hidden_size"),
            "unknown key 'model.hidden_size': normlab calls it 'model.d_model'");
  for (const char* section : {"model", "train"}) {
    const std::string p = unknown_everywhere(section, "dropout");
    EXPECT_EQ(p.rfind(fmt::format("key '{}.dropout' is not supported: normlab has no dropout",
                                  section),
                      0),
              0u)
        << p;
  }
  EXPECT_TRUE(unknown_everywhere("train", "lr_decay_iters")
                  .starts_with("key 'train.lr_decay_iters' is not supported: the decay runs to "
                               "the end of the run, train.steps"));
  // Typos of normlab's own names need no row: the nearness rule finds them.
  EXPECT_EQ(unknown_everywhere("model", "n_heads"),
            "unknown key 'model.n_heads' (did you mean 'model.n_head'?)");
  // Outside any section too.
  EXPECT_TRUE(has_problem(parse_problems("dropout = 0.1\n"),
                          "cfg.toml:1: key 'dropout' is not supported: normlab has no dropout"));
}

// The table of foreign names is data that must not drift from the key table: each names a key
// that exists, or says what to do instead; none is the name of a normlab key (it would shadow the
// suggestion of that key in its right section); none is listed twice.
TEST(ConfigFile, ForeignNamesTableIsConsistent) {
  std::set<std::string_view> names, own;
  for (const auto& k : keytab::key_table()) own.insert(k.name);
  for (const keytab::ForeignKey& f : keytab::foreign_keys()) {
    SCOPED_TRACE(std::string(f.name));
    EXPECT_TRUE(names.insert(f.name).second) << "listed twice";
    EXPECT_FALSE(own.contains(f.name)) << "is a normlab key's name";
    if (f.normlab.empty()) {
      EXPECT_FALSE(f.note.empty()) << "says neither the key nor what to do instead";
    } else {
      const auto dot = f.normlab.find('.');
      ASSERT_NE(dot, std::string_view::npos);
      EXPECT_NE(keytab::find_key(f.normlab.substr(0, dot), f.normlab.substr(dot + 1)), nullptr)
          << f.normlab << " is no key";
    }
  }
  for (const char* n : {"n_embd", "block_size", "dropout", "learning_rate", "max_iters",
                        "warmup_iters", "min_lr", "eval_iters", "gradient_accumulation_steps",
                        "decay_lr", "lr_decay_iters", "dataset", "device", "compile"})
    EXPECT_TRUE(names.contains(n)) << "nanoGPT's " << n;
}

TEST(ConfigFile, UnknownKeySuggestsNearest) {
  const auto p = parse_problems("[model]\nn_layer = 2\nn_layers = 2\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0], "cfg.toml:3: unknown key 'model.n_layers' (did you mean 'model.n_layer'?)");

  // A right name in the wrong section, or outside any section.
  EXPECT_TRUE(has_problem(parse_problems("[train]\nlr = 0.1\n"),
                          "unknown key 'train.lr' (did you mean 'optim.lr'?)"));
  EXPECT_TRUE(has_problem(parse_problems("n_head = 2\n"),
                          "cfg.toml:1: unknown key 'n_head' (did you mean 'model.n_head'?)"));
  EXPECT_TRUE(has_problem(parse_problems("[optim]\nwarmup_step = 10\n"),
                          "unknown key 'optim.warmup_step' (did you mean 'optim.warmup_steps'?)"));
  EXPECT_TRUE(has_problem(parse_problems("[optim]\nbeta_2 = 0.9\n"),
                          "(did you mean 'optim.beta2'?)"));
  // Nothing close: no suggestion rather than a silly one.
  const auto far = parse_problems("[model]\nfrobnicate_everything = 1\n");
  ASSERT_EQ(far.size(), 1u);
  EXPECT_EQ(far[0], "cfg.toml:2: unknown key 'model.frobnicate_everything'");
}

// A key of 100,000 characters gets no suggestion and costs no O(n m) table per known key.
TEST(ConfigFile, HugeUnknownKeyIsReportedQuickly) {
  const std::string key(100000, 'n');
  const auto t0 = std::chrono::steady_clock::now();
  const auto p = parse_problems("[model]\n" + key + " = 1\n");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].find("did you mean"), std::string::npos);
  EXPECT_NE(p[0].find("unknown key 'model.nnnn"), std::string::npos) << p[0].substr(0, 200);
  RecordProperty("seconds", std::to_string(s));  // for information; not a threshold
  // Typos still find their key when lengths differ by a little (the shortcut must not hide them).
  EXPECT_TRUE(has_problem(parse_problems("[model]\nn_lay = 2\n"), "(did you mean 'model.n_layer'?)"));
}

TEST(ConfigFile, UnknownSectionSuggestsNearest) {
  const auto p = parse_problems("[modle]\nn_layer = 2\n\n[optm]\nlr = 1.0\n");
  EXPECT_TRUE(has_problem(p, "cfg.toml:1: unknown section 'modle' (did you mean 'model'?)"));
  EXPECT_TRUE(has_problem(p, "unknown section 'optm' (did you mean 'optim'?)"));
  EXPECT_EQ(p.size(), 2u);  // the keys inside an unknown section are not reported one by one
  EXPECT_TRUE(has_problem(parse_problems("model = 3\n"), "'model' must be a table of keys"));
  // A section that begins the name, or a name that begins one.
  EXPECT_TRUE(has_problem(parse_problems("[training]\nsteps = 2\n"),
                          "unknown section 'training' (did you mean 'train'?)"));
  EXPECT_TRUE(has_problem(parse_problems("[optimizer]\nlr = 2\n"),
                          "unknown section 'optimizer' (did you mean 'optim'?)"));
  EXPECT_TRUE(has_problem(parse_problems("", {"opt.lr=1"}),
                          "--set 'opt.lr=1': unknown section 'opt' (did you mean 'optim'?)"));
}

}  // namespace
}  // namespace normlab
