// What every tool's command line shares: CLI11 parses it; the help names each option once (its
// short name and first long name, so the underscore spellings loomrun also takes stay out of
// it); a repeated option's last value wins; and bad usage is reported as "<tool>: <why>" with
// exit code 2, --help printing to standard output with exit code 0.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

namespace loom::cli {

class Help : public CLI::Formatter {
 public:
  explicit Help(std::string usage) : usage_(std::move(usage)) { column_width(26); }

  std::string make_usage(const CLI::App*, std::string) const override { return usage_ + "\n"; }

  // A group's heading and its options; the groups are a blank line apart.
  std::string make_group(std::string group, bool positional,
                         std::vector<const CLI::Option*> opts) const override {
    std::string out = group + ":\n";
    for (const CLI::Option* opt : opts) out += make_option(opt, positional);
    return out;
  }

  std::string make_footer(const CLI::App* app) const override {
    return app->get_footer().empty() ? "" : app->get_footer() + "\n";
  }

  std::string make_option_name(const CLI::Option* opt, bool positional) const override {
    if (positional) return CLI::Formatter::make_option_name(opt, positional);
    std::string name;
    for (const std::string& s : opt->get_snames()) name += (name.empty() ? "-" : ", -") + s;
    if (!opt->get_lnames().empty())
      name += (name.empty() ? "--" : ", --") + opt->get_lnames().front();
    return name;
  }

 private:
  std::string usage_;
};

// A tool's command line: `usage` is the help's first line, `footer` its last paragraph.
inline void set_up(CLI::App& app, const std::string& usage, const std::string& footer = "") {
  app.formatter(std::make_shared<Help>(usage));
  app.set_help_flag("-h,--help", "print this help and exit");
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  if (!footer.empty()) app.footer(footer);
}

// An option named `names` ("-b,--minbytes") whose value, shown as `value` in the help, `read`
// takes in (and checks: a tool refuses a bad value itself, naming it).
inline CLI::Option* option(CLI::App& app, const std::string& names, const std::string& value,
                           const std::string& help, std::function<void(const std::string&)> read) {
  return app.add_option_function<std::string>(names, std::move(read), help)
      ->type_name(value)
      ->option_text(value);
}

// "<tool>: <why>" and the help on standard error, exit code 2.
[[noreturn]] inline void refuse(const CLI::App& app, const std::string& why) {
  std::fprintf(stderr, "%s: %s\n%s", app.get_name().c_str(), why.c_str(), app.help().c_str());
  std::exit(2);
}

// "<tool>: <why>" alone, exit code 2: for a value the help would not explain.
[[noreturn]] inline void bad(const std::string& tool, const std::string& why) {
  std::fprintf(stderr, "%s: %s\n", tool.c_str(), why.c_str());
  std::exit(2);
}

// Parses the command line; --help prints the help and exits 0, bad usage refuses.
inline void parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    std::exit(0);
  } catch (const CLI::ParseError& e) {
    refuse(app, e.what());
  }
}

}  // namespace loom::cli
