#include "report/report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <fmt/format.h>

#include "normlab/config_file.h"
#include "normlab/errors.h"
#include "normlab/metrics.h"
#include "report/figures.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace normlab::report {

namespace {

// Keys whose differences say nothing about the result: left out of series labels (still shown,
// and highlighted, in the config table).
bool label_worthy(const std::string& key) {
  static const std::set<std::string> kNoise = {"train.threads",       "train.keep_checkpoints",
                                               "train.checkpoint_interval", "train.log_interval",
                                               "train.eval_interval", "train.eval_batches",
                                               "diag.interval",       "diag.per_head"};
  return !kNoise.contains(key);
}

// Columns always shown in the config table (when a run has a config), besides the differing ones.
const std::set<std::string>& key_columns() {
  static const std::set<std::string> k = {"model.placement", "model.norm",     "model.n_layer",
                                          "model.d_model",   "model.qk_norm",  "optim.lr",
                                          "train.steps",     "train.z_loss",   "model.attn_softcap",
                                          "model.final_softcap"};
  return k;
}

}  // namespace

std::string value_text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_number_integer() || v.is_number_unsigned()) return v.dump();
  if (v.is_number()) return svg::compact_number(v.get<double>());
  if (v.is_null()) return "\u2014";
  return v.dump();
}

std::string short_key(const std::string& key) { return key.substr(key.find('.') + 1); }

std::string label_part(const std::string& key, const json& value, bool full_key) {
  // The placement and the optimizer read as themselves: "peri", "muon".
  if (key == "model.placement" || key == "optim.name") return value_text(value);
  if (key == "train.init_from") {  // "from scratch" or "from RUN" (the run, not its whole path)
    std::string v = value.is_string() ? value.get<std::string>() : std::string();
    if (const auto at = v.find("/checkpoints/"); at != std::string::npos) v.resize(at);
    while (!v.empty() && v.back() == '/') v.pop_back();
    return v.empty() ? "from scratch" : "from " + v.substr(v.find_last_of('/') + 1);
  }
  return (full_key ? key : short_key(key)) + " " + value_text(value);
}

std::string label_from(const std::map<std::string, json>& cfg, const std::vector<std::string>& keys) {
  std::set<std::string> shorts;
  bool clash = false;
  for (const auto& k : keys) clash = !shorts.insert(short_key(k)).second || clash;
  std::string out;
  for (const auto& k : keys) {
    const auto it = cfg.find(k);
    if (it == cfg.end()) continue;
    out += (out.empty() ? "" : ", ") + label_part(k, it->second, clash);
  }
  return out;
}

std::vector<std::string> distinguishing_labels(const std::vector<std::map<std::string, json>>& cfgs,
                                               const std::vector<std::string>& keys, const std::string& except) {
  std::vector<std::string> differing;
  for (const auto& k : keys) {
    if (!label_worthy(k) || k == except) continue;
    std::vector<json> seen;
    bool missing = false;
    for (const auto& c : cfgs) {
      const auto it = c.find(k);
      if (it == c.end())
        missing = true;
      else if (std::find(seen.begin(), seen.end(), it->second) == seen.end())
        seen.push_back(it->second);
    }
    if (seen.size() + (missing && !seen.empty() ? 1 : 0) > 1) differing.push_back(k);
  }
  // The placement first, then the optimizer, then the rest in key order.
  std::stable_partition(differing.begin(), differing.end(), [](const std::string& k) { return k == "optim.name"; });
  std::stable_partition(differing.begin(), differing.end(), [](const std::string& k) { return k == "model.placement"; });
  std::vector<std::string> out;
  for (const auto& c : cfgs) out.push_back(label_from(c, differing));
  return out;
}

