// normlab._core: the nanobind extension behind `import normlab` (python/normlab/__init__.py wraps
// it in the public, documented API). It holds no logic of its own: every function calls the
// library (include/normlab, src/lab, src/report) as the CLI does, exchanges structured results as
// JSON text (the same JSON the CLI writes, so the numbers are the same), hands out parameters and
// gradients as zero-copy numpy views owned by the Model, and releases the GIL while computing.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>

#include <fmt/format.h>

#include "doctor/doctor.h"
#include "lab/external_command.h"
#include "lab/confirm_session.h"
#include "lab/coordcheck.h"
#include "lab/gradflow.h"
#include "lab/sweep.h"
#include "model/generate.h"
#include "normlab/checkpoint.h"
#include "normlab/config.h"
#include "normlab/config_file.h"
#include "normlab/errors.h"
#include "normlab/evaluate.h"
#include "normlab/metrics.h"
#include "normlab/model.h"
#include "normlab/optimizer.h"
#include "normlab/trainer.h"
#include "report/coordcheck_chart.h"
#include "report/inputs.h"
#include "report/report.h"
#include "tensor/threading.h"
#include "train/checkpoint.h"
#include "train/config_warnings.h"
#include "train/divergence.h"
#include "train/run_tokenizer.h"

namespace nb = nanobind;
using namespace nb::literals;
using namespace normlab;

namespace {

using Tokens = nb::ndarray<const int, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using FloatArray = nb::ndarray<nb::numpy, float>;

// Raises the Python class normlab._errors.NAME with the library's message (the text the CLI
// prints after "normlab: "), and for a ConfigError its problems as a list.
void raise_as(const char* name, const char* what, const std::vector<std::string>* problems) {
  nb::object cls = nb::module_::import_("normlab._errors").attr(name);
  nb::object err = cls(what);
  if (problems) err.attr("problems") = nb::cast(*problems);
  PyErr_SetObject(cls.ptr(), err.ptr());
}

void translate_errors(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const ConfigError& e) {
    raise_as("ConfigError", e.what(), &e.problems);
  } catch (const InputError& e) {
    raise_as("InputError", e.what(), nullptr);
  } catch (const FormatError& e) {
    raise_as("FormatError", e.what(), nullptr);
  } catch (const InternalError& e) {
    raise_as("InternalError", e.what(), nullptr);
  } catch (const Error& e) {
    raise_as("Error", e.what(), nullptr);
  }
}

// A (B, T, ...) float array that owns its storage (the vector moves into a capsule).
FloatArray owned_array(std::vector<float>&& v, std::vector<size_t> shape) {
  auto* heap = new std::vector<float>(std::move(v));
  nb::capsule owner(heap, [](void* q) noexcept { delete static_cast<std::vector<float>*>(q); });
  return FloatArray(heap->data(), shape.size(), shape.data(), owner);
}

// {name: view} over the model's own memory; `self` (the Python Model) owns every view, so a view
// keeps the model alive.
nb::dict views(const std::vector<ParameterView>& ps, nb::handle self) {
  nb::dict out;
  for (const auto& p : ps) {
    std::vector<size_t> shape(p.shape.begin(), p.shape.end());
    out[p.name.c_str()] = FloatArray(p.values.data(), shape.size(), shape.data(), self);
  }
  return out;
}

nb::dict loss_dict(const BatchLoss& l) {
  nb::dict d;
  d["loss"] = l.loss;
  d["ce"] = l.ce;
  d["z_loss"] = l.z_loss;
  d["log_z"] = l.log_z_mean;
  return d;
}

std::span<const int> span_of(const Tokens& t) { return {t.data(), t.size()}; }
int rows(const Tokens& t) { return static_cast<int>(t.shape(0)); }
int cols(const Tokens& t) { return static_cast<int>(t.shape(1)); }

// What Trainer::run's hooks need from Python: the callback, with the GIL taken for it, and the
// signal check between steps. The first Python exception (the callback's, or KeyboardInterrupt
// from a signal handler) stops the run and is raised again once the trainer has returned.
struct PyHooks {
  nb::object callback;
  bool stop = false;
  std::exception_ptr error;

