// Hugging Face export refuses by default (src/interop/hf_export_keys.*): a model key the table
// does not name is refused whenever it is set away from its default, so a new model option needs
// no edit in the interop code to be refused; a key the table names as the initialization's only
// is not; every row names a real model key.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "config/keys.h"
#include "interop/hf.h"
#include "interop/hf_export_keys.h"
#include "normlab/errors.h"
#include "fixtures.h"

namespace normlab {
namespace {

std::vector<hf::ExportKey> export_table_without(std::string_view key) {
  std::vector<hf::ExportKey> t = hf::export_keys();
  t.erase(std::remove_if(t.begin(), t.end(), [&](const auto& e) { return e.key == key; }),
          t.end());
  return t;
}

// A key the table forgets (as a new option's would be) is refused once set, with the generic
// reason, and not while it holds its default.
TEST(HfExportKeys, AKeyTheTableDoesNotNameIsRefusedWhenSet) {
  ModelConfig m;
  EXPECT_TRUE(hf::unexportable_keys(m, export_table_without("model.rope_local_theta")).empty());
  m.rope_local_theta = 5000;
  const auto p = hf::unexportable_keys(m, export_table_without("model.rope_local_theta"));
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0], "model.rope_local_theta = 5000.0: no supported transformers family maps it "
                  "(Hugging Face export refuses every model option its families do not carry)");
  EXPECT_TRUE(hf::unexportable_keys(m).empty());  // the real table maps it
}

// The initialization's keys change nothing a family's config.json would have to say.
TEST(HfExportKeys, InitializationKeysAreNotRefused) {
  ModelConfig m;
  m.init_std = 0.05;
  m.embed_init_std = 0.5;
  m.layerscale_init = 0.1;
  EXPECT_TRUE(hf::unexportable_keys(m).empty());
}

// A refused row gives its own reason, an enumeration's value unquoted.
TEST(HfExportKeys, RefusedRowsSayWhy) {
  ModelConfig m;
  test::set_model_key(m, "model.attn_sink", "learned");
  m.sigma_reparam = true;
  const auto p = hf::unexportable_keys(m);
  ASSERT_EQ(p.size(), 2u);
  // In the key table's order: a component's key (model.attn_sink) after [model]'s fixed keys.
  EXPECT_EQ(p[0].rfind("model.sigma_reparam = true: ", 0), 0u) << p[0];
  EXPECT_EQ(p[1], "model.attn_sink = learned: no supported transformers family has an attention "
                  "sink (gpt-oss's is not mapped)");
  EXPECT_THROW(hf_family_for(m), ConfigError);
}

TEST(HfExportKeys, EveryRowIsAModelKeyOnce) {
  const auto& keys = keytab::key_table();
  std::vector<std::string_view> seen;
  for (const auto& e : hf::export_keys()) {
    EXPECT_TRUE(std::any_of(keys.begin(), keys.end(),
                            [&](const auto& k) { return k.full == e.key && k.section == "model"; }))
        << e.key << " is no model key";
    EXPECT_EQ(std::count(seen.begin(), seen.end(), e.key), 0) << e.key << " twice";
    seen.push_back(e.key);
  }
}

}  // namespace
}  // namespace normlab
