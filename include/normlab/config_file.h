// Reading and writing normlab configurations: TOML files, `section.key=value` overrides and JSON.
//
// This is the boundary where options arrive as text; everything past it works on the typed
// `Config` of config.h. One table of keys (in config_file.cpp) drives parsing, overrides, the TOML
// dump, JSON, the key list and the "did you mean" suggestions. Sections and keys mirror the struct
// fields exactly (`[model] placement = "peri"`); enum values are their lowercase names. Every
// function that reads a config collects all problems (syntax, unknown keys, wrong types, invalid
// values) and throws a single ConfigError listing them, each prefixed with where its value came
// from: `FILE:LINE: `, `--set 'KEY=VALUE': ` for an override, `json: `.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "normlab/config.h"

namespace normlab {

// Parses TOML text, applies `overrides` ("section.key=value", in order, later wins) and validates.
// `source_name` prefixes messages (`configs/tiny.toml:3: ...`). Keys left out keep their defaults.
Config parse_config(std::string_view toml_text, std::string_view source_name,
                    const std::vector<std::string>& overrides = {});

// Reads the file at `path` (empty path = all defaults), then as parse_config. An unreadable file is
// a ConfigError naming the path.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});

// Sets one key of `c` as an override does (`set_key(c, "optim.soap.max_precond_dim", "64")`; the
// value is read as `--set` reads it), checking its type; ranges and the rules between keys are
// validate()'s. Throws ConfigError naming the key and what is wrong, leaving `c` unchanged. The
// way C++ callers set an optimizer's own keys, which have no field (OptimConfig::settings).
void set_key(Config& c, std::string_view key, std::string_view value);
// The full resolved config as TOML, every key present; parse_config() of it gives back `c`.
std::string dump_config_toml(const Config& c);

// {"model": {...}, "optim": {...}, ...} with enum values as strings; config_from_json inverts it
// (missing keys keep their defaults) with the same checks and messages as parse_config.
nlohmann::json config_to_json(const Config& c);
Config config_from_json(const nlohmann::json& j);

// Every valid key as "section.key", in the order of the structs.
std::vector<std::string> config_keys();

// The keys a resumed run may change ("section.key"): those that alter neither the parameters'
// shapes, the model, the data, the batches nor the objective, only how training goes on from the
// checkpoint (the learning-rate schedule and the other optimizer settings but the betas, the
// length of the run, logging, evaluation, checkpoints, diagnostics, the guards, threads).
std::vector<std::string> resumable_keys();
// Throws ConfigError naming every key that differs between a checkpoint's config `saved` and the
// config `next` a resumed run would continue with, and is not one of resumable_keys()
// ("train.batch_size cannot change on resume: it changes the batches the run draws (8 -> 16)").
void check_resume_config(const Config& saved, const Config& next);

}  // namespace normlab