std::vector<std::string> chart_labels(const std::vector<const RunView*>& runs, const std::vector<std::string>& keys,
                                      const std::string& except) {
  std::vector<std::map<std::string, json>> cfgs;  // of the runs that have a config
  for (const RunView* v : runs)
    if (!v->cfg.empty()) cfgs.push_back(v->cfg);
  const std::vector<std::string> labels = distinguishing_labels(cfgs, keys, except);
  std::vector<std::string> out;
  std::size_t next = 0;
  // A legend leads with the run's name, then what sets it apart: "a (post, lr 1e-3)".
  for (const RunView* v : runs) {
    const std::string l = v->cfg.empty() ? std::string() : labels[next++];
    out.push_back(l.empty() || l == v->run->name ? v->run->name : v->run->name + " (" + l + ")");
  }
  return out;
}

// Label keys: the differing ones worth naming, placement first.
std::vector<std::string> label_keys(const Context& cx, const std::string& except) {
  std::vector<std::string> out;
  for (const auto& k : cx.differing)
    if (label_worthy(k) && k != except) out.push_back(k);
  std::stable_partition(out.begin(), out.end(), [](const std::string& k) { return k == "model.placement"; });
  return out;
}

Context make_context(const ReportInputs& in) {
  Context cx;
  cx.keys = config_keys();
  for (std::size_t i = 0; i < in.runs.size(); ++i) {
    RunView v;
    v.run = &in.runs[i];
    v.color = svg::palette(i);
    v.dash = svg::dash_pattern(i);
    if (v.run->config) {
      const json j = config_to_json(*v.run->config);
      for (const auto& k : cx.keys) {
        const auto dot = k.find('.');
        const std::string sec = k.substr(0, dot), name = k.substr(dot + 1);
        if (j.contains(sec) && j[sec].contains(name)) v.cfg[k] = j[sec][name];
      }
    }
    cx.runs.push_back(std::move(v));
  }
  for (const auto& k : cx.keys) {
    std::vector<json> seen;
    for (const auto& v : cx.runs) {
      const auto it = v.cfg.find(k);
      if (it != v.cfg.end() && std::find(seen.begin(), seen.end(), it->second) == seen.end())
        seen.push_back(it->second);
    }
    if (seen.size() > 1) cx.differing.push_back(k);
  }
  std::vector<const RunView*> all;
  for (const auto& v : cx.runs) all.push_back(&v);
  const std::vector<std::string> labels = chart_labels(all, cx.keys);
  for (std::size_t i = 0; i < cx.runs.size(); ++i) cx.runs[i].label = labels[i];
  for (const char* k : {"train.batch_size", "train.grad_accum", "model.seq_len"})
    if (std::find(cx.differing.begin(), cx.differing.end(), k) != cx.differing.end()) cx.xkey = metric::tokens;
  return cx;
}

bool failed_status(const std::string& s) { return s == "diverged" || s == "failed"; }

