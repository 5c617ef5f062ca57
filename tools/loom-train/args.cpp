#include "args.hpp"

#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "tools/cli/cli.hpp"

namespace loom_train {

using namespace loom::ddp;

namespace {

[[noreturn]] void bad(const std::string& why) {
  loom::cli::bad("loom-train", why);
}

double number(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !std::isfinite(x) || x < 0)
    bad(fmt::format("{}: '{}' is not a non-negative number", flag, v));
  return x;
}

std::size_t count(const std::string& flag, const std::string& v) {
  const double x = number(flag, v);
  if (x != std::floor(x) || x > 1e18) bad(fmt::format("{}: '{}' is not a whole number", flag, v));
  return static_cast<std::size_t>(x);
}

std::vector<std::size_t> parse_widths(const std::string& text) {
  std::vector<std::size_t> widths;
  for (std::size_t start = 0; start <= text.size();) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string part = text.substr(start, comma - start);
    char* end = nullptr;
    const unsigned long long v = std::strtoull(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || v == 0)
      bad(fmt::format("--layers: '{}' is not a list of positive widths", text));
    widths.push_back(v);
    start = comma + 1;
  }
  if (widths.size() < 2) bad("--layers needs at least inputs and classes");
  return widths;
}

bool on_failure(const std::string& v, const char* source) {
  if (v == "exit" || v == "restart") return false;
  if (v == "shrink") return true;
  bad(fmt::format("{}: '{}' is not exit or shrink", source, v));
}

CommHook comm_hook(const std::string& h) {
  if (h == "none") return CommHook::none;
  if (h == "fp16") return CommHook::fp16;
  if (h == "bf16") return CommHook::bf16;
  bad(fmt::format("--comm-hook: '{}' is not none, fp16 or bf16", h));
}

std::string data_source(const std::string& v) {
  if (v == "synthetic" || (v.rfind("csv:", 0) == 0 && v.size() > 4)) return v;
  if (v.rfind("mnist:", 0) == 0) {
    const auto comma = v.find(',');
    if (comma == std::string::npos || comma == 6 || comma + 1 == v.size())
      bad("--data mnist:IMAGES,LABELS needs both files");
    return v;
  }
  bad(fmt::format("--data: '{}' is not synthetic, csv:PATH or mnist:IMAGES,LABELS", v));
}

std::string optimizer(const std::string& v) {
  if (v != "sgd" && v != "adamw") bad(fmt::format("--optimizer: '{}' is not sgd or adamw", v));
  return v;
}

// Options of the model and its optimizer.
void model_options(CLI::App& app, Args& a) {
  using loom::cli::option;
  option(app, "--layers", "W0,W1,...,Wn",
         "MLP widths: inputs, hidden layers, classes (default 784,1024,1024,1024,10)",
         [&](const std::string& v) { a.layers = parse_widths(v); });
  option(app, "--batch-size", "N", "samples per rank per step (default 64)",
         [&](const std::string& v) { a.batch_size = count("--batch-size", v); });
  option(app, "--epochs", "N", "passes over the data (default 3)",
         [&](const std::string& v) { a.epochs = count("--epochs", v); });
  option(app, "--steps", "N", "stop after N optimizer steps in all",
         [&](const std::string& v) { a.max_steps = count("--steps", v); });
  option(app, "--lr", "X",
         "learning rate. Default for sgd: 0.01 per 32 samples of the global\n"
         "batch (batch x accumulate x ranks), 0.02 for one rank of 64: the\n"
         "largest rate that stays stable grows with the batch, as the\n"
         "gradient's noise falls (on the synthetic data, 0.05 at a global batch\n"
         "of 32 diverges after ~6 epochs, 0.01 falls to a loss of 0); for\n"
         "adamw: 1e-3, whatever the batch",
         [&](const std::string& v) { a.lr = number("--lr", v); });
  app.add_flag("--lr-scale-on-shrink,!--no-lr-scale-on-shrink", a.lr_scale_on_shrink,
               "when --on-failure shrink loses ranks, scale the learning rate by\n"
               "survivors / ranks before, as the global batch shrinks by as much\n"
               "(default; --no-lr-scale-on-shrink keeps the rate)");
  option(app, "--momentum", "X", "SGD momentum (default 0.9)",
         [&](const std::string& v) { a.momentum = number("--momentum", v); });
  option(app, "--weight-decay", "X", "(default 0)",
         [&](const std::string& v) { a.weight_decay = number("--weight-decay", v); });
  option(app, "--optimizer", "sgd|adamw", "(default sgd)",
         [&](const std::string& v) { a.optimizer = optimizer(v); });
}

