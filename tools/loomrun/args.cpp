#include "args.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "tools/cli/cli.hpp"

namespace loomrun {
namespace {

[[noreturn]] void bad(const std::string& message) {
  loom::cli::bad("loomrun", message);
}

int parse_int(const std::string& flag, const std::string& v, int lo, int hi) {
  try {
    std::size_t pos = 0;
    long long x = std::stoll(v, &pos);
    if (pos == v.size() && x >= lo && x <= hi) return static_cast<int>(x);
  } catch (const std::exception&) {
  }
  bad(flag + " expects an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
      "], got '" + v + "'");
}

double parse_seconds(const std::string& flag, const std::string& v, double lo, double hi) {
  try {
    std::size_t pos = 0;
    double x = std::stod(v, &pos);
    if (pos == v.size() && std::isfinite(x) && x >= lo && x <= hi) return x;
  } catch (const std::exception&) {
  }
  bad(flag + " expects seconds in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" +
      v + "'");
}

std::chrono::milliseconds millis(double seconds) {
  return std::chrono::milliseconds(static_cast<long long>(std::llround(seconds * 1000)));
}

void parse_nnodes(Args& a, const std::string& v) {
  const auto colon = v.find(':');
  if (colon == std::string::npos) {
    a.min_nodes = a.max_nodes = parse_int("--nnodes", v, 1, 1 << 20);
    return;
  }
  a.min_nodes = parse_int("--nnodes (MIN)", v.substr(0, colon), 1, 1 << 20);
  a.max_nodes = parse_int("--nnodes (MAX)", v.substr(colon + 1), 1, 1 << 20);
  if (a.min_nodes > a.max_nodes) bad("--nnodes " + v + ": MIN must not be above MAX");
}

void parse_endpoint(Args& a, const std::string& v) {
  std::string host = v;
  if (!v.empty() && v.front() == '[') {  // [IPv6]:port
    const auto close = v.find(']');
    if (close == std::string::npos) bad("--rdzv-endpoint " + v + ": no ']'");
    host = v.substr(1, close - 1);
    if (close + 1 < v.size()) {
      if (v[close + 1] != ':') bad("--rdzv-endpoint " + v + ": expected ':' after ']'");
      a.rdzv_port = parse_int("--rdzv-endpoint (port)", v.substr(close + 2), 0, 65535);
    }
  } else if (const auto colon = v.rfind(':'); colon != std::string::npos && v.find(':') == colon) {
    host = v.substr(0, colon);
    a.rdzv_port = parse_int("--rdzv-endpoint (port)", v.substr(colon + 1), 0, 65535);
  }
  if (host.empty()) bad("--rdzv-endpoint '" + v + "' names no host");
  a.rdzv_host = host;
}

void parse_conf(Args& a, const std::string& v) {
  std::size_t from = 0;
  while (from < v.size()) {
    auto comma = v.find(',', from);
    const std::string item = v.substr(from, comma == std::string::npos ? comma : comma - from);
    from = comma == std::string::npos ? v.size() : comma + 1;
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string::npos) bad("--rdzv-conf: '" + item + "' is not KEY=VALUE");
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    const std::string flag = "--rdzv-conf " + key;
    if (key == "join_timeout")
      a.join_timeout = millis(parse_seconds(flag, value, 1, 86400));
    else if (key == "last_call_timeout")
      a.last_call_timeout = millis(parse_seconds(flag, value, 0, 86400));
    else if (key == "keep_alive_timeout")
      a.keep_alive_timeout = millis(parse_seconds(flag, value, 1, 86400));
    else if (key == "read_timeout")
      a.read_timeout = millis(parse_seconds(flag, value, 1, 86400));
    else if (key == "exit_barrier_timeout")
      a.exit_barrier_timeout = millis(parse_seconds(flag, value, 0, 86400));
    else
      bad("--rdzv-conf: unknown key '" + key +
          "' (join_timeout, last_call_timeout, keep_alive_timeout, read_timeout, "
          "exit_barrier_timeout)");
  }
}

constexpr std::string_view kWorkers = "Workers and nodes";
constexpr std::string_view kRendezvous =
    "Rendezvous (nodes find each other; their ranks are assigned there)";
constexpr std::string_view kStatic = "Static rendezvous (every node is given its rank)";
constexpr std::string_view kFailures = "Failures";
constexpr std::string_view kPlacement = "Placement";
constexpr std::string_view kOutput = "Output and security";

// Every option: its name (torchrun's underscore spelling is taken too), the variable that gives
// its default, what its value looks like (none: a flag), its part of the help, and its help.
struct Option {
  std::string_view flag, env, value, group, help;
};
constexpr Option kOptions[] = {
    {"--nproc-per-node", "PET_NPROC_PER_NODE", "N", kWorkers, "workers on this node (default 1)"},
    {"--nnodes", "PET_NNODES", "N|MIN:MAX", kWorkers,
     "nodes in the job; MIN:MAX starts once MIN nodes have joined and\n"
     "keeps going while at least MIN remain (default 1)"},
    {"--rdzv-endpoint", "PET_RDZV_ENDPOINT", "HOST[:PORT]", kRendezvous,
     "where the rendezvous store is (port default 29400); the node\n"
     "whose address HOST is hosts it, and if that node is lost a\n"
     "surviving node takes it over"},
    {"--rdzv-id", "PET_RDZV_ID", "ID", kRendezvous,
     "the job's name, the same on every node (default none)"},
    {"--rdzv-backend", "PET_RDZV_BACKEND", "NAME", kRendezvous,
     "loom (c10d is a synonym) for the rendezvous above, or static\n"
     "(default: loom with --rdzv-endpoint or MIN:MAX, else static)"},
    {"--rdzv-conf", "PET_RDZV_CONF", "K=V,...", kRendezvous,
     "join_timeout (s, default 600), last_call_timeout (s, after MIN\n"
     "nodes joined, default 30), keep_alive_timeout (s, a node silent\n"
     "that long is lost, default 30), read_timeout (s, default 30),\n"
     "exit_barrier_timeout (s, waiting for the others to finish, 300)"},
    {"--standalone", "", "", kRendezvous,
     "one node, a rendezvous on a free local port and a fresh run id"},
    {"--local-addr", "PET_LOCAL_ADDR", "ADDR", kRendezvous,
     "the address other nodes reach this one at (default: the one\n"
     "facing the rendezvous endpoint)"},
    {"--node-rank", "PET_NODE_RANK", "R", kStatic, "this node's index, 0..nnodes-1 (default 0)"},
    {"--master-addr", "PET_MASTER_ADDR", "HOST", kStatic, "node 0's address (default 127.0.0.1)"},
    {"--master-port", "PET_MASTER_PORT", "PORT", kStatic,
     "store port on node 0 (default: free port on one node, 29500\n"
     "otherwise)"},
    {"--max-restarts", "PET_MAX_RESTARTS", "N", kFailures,
     "when a worker fails or a node is lost, stop the workers and start\n"
     "them all again (at the new node count), up to N times (default 0)"},
    {"--on-failure", "LOOM_ON_FAILURE", "restart|shrink", kFailures,
     "restart (default): as above. shrink: a worker's failure or a\n"
     "lost node stops nothing; the others go on without it (loom-train\n"
     "--on-failure shrink, Communicator::shrink; workers get\n"
     "LOOM_ON_FAILURE=shrink). A worker the others leave out that\n"
     "still runs (frozen) is stopped by its node's loomrun,\n"
     "--grace seconds after the others named it. The survivors do\n"
     "not go on below --nnodes MIN nodes (LOOM_MIN_NODES).\n"
     "The job succeeds if the last workers to end succeed; if they\n"
     "fail too, the restarts above apply\n"
     "(default: $LOOM_ON_FAILURE, else restart)"},
    {"--monitor-interval", "PET_MONITOR_INTERVAL", "S", kFailures,
     "seconds between looks at the rendezvous (default 0.1)"},
    {"--grace", "", "SECONDS", kFailures,
     "wait after SIGTERM before SIGKILL when stopping workers (default 5)"},
    {"--cpu-bind", "LOOM_CPU_BIND", "none|cores", kPlacement,
     "cores: bind each worker to its share of loomrun's CPUs,\n"
     "local ranks in order, in blocks: with more workers than\n"
     "CPUs, consecutive local ranks share one (4 workers on 2\n"
     "CPUs: 0 and 1 on the first, 2 and 3 on the second), so\n"
     "neighbours in the ring wait on each other on one core\n"
     "(default: $LOOM_CPU_BIND, else none)"},
    {"--no-prefix", "", "", kOutput, "do not prefix output lines with the rank"},
    {"--role", "PET_ROLE", "NAME", kOutput, "the workers' role (ROLE_NAME; default 'default')"},
    {"--secret-file", "", "PATH", kOutput,
     "file holding the job secret (else LOOM_SECRET_FILE or LOOM_SECRET);\n"
     "required across nodes, made up on one node"},
    {"--insecure", "", "", kOutput,
     "across nodes, run without a secret: anyone who can reach the store\n"
     "can read and write it"},
    // loomrun always runs the program as given.
    {"--no-python", "", "", "", ""},
};

constexpr std::string_view kFooter =
    "Dashes and underscores are alike in option names (--nproc_per_node), and torchrun's PET_*\n"
    "variables (PET_NNODES, PET_RDZV_ENDPOINT, ...) give defaults. Each worker gets torchrun's\n"
    "variables (RANK, LOCAL_RANK, GROUP_RANK, ROLE_RANK, LOCAL_WORLD_SIZE, WORLD_SIZE,\n"
    "GROUP_WORLD_SIZE, ROLE_WORLD_SIZE, ROLE_NAME, MASTER_ADDR, MASTER_PORT,\n"
    "TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_RUN_ID, ...) and\n"
    "Loom's (NODE_RANK, LOOM_RESTART_COUNT). When a worker fails the others are stopped; once\n"
    "restarts are spent loomrun exits with the failing worker's code. SIGINT, SIGTERM and\n"
    "SIGHUP stop the workers (and end a wait at the rendezvous); if loomrun itself is killed,\n"
    "its workers are killed too.\n"
    "torchrun's -m, --run-path, --start-method, --log-dir, --redirects, --tee,\n"
    "--local-ranks-filter and the like are refused, each with its reason.";

struct Seen {
  bool backend = false, endpoint = false, node_rank = false, master_port = false;
};

void apply(Args& a, Seen& seen, const std::string& flag, const std::string& v) {
  if (flag == "--nproc-per-node") {
    a.nproc_per_node = parse_int(flag, v, 1, 4096);
  } else if (flag == "--nnodes") {
    parse_nnodes(a, v);
  } else if (flag == "--node-rank") {
    a.node_rank = parse_int(flag, v, 0, 1 << 20);
    seen.node_rank = true;
  } else if (flag == "--master-addr") {
    a.master_addr = v;
  } else if (flag == "--master-port") {
    a.master_port = parse_int(flag, v, 0, 65535);
    seen.master_port = true;
  } else if (flag == "--rdzv-backend") {
    if (v != "static" && v != "c10d" && v != "loom")
      bad("--rdzv-backend " + v + ": loomrun knows static, and loom (or its synonym c10d)");
    a.rdzv_backend = v;
    seen.backend = true;
  } else if (flag == "--rdzv-endpoint") {
    if (!v.empty()) {
      parse_endpoint(a, v);
      seen.endpoint = true;
    }
  } else if (flag == "--rdzv-id") {
    a.rdzv_id = v;
  } else if (flag == "--rdzv-conf") {
    parse_conf(a, v);
  } else if (flag == "--max-restarts") {
    a.max_restarts = parse_int(flag, v, 0, 1 << 20);
  } else if (flag == "--on-failure") {
    if (v != "restart" && v != "exit" && v != "shrink")
      bad("--on-failure " + v + ": restart or shrink");
    a.shrink_on_failure = v == "shrink";
  } else if (flag == "--monitor-interval") {
    a.monitor_interval = millis(parse_seconds(flag, v, 0.01, 3600));
  } else if (flag == "--role") {
    a.role = v;
  } else if (flag == "--local-addr") {
    a.local_addr = v;
  } else if (flag == "--cpu-bind") {
    if (v != "none" && v != "cores") bad("--cpu-bind " + v + ": none or cores");
    a.bind_cores = v == "cores";
  } else if (flag == "--grace") {
    a.grace_s = parse_seconds(flag, v, 0, 3600);
  } else if (flag == "--secret-file") {
    a.secret_file = v;
  } else if (flag == "--standalone") {
    a.standalone = true;
  } else if (flag == "--no-prefix") {
    a.prefix = false;
  } else if (flag == "--insecure") {
    a.insecure = true;
  }
}

// torchrun's options loomrun does not take, each with the reason it is refused.
struct Refused {
  std::string_view flag, why;
};
constexpr Refused kRefused[] = {
    {"-m", "loomrun runs programs; run the module with: loomrun ... python -m MODULE"},
    {"--module", "loomrun runs programs; run the module with: loomrun ... python -m MODULE"},
    {"--run-path", "loomrun runs programs; run the script with: loomrun ... python SCRIPT"},
    {"--start-method", "workers are always separate processes started with fork and exec"},
    {"--log-dir", "worker output goes to loomrun's, each line prefixed with its rank"},
    {"--logs-specs", "worker output goes to loomrun's, each line prefixed with its rank"},
    {"-r", "worker output goes to loomrun's, each line prefixed with its rank"},
    {"--redirects", "worker output goes to loomrun's, each line prefixed with its rank"},
    {"-t", "worker output goes to loomrun's, each line prefixed with its rank"},
    {"--tee", "worker output goes to loomrun's, each line prefixed with its rank"},
    {"--local-ranks-filter", "worker output goes to loomrun's, each line prefixed with its rank"},
    {"--event-log-handler", "loomrun records no torchelastic events"},
    {"--numa-binding", "loomrun binds workers to CPUs, not NUMA nodes: --cpu-bind cores"},
    {"--signals-to-handle", "loomrun always handles SIGINT, SIGTERM and SIGHUP"},
    {"--virtual-local-rank", "each worker's LOCAL_RANK is its own"},
};

bool valid_run_id(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) return false;
  return true;
}