  TrainHooks hooks() {
    TrainHooks h;
    h.on_log = [this](const StepRecord& r) {
      if (callback.is_none() || stop) return;
      nb::gil_scoped_acquire gil;
      try {
        nb::object rec = nb::module_::import_("json").attr("loads")(to_json(r).dump());
        nb::object ret = callback(rec);
        if (ret.is(nb::borrow(Py_False))) stop = true;
      } catch (...) {
        error = std::current_exception();
        stop = true;
      }
    };
    h.stop_requested = [this] {
      if (stop) return true;
      nb::gil_scoped_acquire gil;
      if (PyErr_CheckSignals() != 0) {
        try {
          throw nb::python_error();
        } catch (...) {
          error = std::current_exception();
        }
        stop = true;
      }
      return stop;
    };
    return h;
  }
  void rethrow() {
    if (error) std::rethrow_exception(error);
  }
};

nb::dict result_dict(const TrainResult& r) {
  nb::dict d;
  d["steps"] = r.steps;
  d["train_loss"] = r.train_loss;
  d["train_loss_steps"] = r.train_loss_steps;
  d["val_loss"] = r.val_loss ? nb::cast(*r.val_loss) : nb::none();
  d["diverged"] = r.diverged;
  d["stop_reason"] = r.stop_reason;
  d["stop_step"] = r.stop_step;
  d["tokens_per_s"] = r.tokens_per_s;
  d["wall_s"] = r.wall_s;
  return d;
}

// Trains as `normlab train --out DIR` (or --resume DIR): the GIL is released while the trainer
// runs and taken back for each logged step (callback) and between steps (signals).
nb::dict train(const std::optional<Config>& cfg_in, const std::string& dir, bool resume,
               nb::object callback, bool rewind) {
  PyHooks py;
  py.callback = std::move(callback);
  TrainResult res;
  bool already_complete = false;
  {
    nb::gil_scoped_release nogil;
    std::optional<ResumePoint> from;
    Config cfg;
    if (resume) {
      from = resume_point(dir);
      cfg = cfg_in ? *cfg_in : resume_config(*from);
    } else {
      if (!cfg_in) throw ConfigError({"train needs a config (or resume=True)"});
      cfg = *cfg_in;
    }
    const std::string run_dir = resume ? from->run_dir : dir;
    const ResumeOptions opts =
        resume ? ResumeOptions{from->checkpoint, cfg, rewind, std::string()} : ResumeOptions{};
    Trainer trainer(cfg, run_dir, resume, opts);
    if (resume && trainer.step() >= cfg.train.steps) {
      already_complete = true;
      res.steps = trainer.step();
    } else {
      res = trainer.run(with_divergence_rule(py.hooks(), trainer, run_dir));  // as `normlab train`
    }
  }
  py.rethrow();
  nb::dict d = result_dict(res);
  d["already_complete"] = already_complete;
  return d;
}

std::string gradflow(const Config& base, const std::vector<std::string>& placements,
                     const std::vector<int>& depths, const std::vector<std::string>& inits,
                     int batches, int steps, const std::string& out) {
  nb::gil_scoped_release nogil;
  GradflowSettings s;
  std::vector<std::string> problems;
  for (const auto& p : placements) {
    if (auto v = enum_from_string<Placement>(p)) s.placements.push_back(*v);
    else problems.push_back(fmt::format("placements: '{}' is not a placement", p));
  }
  for (const auto& i : inits) {
    if (auto v = enum_from_string<InitKind>(i)) s.inits.push_back(*v);
    else problems.push_back(fmt::format("inits: '{}' is not an initialisation", i));
  }
  for (int d : depths)
    if (d < 1) problems.push_back(fmt::format("layers: {} is not a depth >= 1", d));
  if (batches < 1) problems.push_back(fmt::format("batches: {} is not >= 1", batches));
  if (steps < 0) problems.push_back(fmt::format("steps: {} is not >= 0", steps));
  if (!problems.empty()) throw ConfigError(problems);
  s.depths = depths;
  s.batches = batches;
  s.train_steps = steps;
  const auto results = run_gradflow(base, s);
  const nlohmann::json j = gradflow_json(base, s, results);
  if (!out.empty()) {  // the files `normlab gradflow --out` writes
    std::filesystem::create_directories(out);
    std::ofstream(std::filesystem::path(out) / "gradflow.json") << j.dump(1) << '\n';
    std::ofstream(std::filesystem::path(out) / "gradflow.md") << gradflow_table(results);
  }
  return j.dump();
}