// Options of data-parallel training: buckets, hooks, accumulation, failures.
void ddp_options(CLI::App& app, Args& a) {
  using loom::cli::option;
  option(app, "--bucket-cap-mb", "X", "gradient bucket size in MiB (default 25)",
         [&](const std::string& v) { a.bucket_cap_mb = number("--bucket-cap-mb", v); });
  option(app, "--first-bucket-mb", "X", "size of the first bucket (default 1)",
         [&](const std::string& v) { a.first_bucket_mb = number("--first-bucket-mb", v); });
  option(app, "--comm-hook", "none|fp16|bf16", "gradient compression on the wire (default none)",
         [&](const std::string& v) { a.hook = comm_hook(v); });
  app.add_flag_callback(
      "--private-buckets", [&] { a.shared_buckets = false; },
      "buckets in memory of this process, not the communicator's shared\n"
      "windows (Communicator::alloc)");
  option(app, "--accumulate", "K",
         "gradient accumulation: K micro-batches per step, the first K-1\n"
         "under no_sync (default 1)",
         [&](const std::string& v) {
           a.accumulate = std::max<std::size_t>(1, count("--accumulate", v));
         });
  app.add_flag_callback(
      "--no-ddp", [&] { a.ddp = false; }, "one process, no communication");
  option(app, "--on-failure", "exit|shrink",
         "when a rank is lost: exit (default: loomrun restarts the workers\n"
         "from the last snapshot), or shrink: the others go on from the current\n"
         "step without it (the data is shared out again, the effective batch\n"
         "shrinks). Default: $LOOM_ON_FAILURE, which loomrun --on-failure sets,\n"
         "else exit",
         [&](const std::string& v) { a.shrink_on_failure = on_failure(v, "--on-failure"); });
  option(app, "--shrink-timeout", "S",
         "how long survivors wait for each other to shrink (default 30)",
         [&](const std::string& v) { a.shrink_timeout_s = number("--shrink-timeout", v); });
}

// Options of data, snapshots, evaluation and reports.
void run_options(CLI::App& app, Args& a) {
  using loom::cli::option;
  option(app, "--snapshot", "DIR", "resume from the newest valid snapshot in DIR...",
         [&](const std::string& v) { a.snapshot = v; });
  option(app, "--save-every", "N", "...and write one every N steps (rank 0)",
         [&](const std::string& v) { a.save_every = count("--save-every", v); });
  option(app, "--data", "SOURCE", "synthetic (default), csv:PATH, mnist:IMAGES,LABELS",
         [&](const std::string& v) { a.data = data_source(v); });
  option(app, "--samples", "N", "size of the synthetic set (default 16384)",
         [&](const std::string& v) { a.samples = count("--samples", v); });
  option(app, "--seed", "N", "initialisation, data and shuffling (default 1)",
         [&](const std::string& v) { a.seed = count("--seed", v); });
  option(app, "--calibrate-steps", "N",
         "steps rank 0 times alone, without communication, to report scaling\n"
         "efficiency (default 10, 0: skip)",
         [&](const std::string& v) { a.calibrate_steps = count("--calibrate-steps", v); });
  option(app, "--warmup-steps", "N", "steps left out of the timing summary (default 2)",
         [&](const std::string& v) { a.warmup_steps = count("--warmup-steps", v); });
  option(app, "--save-params", "FILE", "write the final parameters (raw float32) to FILE",
         [&](const std::string& v) { a.save_params = v; });
  option(app, "--eval-every", "N",
         "every N steps, loss and accuracy on a held-out split (the last\n"
         "--eval-fraction of the data, never trained on)",
         [&](const std::string& v) { a.eval_every = count("--eval-every", v); });
  option(app, "--eval-fraction", "X", "the share held out with --eval-every (default 0.1)",
         [&](const std::string& v) { a.eval_fraction = number("--eval-fraction", v); });
}

}  // namespace

Args parse(int argc, char** argv) {
  Args a;
  if (const char* v = std::getenv("LOOM_ON_FAILURE"); v && *v)
    a.shrink_on_failure = on_failure(v, "LOOM_ON_FAILURE");
  CLI::App app("", "loom-train");
  loom::cli::set_up(
      app, "usage: loom-train [options]   (under loomrun for data-parallel training)",
      "Loss and accuracy are averaged over every rank's batches. Rank 0 warns when the epoch\n"
      "loss rises 3 epochs in a row (a learning rate too high for the batch, most often).");
  model_options(app, a);
  ddp_options(app, a);
  run_options(app, a);
  loom::cli::parse(app, argc, argv);
  if (a.eval_fraction <= 0 || a.eval_fraction >= 1)
    bad("--eval-fraction must be above 0 and below 1");
  if (a.batch_size == 0) bad("--batch-size must be at least 1");
  return a;
}

}  // namespace loom_train
