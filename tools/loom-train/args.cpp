#include "args.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace loom_train {

using namespace loom::ddp;

[[noreturn]] void usage(int code) {
  std::fprintf(
      code ? stderr : stdout, "%s",
      "usage: loom-train [options]   (under loomrun for data-parallel training)\n"
      "  --layers W0,W1,...,Wn   MLP widths: inputs, hidden layers, classes\n"
      "                          (default 784,1024,1024,1024,10)\n"
      "  --batch-size N          samples per rank per step (default 64)\n"
      "  --epochs N              passes over the data (default 3)\n"
      "  --steps N               stop after N optimizer steps in all\n"
      "  --lr X                  learning rate. Default for sgd: 0.01 per 32 samples of the\n"
      "                          global batch (batch x accumulate x ranks), 0.02 for one rank of\n"
      "                          64: the largest rate that stays stable grows with the batch, as\n"
      "                          the gradient's noise falls (on the synthetic data, 0.05 at a\n"
      "                          global batch of 32 diverges after ~6 epochs, 0.01 falls to a\n"
      "                          loss of 0); for adamw: 1e-3, whatever the batch\n"
      "  --no-lr-scale-on-shrink keep the learning rate when --on-failure shrink loses ranks\n"
      "                          (default --lr-scale-on-shrink: scale it by survivors / ranks\n"
      "                          before, as the global batch shrinks by as much)\n"
      "  --momentum X            SGD momentum (default 0.9)\n"
      "  --weight-decay X        (default 0)\n"
      "  --optimizer sgd|adamw   (default sgd)\n"
      "  --bucket-cap-mb X       gradient bucket size in MiB (default 25)\n"
      "  --first-bucket-mb X     size of the first bucket (default 1)\n"
      "  --comm-hook none|fp16|bf16  gradient compression on the wire (default none)\n"
      "  --private-buckets       buckets in memory of this process, not the communicator's\n"
      "                          shared windows (Communicator::alloc)\n"
      "  --accumulate K          gradient accumulation: K micro-batches per step, the\n"
      "                          first K-1 under no_sync (default 1)\n"
      "  --no-ddp                one process, no communication\n"
      "  --snapshot DIR          resume from the newest valid snapshot in DIR...\n"
      "  --save-every N          ...and write one every N steps (rank 0)\n"
      "  --data SOURCE           synthetic (default), csv:PATH, mnist:IMAGES,LABELS\n"
      "  --samples N             size of the synthetic set (default 16384)\n"
      "  --seed N                initialisation, data and shuffling (default 1)\n"
      "  --calibrate-steps N     steps rank 0 times alone, without communication, to\n"
      "                          report scaling efficiency (default 10, 0: skip)\n"
      "  --warmup-steps N        steps left out of the timing summary (default 2)\n"
      "  --save-params FILE      write the final parameters (raw float32) to FILE\n"
      "  --eval-every N          every N steps, loss and accuracy on a held-out split (the\n"
      "                          last --eval-fraction of the data, never trained on)\n"
      "  --eval-fraction X       the share held out with --eval-every (default 0.1)\n"
      "  --on-failure exit|shrink  when a rank is lost: exit (default: loomrun restarts the\n"
      "                          workers from the last snapshot), or shrink: the others go on\n"
      "                          from the current step without it (the data is shared out again,\n"
      "                          the effective batch shrinks). Default: $LOOM_ON_FAILURE, which\n"
      "                          loomrun --on-failure sets, else exit\n"
      "  --shrink-timeout S      how long survivors wait for each other to shrink (default 30)\n"
      "Loss and accuracy are averaged over every rank's batches. Rank 0 warns when the epoch\n"
      "loss rises 3 epochs in a row (a learning rate too high for the batch, most often).\n");
  std::exit(code);
}

