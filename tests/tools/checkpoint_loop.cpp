// Writes checkpoints of a small model in an endless loop (step 1, 2, 3, ...), changing the
// weights each time, until killed. The reliability tests SIGKILL it at random moments and check
// that the latest checkpoint is always complete and loadable.
#include <cstdio>
#include <string>

#include "model/transformer.h"
#include "normlab/checkpoint.h"
#include "train/checkpoint.h"
#include "train/optimizer.h"
#include "train/optimizers/adamw.h"

using namespace normlab;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: checkpoint_loop RUN_DIR\n");
    return 2;
  }
  Config cfg;
  cfg.model.n_layer = 4;
  cfg.model.d_model = 128;
  cfg.model.seq_len = 64;
  Transformer<float> model(cfg.model, 1, 64);
  AdamW<float> opt(model.table(), cfg.optim);
  model.init_params(1);
  TrainingState st;
  for (long step = 1;; ++step) {
    for (auto& p : model.params()) p += 1e-3f;
    st.step = step;
    save_checkpoint(argv[1], cfg, model, opt, st, 2);
    std::printf("%ld\n", step);
    std::fflush(stdout);
  }
}
