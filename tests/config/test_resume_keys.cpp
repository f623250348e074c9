// Which keys a resumed run may change (the per-key property next to the key table): the schedule,
// the length of the run, logging, evaluation, checkpoints, diagnostics, guards and threads may;
// anything that changes shapes, the model, the data or the batches is refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "fixtures.h"
#include "normlab/config_file.h"
#include "normlab/errors.h"

namespace normlab {
namespace {

bool listed(const std::vector<std::string>& keys, const std::string& k) {
  return std::find(keys.begin(), keys.end(), k) != keys.end();
}

TEST(ResumeKeys, TheDocumentedKeysAreResumableAndNoOthers) {
  const auto keys = resumable_keys();
  for (const char* k :
       {"train.steps", "optim.lr", "optim.min_lr_ratio", "optim.warmup_steps", "optim.schedule",
        "optim.weight_decay", "optim.grad_clip", "train.log_interval", "train.eval_interval",
        "train.eval_batches", "train.checkpoint_interval", "train.keep_checkpoints",
        "train.threads", "train.spike_policy", "train.spike_window", "train.spike_threshold",
        "train.max_bad_steps", "diag.interval"})
    EXPECT_TRUE(listed(keys, k)) << k;
  for (const auto& k : keys) {
    EXPECT_NE(k.rfind("model.", 0), 0u) << k;
    EXPECT_NE(k.rfind("data.", 0), 0u) << k;
  }
  for (const char* k : {"train.batch_size", "train.grad_accum", "train.seed", "train.z_loss",
                        "optim.beta1", "optim.beta2"})
    EXPECT_FALSE(listed(keys, k)) << k;
}

TEST(ResumeKeys, ResumableChangesPass) {
  const Config saved = test::tiny_run(20);
  Config next = saved;
  next.train.steps = 30;
  next.optim.lr = 1e-3;
  next.optim.warmup_steps = 0;
  next.optim.schedule = ScheduleKind::constant;
  next.train.log_interval = 7;
  next.train.checkpoint_interval = 5;
  next.train.spike_policy = SpikePolicy::rollback;
  next.train.threads = 1;
  next.diag.interval = 3;
  EXPECT_NO_THROW(check_resume_config(saved, next));
}

TEST(ResumeKeys, EveryRefusedKeyIsNamedWithWhatItChanges) {
  const Config saved = test::tiny_run(20);
  Config next = saved;
  next.train.steps = 30;  // allowed, not reported
  next.train.batch_size = 8;
  next.model.d_model = 64;
  next.data.path = "other.txt";
  try {
    check_resume_config(saved, next);
    FAIL() << "no exception";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.problems.size(), 3u) << e.what();
    EXPECT_EQ(e.problems[0], "model.d_model cannot change on resume: it changes the parameter "
                             "shapes (saved 32, given 64)");
    EXPECT_EQ(e.problems[1], "train.batch_size cannot change on resume: it changes the batches "
                             "the run draws (saved 4, given 8)");
    EXPECT_NE(e.problems[2].find("data.path cannot change on resume: it changes the training"),
              std::string::npos)
        << e.problems[2];
  }
}

}  // namespace
}  // namespace normlab