namespace {

std::vector<std::size_t> parse_widths(const std::string& text) {
  std::vector<std::size_t> widths;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    const std::string part =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    char* end = nullptr;
    const unsigned long long v = std::strtoull(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || v == 0) {
      std::fprintf(stderr, "loom-train: --layers: '%s' is not a list of positive widths\n",
                   text.c_str());
      usage(2);
    }
    widths.push_back(v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (widths.size() < 2) {
    std::fprintf(stderr, "loom-train: --layers needs at least inputs and classes\n");
    usage(2);
  }
  return widths;
}

bool on_failure(const std::string& v, const char* source) {
  if (v == "exit" || v == "restart") return false;
  if (v == "shrink") return true;
  std::fprintf(stderr, "loom-train: %s: '%s' is not exit or shrink\n", source, v.c_str());
  usage(2);
}

CommHook comm_hook(const std::string& h) {
  if (h == "none") return CommHook::none;
  if (h == "fp16") return CommHook::fp16;
  if (h == "bf16") return CommHook::bf16;
  std::fprintf(stderr, "loom-train: --comm-hook: '%s' is not none, fp16 or bf16\n", h.c_str());
  usage(2);
}

// The checks of values that each option's parse alone cannot make.
void check(const Args& a) {
  if (a.optimizer != "sgd" && a.optimizer != "adamw") {
    std::fprintf(stderr, "loom-train: --optimizer: '%s' is not sgd or adamw\n",
                 a.optimizer.c_str());
    usage(2);
  }
  if (a.eval_fraction <= 0 || a.eval_fraction >= 1) {
    std::fprintf(stderr, "loom-train: --eval-fraction must be above 0 and below 1\n");
    usage(2);
  }
  if (a.batch_size == 0) {
    std::fprintf(stderr, "loom-train: --batch-size must be at least 1\n");
    usage(2);
  }
}

}  // namespace

Args parse(int argc, char** argv) {
  Args a;
  if (const char* v = std::getenv("LOOM_ON_FAILURE"); v && *v)
    a.shrink_on_failure = on_failure(v, "LOOM_ON_FAILURE");
  auto value = [&](int& i) -> std::string {
    if (i + 1 >= argc) {
      std::fprintf(stderr, "loom-train: %s needs a value\n", argv[i]);
      usage(2);
    }
    return argv[++i];
  };
  auto number = [&](int& i) {
    const std::string flag = argv[i], v = value(i);
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !std::isfinite(x) || x < 0) {
      std::fprintf(stderr, "loom-train: %s: '%s' is not a non-negative number\n", flag.c_str(),
                   v.c_str());
      usage(2);
    }
    return x;
  };
  auto count = [&](int& i) {
    const double x = number(i);
    if (x != std::floor(x)) {
      std::fprintf(stderr, "loom-train: %s needs a whole number\n", argv[i - 1]);
      usage(2);
    }
    return static_cast<std::size_t>(x);
  };
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "-h" || f == "--help")
      usage(0);
    else if (f == "--layers")
      a.layers = parse_widths(value(i));
    else if (f == "--batch-size")
      a.batch_size = count(i);
    else if (f == "--epochs")
      a.epochs = count(i);
    else if (f == "--steps")
      a.max_steps = count(i);
    else if (f == "--lr")
      a.lr = number(i);
    else if (f == "--lr-scale-on-shrink")
      a.lr_scale_on_shrink = true;
    else if (f == "--no-lr-scale-on-shrink")
      a.lr_scale_on_shrink = false;
    else if (f == "--momentum")
      a.momentum = number(i);
    else if (f == "--weight-decay")
      a.weight_decay = number(i);
    else if (f == "--optimizer")
      a.optimizer = value(i);
    else if (f == "--bucket-cap-mb")
      a.bucket_cap_mb = number(i);
    else if (f == "--first-bucket-mb")
      a.first_bucket_mb = number(i);
    else if (f == "--comm-hook")
      a.hook = comm_hook(value(i));
    else if (f == "--private-buckets")
      a.shared_buckets = false;
    else if (f == "--accumulate")
      a.accumulate = std::max<std::size_t>(1, count(i));
    else if (f == "--no-ddp")
      a.ddp = false;
    else if (f == "--snapshot")
      a.snapshot = value(i);
    else if (f == "--save-every")
      a.save_every = count(i);
    else if (f == "--data")
      a.data = value(i);
    else if (f == "--samples")
      a.samples = count(i);
    else if (f == "--seed")
      a.seed = count(i);
    else if (f == "--calibrate-steps")
      a.calibrate_steps = count(i);
    else if (f == "--warmup-steps")
      a.warmup_steps = count(i);
    else if (f == "--save-params")
      a.save_params = value(i);
    else if (f == "--eval-every")
      a.eval_every = count(i);
    else if (f == "--eval-fraction")
      a.eval_fraction = number(i);
    else if (f == "--on-failure")
      a.shrink_on_failure = on_failure(value(i), "--on-failure");
    else if (f == "--shrink-timeout")
      a.shrink_timeout_s = number(i);
    else {
      std::fprintf(stderr, "loom-train: unknown option %s\n", f.c_str());
      usage(2);
    }
  }
  check(a);
  return a;
}

}  // namespace loom_train