// The coordinate check (`normlab coordcheck`): its JSON, the files written to `out` when given.
std::string coordcheck(const Config& base, const std::vector<int>& widths,
                       const std::vector<std::string>& parametrizations, int steps, int seeds,
                       const std::string& out) {
  nb::gil_scoped_release nogil;
  CoordcheckSettings s;
  std::vector<std::string> problems;
  for (const auto& p : parametrizations) {
    if (auto v = enum_from_string<Parametrization>(p)) s.parametrizations.push_back(*v);
    else problems.push_back(fmt::format("parametrizations: '{}' is not standard or mup", p));
  }
  for (int w : widths)
    if (w < 1) problems.push_back(fmt::format("widths: {} is not a width >= 1", w));
  if (steps < 1) problems.push_back(fmt::format("steps: {} is not >= 1", steps));
  if (seeds < 1) problems.push_back(fmt::format("seeds: {} is not >= 1", seeds));
  if (!problems.empty()) throw ConfigError(problems);
  s.widths = widths;
  s.steps = steps;
  s.seeds = seeds;
  const CoordcheckResult r = run_coordcheck(base, s);
  if (!out.empty()) return report::write_coordcheck(out, base, r).dump();
  return coordcheck_json(base, r).dump();
}

// One sweep point trained in this process (run_sweep_point, as `normlab sweep --jobs 1`).
std::string sweep_point(const Config& cfg, const std::string& dir) {
  PyHooks py;
  py.callback = nb::none();
  std::string status;
  {
    nb::gil_scoped_release nogil;
    status = run_sweep_point(cfg, dir, py.hooks());
  }
  py.rethrow();
  return status;
}

std::vector<GridAxis> axes_of(const std::vector<std::string>& specs) {
  std::vector<GridAxis> axes;
  for (const auto& g : specs) axes.push_back(parse_grid_axis(g));
  return axes;
}

nb::dict summary_dict(const SweepSummary& s) {
  nb::dict d;
  d["unfinished"] = nb::cast(s.unfinished);
  d["json"] = s.json.is_null() ? std::string() : s.json.dump();
  d["table"] = s.table;
  d["runs_table"] = runs_table(s.runs);
  return d;
}