// The option's names: "--nproc-per-node" and, where it differs, "--nproc_per_node".
std::string with_underscores(std::string_view flag) {
  std::string under(flag);
  for (std::size_t i = 2; i < under.size(); ++i)
    if (under[i] == '-') under[i] = '_';
  return under == flag ? under : std::string(flag) + "," + under;
}

// Declares every option on `app`, each applied to `a` as it is read.
void declare(CLI::App& app, Args& a, Seen& seen) {
  for (const Option& o : kOptions) {
    const std::string flag(o.flag);
    CLI::Option* option =
        o.value.empty()
            ? app.add_flag_callback(
                  with_underscores(o.flag), [&a, &seen, flag] { apply(a, seen, flag, ""); },
                  std::string(o.help))
            : loom::cli::option(
                  app, with_underscores(o.flag), std::string(o.value), std::string(o.help),
                  [&a, &seen, flag](const std::string& v) { apply(a, seen, flag, v); });
    if (!o.env.empty()) option->envname(std::string(o.env));
    option->group(std::string(o.group));
  }
  // Refused at sight, with or without the value torchrun would take.
  for (const Refused& r : kRefused)
    app.add_option(with_underscores(r.flag))
        ->expected(0, 1)
        ->trigger_on_parse()
        ->group("")
        ->each([flag = std::string(r.flag), why = std::string(r.why)](const std::string&) {
          bad("torchrun's " + flag + " is not supported: " + why);
        });
}

}  // namespace

