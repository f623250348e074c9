// Damaged checkpoints: checkpoint_damage() judges a folder from its files' sizes and headers
// (truncated, trailing bytes, missing, malformed header); loading a damaged checkpoint names it
// and lists the run's intact ones; resuming a run directory passes over damaged checkpoints to the
// newest intact one, a named one is never substituted, and rewinding past an intact later
// checkpoint needs ResumeOptions::rewind.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fixtures.h"
#include "normlab/checkpoint.h"
#include "normlab/errors.h"
#include "normlab/model.h"
#include "normlab/trainer.h"
#include "train/checkpoint.h"

namespace fs = std::filesystem;

// Own namespace: unity builds put this file next to others with helpers of the same names.
namespace normlab::checkpoint_damage_test {

// A finished 15-step run with checkpoints at steps 5, 10 and 15.
std::string three_checkpoints(const std::string& name) {
  const std::string dir = test::temp_dir(name);
  Config c = test::tiny_run(15);
  c.train.checkpoint_interval = 5;
  c.train.keep_checkpoints = 5;
  Trainer(c, dir, false).run();
  return dir;
}

fs::path ckpt(const std::string& dir, int step) {
  return fs::path(dir) / "checkpoints" / fmt::format("step_{:08d}", step);
}

// Cuts `n` bytes off the end of `file`; returns its size before.
std::uintmax_t truncate_by(const fs::path& file, std::uintmax_t n) {
  const std::uintmax_t size = fs::file_size(file);
  fs::resize_file(file, size - n);
  return size;
}

TEST(CheckpointDamage, NamesWhatIsWrongFromSizesAndHeaders) {
  const std::string dir = three_checkpoints("damage_kinds");
  const fs::path c = ckpt(dir, 15);
  EXPECT_EQ(checkpoint_damage(c.string()), std::nullopt);
  const std::uintmax_t size = truncate_by(c / "model.safetensors", 100);
  EXPECT_EQ(checkpoint_damage(c.string()),
            fmt::format("model.safetensors is truncated (expected {} bytes, found {})", size,
                        size - 100));
  // Eval and generate read the weights only; a damaged state.safetensors matters to resume.
  const fs::path s = ckpt(dir, 10) / "state.safetensors";
  const std::uintmax_t state_size = fs::file_size(s);
  { std::ofstream(s, std::ios::app | std::ios::binary) << "xyz"; }
  EXPECT_EQ(checkpoint_damage(ckpt(dir, 10).string(), /*with_state=*/false), std::nullopt);
  EXPECT_EQ(checkpoint_damage(ckpt(dir, 10).string()),
            fmt::format("state.safetensors has 3 bytes past its data (expected {} bytes, found {})",
                        state_size, state_size + 3));
  fs::remove(s);
  EXPECT_EQ(checkpoint_damage(ckpt(dir, 10).string()), "state.safetensors is missing");
  // Cut inside the header; then a header that is no JSON.
  const fs::path w = ckpt(dir, 5) / "model.safetensors";
  fs::resize_file(w, 20);
  EXPECT_NE(checkpoint_damage(ckpt(dir, 5).string())->find("model.safetensors is truncated (its "
                                                           "header alone needs "),
            std::string::npos);
  {
    std::ofstream f(w, std::ios::binary | std::ios::trunc);
    const char prefix[8] = {4, 0, 0, 0, 0, 0, 0, 0};
    f.write(prefix, 8);
    f << "[[[[";
  }
  // A header that is no header: the reader's own message.
  const std::string bad = *checkpoint_damage(ckpt(dir, 5).string());
  EXPECT_EQ(bad.rfind("[safetensors] " + w.string() + ": ", 0), 0u) << bad;
  EXPECT_EQ(checkpoint_damage((fs::path(dir) / "checkpoints" / "step_00000099").string()),
            "the folder is missing");
  fs::remove_all(dir);
}

TEST(CheckpointDamage, LoadingNamesTheDamagedCheckpointAndTheIntactOnes) {
  const std::string dir = three_checkpoints("damage_load");
  const std::uintmax_t size = truncate_by(ckpt(dir, 15) / "model.safetensors", 10);
  try {
    Model::load(dir);  // the run's latest
    FAIL() << "loaded a truncated checkpoint";
  } catch (const DamagedCheckpointError& e) {
    EXPECT_EQ(fs::path(e.checkpoint), ckpt(dir, 15));
    EXPECT_EQ(e.intact, (std::vector<std::string>{ckpt(dir, 10).string(), ckpt(dir, 5).string()}));
    const std::string what = e.what();
    EXPECT_NE(what.find(fmt::format("checkpoint {} is damaged: model.safetensors is truncated "
                                    "(expected {} bytes, found {})",
                                    ckpt(dir, 15).string(), size, size - 10)),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("intact checkpoints of the run " + dir +
                        " (newest first): step_00000010, step_00000005"),
              std::string::npos)
        << what;
  }
  EXPECT_NO_THROW(Model::load(ckpt(dir, 10).string()));
  fs::remove_all(dir);
}

TEST(CheckpointDamage, ResumingTheRunPassesOverDamagedCheckpoints) {
  const std::string dir = three_checkpoints("damage_resume");
  truncate_by(ckpt(dir, 15) / "state.safetensors", 1);
  const ResumePoint p = resume_point(dir);
  EXPECT_EQ(fs::path(p.checkpoint), ckpt(dir, 10));
  ASSERT_EQ(p.passed_over.size(), 1u);
  EXPECT_EQ(fs::path(p.passed_over[0].checkpoint), ckpt(dir, 15));
  EXPECT_NE(p.passed_over[0].damage.find("state.safetensors is truncated"), std::string::npos);
  // A damaged one named explicitly is refused, not substituted; also without its weights.
  EXPECT_THROW(resume_point(ckpt(dir, 15).string()), DamagedCheckpointError);
  fs::rename(ckpt(dir, 15) / "model.safetensors", fs::path(dir) / "weights");
  EXPECT_THROW(resume_point(ckpt(dir, 15).string()), DamagedCheckpointError);
  EXPECT_EQ(fs::path(resume_point(dir).checkpoint), ckpt(dir, 10));
  fs::rename(fs::path(dir) / "weights", ckpt(dir, 15) / "model.safetensors");
  // The Trainer continues from step 10 without being told to rewind: the later checkpoint holds
  // nothing usable. It is kept aside, not deleted.
  {
    Trainer t(Config{}, dir, true);
    EXPECT_EQ(t.step(), 10);
    t.run();
    EXPECT_EQ(t.step(), 15);
  }
  EXPECT_TRUE(fs::exists(ckpt(dir, 15).string() + ".damaged"));
  EXPECT_EQ(checkpoint_damage(ckpt(dir, 15).string()), std::nullopt);  // written anew
  EXPECT_EQ(run_checkpoints(dir).size(), 3u);  // the .damaged folder is not a checkpoint
  // Every checkpoint damaged: nothing to resume.
  for (int s : {5, 10, 15}) truncate_by(ckpt(dir, s) / "model.safetensors", 1);
  try {
    resume_point(dir);
    FAIL() << "resumed a run without an intact checkpoint";
  } catch (const DamagedCheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("has no intact checkpoint"), std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

TEST(CheckpointDamage, RewindingPastAnIntactCheckpointNeedsRewind) {
  const std::string dir = three_checkpoints("damage_rewind");
  ResumeOptions from;
  from.checkpoint = ckpt(dir, 5).string();
  try {
    Trainer(Config{}, dir, true, from);
    FAIL() << "rewound without being asked to";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("would delete the later checkpoints step_00000010, step_00000015 and the "
                        "metrics records after step 5"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("--rewind"), std::string::npos) << what;
  }
  EXPECT_TRUE(fs::exists(ckpt(dir, 15)));
  EXPECT_EQ(fs::path(latest_checkpoint(dir)), ckpt(dir, 15));
  // With a damaged step 15 in between, only step 10 would be lost.
  truncate_by(ckpt(dir, 15) / "model.safetensors", 1);
  try {
    Trainer(Config{}, dir, true, from);
    FAIL() << "rewound without being asked to";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("the later checkpoint step_00000010 and"),
              std::string::npos)
        << e.what();
  }
  from.rewind = true;
  Trainer t(Config{}, dir, true, from);
  EXPECT_EQ(t.step(), 5);
  EXPECT_FALSE(fs::exists(ckpt(dir, 10)));
  EXPECT_TRUE(fs::exists(ckpt(dir, 15).string() + ".damaged"));
  fs::remove_all(dir);
}

TEST(CheckpointDamage, AMissingStepListsTheRunsCheckpoints) {
  const std::string dir = three_checkpoints("damage_missing");
  truncate_by(ckpt(dir, 15) / "model.safetensors", 1);
  try {
    resume_point(ckpt(dir, 1).string());
    FAIL() << "resumed a step that does not exist";
  } catch (const FormatError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(ckpt(dir, 1).string() + " does not exist; the run's checkpoints"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("step_00000005, step_00000010, step_00000015 (damaged) "
                        "(train.keep_checkpoints removes the oldest ones)"),
              std::string::npos)
        << what;
  }
  EXPECT_THROW(
      {
        try {
          resolve_checkpoint(ckpt(dir, 12).string());
        } catch (const FormatError& e) {
          EXPECT_NE(std::string(e.what()).find("step_00000005, step_00000010"), std::string::npos)
              << e.what();
          EXPECT_EQ(std::string(e.what()).find("keep_checkpoints"), std::string::npos) << e.what();
          throw;
        }
      },
      FormatError);
  fs::remove_all(dir);
}

}  // namespace normlab::checkpoint_damage_test