std::string generate_text(const std::string& checkpoint, const std::string& prompt,
                          const SamplingSettings& s, bool ignore_eos) {
  nb::gil_scoped_release nogil;
  const std::string dir = resolve_checkpoint(checkpoint);
  const Config cfg = checkpoint_config(dir);
  Transformer<float> model(cfg.model, 1, cfg.model.seq_len);
  load_checkpoint(dir, model, nullptr, nullptr);
  const RunTokenizer rt = resolve_tokenizer(cfg, run_dir_of(dir));
  check_vocab(cfg.model, rt);
  const std::vector<int> ids = rt.tok->encode(prompt, /*add_special=*/true);  // as the CLI
  SamplingOptions o;
  o.max_new_tokens = s.max_new_tokens;
  o.temperature = s.temperature;
  o.top_k = s.top_k;
  o.top_p = s.top_p;
  o.seed = s.seed;
  if (!ignore_eos) o.stop_token = run_special_tokens(rt).eos;
  std::vector<int> fresh = generate(model, ids, o, [](int) {});
  // Ids past the tokenizer's vocabulary (a padded model vocabulary) stand for no text.
  std::erase_if(fresh, [&](int t) { return t >= rt.tok->vocab_size(); });
  return rt.tok->decode(fresh, /*skip_special=*/true);
}

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "normlab's C++ core; use the `normlab` package, not this module.";
  m.attr("__version__") = NORMLAB_VERSION;
  nb::register_exception_translator(translate_errors);

  // Config: an opaque value; Python reads and changes it through JSON and TOML text.
  nb::class_<Config>(m, "Config")
      .def(nb::init<>())
      .def("__eq__", [](const Config& a, const Config& b) { return a == b; });
  m.def("config_parse", [](const std::string& text, const std::string& source,
                           const std::vector<std::string>& overrides) {
    return parse_config(text, source, overrides);
  });
  m.def("config_load", [](const std::string& path, const std::vector<std::string>& overrides) {
    return load_config(path, overrides);
  });
  m.def("config_from_json", [](const std::string& text) {
    return config_from_json(nlohmann::json::parse(text));
  });
  m.def("config_to_json", [](const Config& c) { return config_to_json(c).dump(); });
  m.def("config_to_toml", &dump_config_toml);
  m.def("config_keys", &config_keys);
  m.def("config_validation_errors", &validation_errors);
  m.def("checkpoint_config", [](const std::string& path) {
    return checkpoint_config(resolve_checkpoint(path));
  });
  m.def("config_warnings", [](const Config& c) { return config_warnings(c); });
  // Where `train --resume PATH` continues: (run directory, checkpoint folder, the config it uses,
  // the damaged checkpoints passed over as (folder, what is wrong)).
  m.def("resume_point", [](const std::string& path) {
    const ResumePoint p = resume_point(path);
    std::vector<std::pair<std::string, std::string>> passed;
    for (const auto& d : p.passed_over) passed.emplace_back(d.checkpoint, d.damage);
    return std::make_tuple(p.run_dir, p.checkpoint, resume_config(p), passed);
  });

  nb::class_<Model>(m, "Model")
      .def("__init__", [](Model* self, const Config& cfg, std::uint64_t seed, int max_batch) {
        new (self) Model(cfg.model, seed, max_batch);
      })
      .def_static("load", [](const std::string& path, int max_batch) {
        return Model::load(path, max_batch);
      })
      .def("config", [](const Model& m) {
        Config c;
        c.model = m.config();
        return c;
      })
      .def_prop_ro("max_batch", &Model::max_batch)
      .def_prop_ro("num_params", &Model::num_params)
      .def("parameters", [](Model& m) { return views(m.parameters(), nb::find(&m)); })
      .def("gradients", [](Model& m) { return views(m.gradients(), nb::find(&m)); })
      .def("param_table", [](Model& m) {
        nb::list rows;
        for (const auto& p : m.parameters())
          rows.append(nb::make_tuple(p.name, nb::tuple(nb::cast(p.shape)), p.group, p.decayed,
                                     p.init, p.init_scale, p.width_dims, p.fan_in_mult,
                                     p.fan_out_mult, p.mup_class));
        return rows;
      })
      .def("logits", [](Model& m, Tokens idx) {
        std::vector<float> out;
        {
          nb::gil_scoped_release nogil;
          out = m.logits(span_of(idx), rows(idx), cols(idx));
        }
        return owned_array(std::move(out), {size_t(rows(idx)), size_t(cols(idx)),
                                            size_t(m.config().vocab_size)});
      })
      .def("loss", [](Model& m, Tokens idx, Tokens tgt, double z_alpha) {
        BatchLoss l;
        {
          nb::gil_scoped_release nogil;
          l = m.loss(span_of(idx), span_of(tgt), rows(idx), cols(idx), z_alpha);
        }
        return loss_dict(l);
      })
      .def("loss_and_grads", [](Model& m, Tokens idx, Tokens tgt, double z_alpha) {
        BatchLoss l;
        {
          nb::gil_scoped_release nogil;
          l = m.loss_and_grads(span_of(idx), span_of(tgt), rows(idx), cols(idx), z_alpha);
        }
        return loss_dict(l);
      })
      .def("save", [](const Model& m, const std::string& path) {
        nb::gil_scoped_release nogil;
        m.save(path);
      })
      .def("load_weights", [](Model& m, const std::string& path) {
        nb::gil_scoped_release nogil;
        m.load_weights(path);
      })
      .def("generate", [](Model& m, const std::vector<int>& prompt, int max_new_tokens,
                          double temperature, int top_k, double top_p, std::uint64_t seed) {
        nb::gil_scoped_release nogil;
        return m.generate(prompt, {max_new_tokens, temperature, top_k, top_p, seed});
      });

  // The optimizer on its own (normlab.Optimizer): it keeps its Model alive (keep_alive<1, 3>).
  using Maxima = nb::ndarray<const double, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
  nb::class_<ModelOptimizer>(m, "Optimizer")
      .def("__init__", [](ModelOptimizer* self, const Config& cfg, Model& model) {
        new (self) ModelOptimizer(cfg, model);
      }, nb::keep_alive<1, 3>())
      .def("step", [](ModelOptimizer& o, double lr, double grad_scale, std::optional<Maxima> mx) {
        std::span<const double> s;
        if (mx) s = {mx->data(), mx->shape(0)};
        nb::gil_scoped_release nogil;
        o.step(lr, grad_scale, s);
      }, "lr"_a, "grad_scale"_a = 1.0, "attn_max_logit"_a.none() = nb::none())
      .def("state", [](ModelOptimizer& o) { return views(o.state(), nb::find(&o)); })
      .def_prop_ro("steps_taken", &ModelOptimizer::steps_taken)
      .def_prop_ro("name", &ModelOptimizer::name)
      .def("lr_multipliers", [](const ModelOptimizer& o) {
        nb::dict d;
        for (const auto& [name, k] : o.lr_multipliers()) d[nb::str(name.c_str())] = k;
        return d;
      })
      .def_prop_ro("qk_clip_heads", &ModelOptimizer::qk_clip_heads)
      .def_prop_ro("qk_clip_max_logit", &ModelOptimizer::qk_clip_max_logit);
  m.def("train", &train, "cfg"_a.none(), "out"_a, "resume"_a, "callback"_a.none(),
        "rewind"_a = false);
  m.def("evaluate", [](const std::string& checkpoint, const std::string& data, int batches,
                       nb::object progress) {
    EvalResult r;
    {
      nb::gil_scoped_release nogil;
      // progress(done, total) after every batch: the targets scored so far (a progress bar).
      EvalProgress on_batch;
      if (!progress.is_none())
        on_batch = [&progress](long done, long total) {
          nb::gil_scoped_acquire gil;
          progress(done, total);
        };
      r = evaluate_checkpoint(checkpoint, data, batches, EvalMode::automatic, on_batch);
    }
    nb::dict d;
    d["loss"] = r.loss;
    d["perplexity"] = r.perplexity;
    d["bits_per_byte"] = r.bits_per_byte;
    d["bytes_per_token"] = r.bytes_per_token;
    d["tokens"] = r.tokens;
    d["exact"] = r.exact;  // every token once (else a sample: "sample" says what was measured)
    d["data_tokens"] = r.data_tokens;
    d["distinct_tokens"] = r.distinct_tokens;
    d["sample"] = r.sample;
    d["tokenizer"] = r.tokenizer;
    d["data"] = r.data_name;
    return d;
  }, "checkpoint"_a, "data"_a, "batches"_a, "progress"_a.none() = nb::none());
  m.def("generate_text", [](const std::string& ckpt, const std::string& prompt, int max_new_tokens,
                            double temperature, int top_k, double top_p, std::uint64_t seed,
                            bool ignore_eos) {
    return generate_text(ckpt, prompt, {max_new_tokens, temperature, top_k, top_p, seed}, ignore_eos);
  });
  m.def("doctor", [](const std::string& run_dir) {
    Diagnosis d;
    {
      nb::gil_scoped_release nogil;
      d = diagnose_run(run_dir);
    }
    return to_json(d).dump();
  });
  // doctor(confirm=True): the plan (dry run), the arms to train (prepared on disk: (job dir, run
  // name, requested config file)), and the verdicts once they are trained (lab/confirm_session.h).
  // With a command template (an external trainer's arms), each arm also carries its command line.
  m.def("confirm_stage", [](const std::string& run_dir, const std::string& stage, int seeds,
                            int jobs, long max_steps, const std::string& command) {
    nb::gil_scoped_release nogil;
    const Diagnosis d = diagnose_run(run_dir);
    const nlohmann::json diag = to_json(d);
    ConfirmOptions o;
    o.seeds = seeds;
    o.jobs = jobs;
    o.max_steps = max_steps;
    o.command = command;
    std::vector<ConfirmJob> js = confirm_jobs(run_dir, diag, d.config, o);
    if (stage == "plan") return attach_confirmations(diag, js, nullptr).dump();
    if (stage == "finish") {
      const auto done = finish_confirmation(js, run_dir, diag, d.config, o);
      return attach_confirmations(diag, js, &done).dump();
    }
    prepare_confirm_jobs(js, run_dir, o);
    nlohmann::json arms = nlohmann::json::array();
    for (const auto& j : js)
      for (std::size_t i = 0; i < j.arms.points.size(); ++i) {
        const std::filesystem::path dir = std::filesystem::path(j.out) / j.arms.points[i].name;
        std::filesystem::create_directories(dir);
        std::ofstream(dir / "requested.toml") << dump_config_toml(j.arms.configs[i]);
        arms.push_back(nlohmann::json::array(
            {j.out, j.arms.points[i].name, (dir / "requested.toml").string(),
             command.empty() ? std::string()
                             : external_command(command, j.arms.points[i], dir.string())}));
      }
    return arms.dump();
  }, "run_dir"_a, "stage"_a, "seeds"_a, "jobs"_a, "max_steps"_a, "command"_a = "");
  // An external command's arm, run to its end and judged as sweep --command judges it
  // (lab/external_command.h); the GIL is released while it runs, so threads run several.
  m.def("run_external_point", [](const std::string& line, const std::string& dir) {
    nb::gil_scoped_release nogil;
    return run_external_point(line, dir);
  });
  m.def("gradflow", &gradflow);
  m.def("coordcheck", &coordcheck);
  m.def("sweep_points", [](const std::vector<std::string>& specs) {
    std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>> out;
    for (const auto& p : expand_grid(axes_of(specs))) out.emplace_back(p.name, p.overrides);
    return out;
  });
  // (name, overrides, seed index) per run of a sweep with `seeds` seeds per point.
  m.def("sweep_seed_points", [](const std::vector<std::string>& specs, int seeds) {
    std::vector<std::tuple<std::string, std::vector<std::pair<std::string, std::string>>, int>> out;
    for (const auto& p : expand_seeds(expand_grid(axes_of(specs)), seeds))
      out.emplace_back(p.name, p.overrides, p.seed);
    return out;
  });
  m.def("sweep_point", &sweep_point);
  m.def("sweep_point_finished", &sweep_point_finished);
  m.def("sweep_summary", [](const std::string& out, const std::vector<std::string>& specs,
                            const std::string& lr_key, int seeds) {
    const auto axes = axes_of(specs);
    return summary_dict(summarize_sweep(out, axes, expand_seeds(expand_grid(axes), seeds), lr_key));
  }, "out"_a, "specs"_a, "lr_key"_a, "seeds"_a = 1);
  m.def("report", [](const std::vector<std::string>& dirs, const std::string& out,
                     const std::string& title, double smoothing) {
    if (!(smoothing >= 0 && smoothing < 1))
      throw InputError("--smoothing must be a number from 0 (off) up to but not including 1");
    report::ReportInputs in;
    report::Report rep;
    {
      nb::gil_scoped_release nogil;
      in = report::load_inputs(dirs);
      const std::string link =
          std::filesystem::path(report::figures_dir_for(out)).filename().string();
      rep = report::build_report(in, title, link, {smoothing});
      report::write_report(rep, out);
    }
    nb::dict d;
    d["html"] = out;
    d["figures_dir"] = report::figures_dir_for(out);
    std::vector<std::string> names;
    for (const auto& f : rep.figures) names.push_back(f.name);
    d["figures"] = nb::cast(names);
    d["not_shown"] = nb::cast(rep.not_shown);
    d["notes"] = nb::cast(in.notes);
    return d;
  });
  m.def("set_num_threads", &set_thread_count);
  m.def("get_num_threads", &thread_count);
  m.def("available_cores", &available_cores);
}