namespace {

std::string number_cell(double v) { return std::isfinite(v) ? fmt::format("{:.4f}", v) : "\u2014"; }

std::string runs_table(const Context& cx) {
  std::vector<std::string> cols;
  const std::set<std::string> diff(cx.differing.begin(), cx.differing.end());
  // What differs first (placement first of all), then the usual suspects.
  for (const auto& k : cx.keys)
    if (diff.contains(k)) cols.push_back(k);
  std::stable_partition(cols.begin(), cols.end(), [](const std::string& k) { return k == "model.placement"; });
  for (const auto& k : cx.keys)
    if (key_columns().contains(k) && !diff.contains(k)) cols.push_back(k);
  bool any_cfg = false;
  for (const auto& v : cx.runs) any_cfg = any_cfg || !v.cfg.empty();
  if (!any_cfg) cols.clear();
  std::string o =
      "<div class=\"scroll\"><table class=\"runs\"><thead><tr><th>run</th><th>status</th>"
      "<th title=\"the step the run reached\">steps</th>"
      "<th title=\"mean training loss (cross-entropy + z-loss) over the last 20 updated steps\">train loss</th>"
      "<th title=\"mean validation cross-entropy at the last evaluation\">final val loss</th>";
  for (const auto& k : cols)
    o += fmt::format("<th{}>{}</th>", diff.contains(k) ? " class=\"diff\" title=\"differs between runs\"" : "", h(k));
  o += "</tr></thead><tbody>\n";
  bool older = false;  // a run without an end event: its train loss is the last logged loss
  for (const auto& v : cx.runs) {
    const RunInput& r = *v.run;
    const RunEnd end = run_end(r);
    std::string train = number_cell(end.train_loss);
    if (!end.from_event) {
      const json* last = last_step_line(r);
      train = last ? number_cell(number_or_nan(*last, metric::loss)) + "*" : "\u2014";
      older = older || last;
    }
    o += fmt::format(
        "<tr><td title=\"{}\"><span class=\"sw\" style=\"background:{}\"></span>{}</td>"
        "<td class=\"st {}\"{}>{}</td><td>{}</td><td>{}</td><td>{}</td>",
        h(r.dir), v.color, h(r.name), h(r.status), end.detail.empty() ? "" : " title=\"" + h(end.detail) + "\"",
        r.status.empty() ? "\u2014" : h(r.status), std::isfinite(end.step) ? h(value_text(end.step)) : "\u2014",
        train, number_cell(end.val_loss));
    for (const auto& k : cols) {
      const auto it = v.cfg.find(k);
      o += fmt::format("<td{}>{}</td>", diff.contains(k) ? " class=\"diff\"" : "",
                       it == v.cfg.end() ? "\u2014" : h(value_text(it->second)));
    }
    o += "</tr>\n";
  }
  o += "</tbody></table></div>\n";
  o += "<p class=\"note\">steps: the step the run reached. train loss: mean training loss (cross-entropy + "
       "z-loss) over the last 20 updated steps, from the run's end event";
  if (older) o += " (* a run without one: the loss of its last logged step)";
  o += ". final val loss: mean validation cross-entropy over train.eval_batches batches at the run's last "
       "evaluation.</p>\n";
  std::string full;
  for (const auto& v : cx.runs)
    if (v.run->config)
      full += fmt::format("<details class=\"cfg\"><summary>{}</summary><pre>{}</pre></details>\n", h(v.run->name),
                          h(dump_config_toml(*v.run->config)));
  if (!full.empty())
    o += "<details class=\"all\"><summary>Full configuration of each run</summary>\n" + full + "</details>\n";
  return o;
}

std::string inputs_table(const ReportInputs& in) {
  std::string o = "<table class=\"inputs\"><thead><tr><th>directory</th><th>kind</th><th>contents</th></tr>"
                  "</thead><tbody>\n";
  for (const auto& s : in.sweeps) {
    std::size_t failed = 0;
    for (const auto& r : s.runs) failed += failed_status(r.status);
    std::string grid;
    for (const auto& [k, v] : s.grid.items())
      grid += (grid.empty() ? "" : ", ") + k + " (" + std::to_string(v.is_array() ? v.size() : 1) + ")";
    o += fmt::format("<tr><td>{}</td><td>sweep</td><td>{} runs ({} diverged or failed); grid: {}</td></tr>\n", h(s.dir),
                     s.runs.size(), failed, h(grid));
  }
  for (const auto& g : in.gradflows)
    o += fmt::format("<tr><td>{}</td><td>gradflow</td><td>{} results</td></tr>\n", h(g.dir), g.results.size());
  for (const auto& c : in.coordchecks)
    o += fmt::format("<tr><td>{}</td><td>coordcheck</td><td>{} widths, {} steps</td></tr>\n", h(c.dir),
                     c.result.settings.widths.size(), c.result.settings.steps);
  for (const auto& r : in.runs) {
    if (!r.sweep.empty()) continue;
    std::size_t diag = 0;
    for (const auto& rec : r.metrics) diag += rec.contains(metric::grad_norm_block);
    o += fmt::format("<tr><td>{}</td><td>run</td><td>{} records{}{}</td></tr>\n", h(r.dir), r.metrics.size(),
                     diag ? fmt::format(", {} with diagnostics", diag) : "", r.config ? "" : ", no usable config");
  }
  return o + "</tbody></table>\n";
}

constexpr const char* kStyle = R"(
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: #222;
       background: #f7f7f5; margin: 0; }
main { max-width: 1080px; margin: 0 auto; padding: 24px 28px 48px; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 32px 0 10px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
p.meta { color: #666; margin: 0 0 16px; }
nav ul { columns: 2; padding-left: 20px; margin: 6px 0; }
figure { background: #fff; border: 1px solid #ddd; border-radius: 6px; margin: 0 0 22px; padding: 10px 12px 12px; }
figure svg.chart { display: block; max-width: 100%; height: auto; }
figcaption { color: #444; font-size: 13px; margin-top: 6px; }
figcaption a { color: #3b6ea5; }
table { border-collapse: collapse; font-size: 13px; background: #fff; margin: 8px 0; }
th, td { border: 1px solid #ddd; padding: 4px 8px; text-align: left; white-space: nowrap; }
th { background: #f0f0ee; font-weight: 600; }
th.diff { background: #ffe8a3; }
td.diff { background: #fff5d1; font-weight: 600; }
td.bad, td.st.diverged, td.st.failed { color: #b3261e; font-weight: 600; }
td.st.done { color: #2d6a2e; }
.scroll { overflow-x: auto; }
span.sw { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 6px; }
details.all { margin-top: 10px; }
details.cfg { margin: 4px 0 4px 16px; }
details pre { background: #fff; border: 1px solid #ddd; padding: 8px; font-size: 12px; overflow-x: auto; }
ul.notes li { color: #555; }
p.note { color: #555; font-size: 13px; margin: 4px 0 8px; }
)";

// Catches script errors from the start; the last script counts the charts that drew something
// (a series path of non-zero length, or a dot) into data-charts, the charts whose legend repeats a
// label into data-legend-repeats, the marks with a tooltip into data-marks, and the errors into
// data-errors, so that a headless browser can check the page.
constexpr const char* kHeadScript =
    "window.__normlabErrors = [];\n"
    "window.addEventListener('error', function (e) { window.__normlabErrors.push(String(e.message || e)); });\n";
constexpr const char* kBodyScript = R"(
(function () {
  function check() {
    var n = 0, repeats = 0, marks = 0;
    try {
      var charts = document.querySelectorAll('svg.chart');
      for (var i = 0; i < charts.length; i++) {
        var drawn = charts[i].querySelector('g.series circle') !== null;
        var paths = charts[i].querySelectorAll('g.series path:not(.mark)');
        for (var j = 0; j < paths.length && !drawn; j++) drawn = paths[j].getTotalLength() > 0;
        if (drawn) n++;
        var seen = {}, repeated = false, labels = charts[i].querySelectorAll('g.legend title');
        for (var k = 0; k < labels.length; k++) {
          repeated = repeated || seen[labels[k].textContent] === true;
          seen[labels[k].textContent] = true;
        }
        if (repeated) repeats++;
        marks += charts[i].querySelectorAll('path.mark > title').length;
      }
    } catch (e) {
      window.__normlabErrors.push(String(e));
    }
    document.body.dataset.charts = String(n);
    document.body.dataset.legendRepeats = String(repeats);
    document.body.dataset.marks = String(marks);
    document.body.dataset.errors = window.__normlabErrors.join('\n');
  }
  check();
  window.addEventListener('load', check);
})();
)";

}  // namespace

Report build_report(const ReportInputs& in, const std::string& title, const std::string& figures_link,
                    const ReportOptions& opt) {
  const Context cx = make_context(in);
  Figures figs = build_figures(in, cx, opt);
  Report rep;
  rep.title = title;
  rep.figures = std::move(figs.figures);
  rep.not_shown = std::move(figs.not_shown);

  std::string o = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                  "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  o += fmt::format("<title>{}</title>\n<script>\n{}</script>\n<style>{}</style>\n</head>\n<body>\n<main>\n", h(title),
                   kHeadScript, kStyle);
  o += fmt::format("<h1>{}</h1>\n<p class=\"meta\">normlab report of {} run{}, {} sweep{} and {} gradflow stud{}</p>\n",
                   h(title), in.runs.size(), in.runs.size() == 1 ? "" : "s", in.sweeps.size(),
                   in.sweeps.size() == 1 ? "" : "s", in.gradflows.size(), in.gradflows.size() == 1 ? "y" : "ies");
  o += "<nav><strong>Contents</strong><ul>\n<li><a href=\"#inputs\">Inputs</a></li>\n";
  for (const auto& f : rep.figures) o += fmt::format("<li><a href=\"#{}\">{}</a></li>\n", h(f.chart.id), h(f.chart.title));
  if (!rep.not_shown.empty() || !in.notes.empty()) o += "<li><a href=\"#not-shown\">Not shown</a></li>\n";
  if (!in.runs.empty()) o += "<li><a href=\"#runs\">Runs and configurations</a></li>\n";
  o += "</ul></nav>\n";
  o += "<section id=\"inputs\"><h2>Inputs</h2>\n" + inputs_table(in) + "</section>\n";
  o += "<section id=\"figures\"><h2>Figures</h2>\n";
  if (rep.figures.empty()) o += "<p>No input holds data for any figure.</p>\n";
  for (const auto& f : rep.figures) {
    o += "<figure>\n" + svg::render(f.chart, false);
    o += fmt::format("<figcaption>{} <a href=\"{}/{}.svg\">SVG</a></figcaption>\n{}</figure>\n", h(f.caption),
                     h(figures_link), h(f.name), f.table_html);
  }
  o += "</section>\n";
  if (!rep.not_shown.empty() || !in.notes.empty()) {
    o += "<section id=\"not-shown\"><h2>Not shown</h2>\n<ul class=\"notes\">\n";
    for (const auto& s : rep.not_shown) o += "<li>" + h(s) + "</li>\n";
    for (const auto& s : in.notes) o += "<li>" + h(s) + "</li>\n";
    o += "</ul></section>\n";
  }
  if (!in.runs.empty()) {
    o += "<section id=\"runs\"><h2>Runs and configurations</h2>\n";
    if (!cx.differing.empty())
      o += "<p>Highlighted columns differ between runs; each figure labels its series by those that differ "
           "among its own runs.</p>\n";
    o += runs_table(cx) + "</section>\n";
  }
  o += fmt::format("</main>\n<script>{}</script>\n</body>\n</html>\n", kBodyScript);
  rep.html = std::move(o);
  return rep;
}

std::string figures_dir_for(const std::string& out_html) {
  fs::path p(out_html);
  p.replace_extension();
  return p.string() + "_figures";
}

std::vector<std::string> write_report(const Report& report, const std::string& out_html) {
  const auto write = [](const fs::path& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out) throw Error(fmt::format("cannot write {}", path.string()));
  };
  const fs::path html(out_html);
  const fs::path figs(figures_dir_for(out_html));
  std::error_code ec;
  if (html.has_parent_path()) fs::create_directories(html.parent_path(), ec);
  fs::create_directories(figs, ec);
  if (!fs::is_directory(figs)) throw Error(fmt::format("cannot create {}", figs.string()));
  std::vector<std::string> written;
  write(html, report.html);
  written.push_back(html.string());
  for (const auto& f : report.figures) {
    const fs::path p = figs / (f.name + ".svg");
    write(p, svg::render(f.chart, true));
    written.push_back(p.string());
  }
  return written;
}

}  // namespace normlab::report