Args parse(int argc, char** argv) {
  Args a;
  Seen seen;
  CLI::App app("", "loomrun");
  loom::cli::set_up(app, "usage: loomrun [options] [--] program [args...]", std::string(kFooter));
  app.prefix_command();  // the program and its arguments are the rest
  declare(app, a, seen);
  if (const char* v = std::getenv("PET_STANDALONE");
      v != nullptr && *v != '\0' && std::string_view(v) != "0")
    a.standalone = true;
  loom::cli::parse(app, argc, argv);
  const std::vector<std::string> rest = app.remaining();
  auto program = rest.begin();
  if (program != rest.end() && *program == "--")
    ++program;
  else if (program != rest.end() && program->rfind("-", 0) == 0)
    loom::cli::refuse(app, "unknown option " + *program);
  a.command.assign(program, rest.end());
  if (a.command.empty()) loom::cli::refuse(app, "no program to run");

  if (a.standalone) {
    // torchrun: a local rendezvous on a free port under a fresh id; given values are ignored.
    if (a.max_nodes != 1)
      bad("--standalone runs one node, not --nnodes " + std::to_string(a.min_nodes) + ":" +
          std::to_string(a.max_nodes));
    a.dynamic = true;
    a.rdzv_backend = "loom";
    a.rdzv_host = "127.0.0.1";
    a.rdzv_port = 0;
    a.rdzv_id.clear();  // made up at start
    return a;
  }
  if (seen.backend)
    a.dynamic = a.rdzv_backend != "static";
  else
    a.dynamic = seen.endpoint || a.min_nodes != a.max_nodes;
  if (!a.dynamic) {
    if (a.min_nodes != a.max_nodes)
      bad("--nnodes " + std::to_string(a.min_nodes) + ":" + std::to_string(a.max_nodes) +
          " needs a dynamic rendezvous (--rdzv-endpoint HOST[:PORT])");
    if (seen.endpoint) {  // torchrun's static rendezvous reads its master from the endpoint
      a.master_addr = a.rdzv_host;
      if (!seen.master_port) a.master_port = a.rdzv_port;
    }
    if (a.node_rank.value_or(0) >= a.nnodes())
      bad("--node-rank " + std::to_string(*a.node_rank) + " must be below --nnodes " +
          std::to_string(a.nnodes()));
    return a;
  }
  if (!seen.endpoint) bad("a dynamic rendezvous needs --rdzv-endpoint HOST[:PORT]");
  if (seen.node_rank)
    std::fprintf(stderr,
                 "loomrun: warning: --node-rank is ignored: the rendezvous at %s assigns "
                 "node ranks\n",
                 a.rdzv_host.c_str());
  if (!valid_run_id(a.rdzv_id))
    bad("--rdzv-id '" + a.rdzv_id + "': 1-64 letters, digits, '-' or '_' (it names snapshots)");
  return a;
}

}  // namespace loomrun
