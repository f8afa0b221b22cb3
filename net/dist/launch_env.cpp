// net/dist/launch_env.cpp — rank, world and master from launcher variables (net/dist/launch_env.h).
#include "net/dist/launch_env.h"

#include <algorithm>
#include <cstdlib>

#include "engine/error.h"

namespace ember::net::dist {
namespace {

// A non-negative integer variable; errors name it.
int int_var(const char* name, const char* text) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  EMBER_CHECK(*text && *end == '\0' && v >= 0 && v < (1L << 30), "environment variable ", name, "='", text,
              "' is not a non-negative integer");
  return int(v);
}

// Splits at commas outside brackets.
std::vector<std::string> split_top(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  for (char ch : s) {
    if (ch == '[') ++depth;
    if (ch == ']') --depth;
    if (ch == ',' && depth == 0) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  out.push_back(cur);
  return out;
}

void expand_item(const std::string& item, const std::string& whole, std::vector<std::string>& out) {
  const size_t open = item.find('[');
  if (open == std::string::npos) {
    EMBER_CHECK(item.find(']') == std::string::npos, "SLURM host list '", whole, "': unbalanced ']'");
    out.push_back(item);
    return;
  }
  const size_t close = item.find(']', open);
  EMBER_CHECK(close != std::string::npos, "SLURM host list '", whole, "': unbalanced '['");
  const std::string prefix = item.substr(0, open), rest = item.substr(close + 1);
  const std::string inside = item.substr(open + 1, close - open - 1);
  EMBER_CHECK(!inside.empty() && inside.find('[') == std::string::npos, "SLURM host list '", whole,
              "': bad bracket group '[", inside, "]'");
  for (const std::string& part : split_top(inside)) {
    const size_t dash = part.find('-');
    const std::string a = part.substr(0, dash), b = dash == std::string::npos ? a : part.substr(dash + 1);
    auto digits = [&](const std::string& t) {
      EMBER_CHECK(!t.empty() && t.size() < 10 && t.find_first_not_of("0123456789") == std::string::npos,
                  "SLURM host list '", whole, "': '", part, "' is not a number or a range");
      return std::stol(t);
    };
    const long lo = digits(a), hi = digits(b);
    EMBER_CHECK(lo <= hi && hi - lo < 100000, "SLURM host list '", whole, "': bad range '", part, "'");
    const size_t width = a.size();  // "01-03" keeps two digits
    for (long v = lo; v <= hi; ++v) {
      std::string num = std::to_string(v);
      if (num.size() < width) num.insert(0, width - num.size(), '0');
      expand_item(prefix + num + rest, whole, out);  // later groups of the same name
    }
  }
}

// A rendezvous address that only this host can reach.
bool is_loopback(const std::string& addr) {
  return addr.rfind("127.", 0) == 0 || addr == "localhost" || addr == "::1" || addr == "ip6-localhost";
}

}  // namespace

std::vector<std::string> expand_slurm_hostlist(const std::string& list) {
  std::vector<std::string> out;
  for (const std::string& item : split_top(list)) {
    if (item.empty()) continue;
    expand_item(item, list, out);
  }
  return out;
}

LaunchEnv detect_launch_env(const LaunchFlags& flags, const GetEnv& getenv_fn) {
  const GetEnv get = getenv_fn ? getenv_fn : [](const char* n) -> const char* { return std::getenv(n); };
  auto has = [&](const char* n) { return get(n) != nullptr && *get(n) != '\0'; };
  LaunchEnv e;
  std::string rank_var, world_var;
  if (has("RANK") || has("WORLD_SIZE")) {
    EMBER_CHECK(has("RANK") && has("WORLD_SIZE"), "torchrun-style launch: RANK and WORLD_SIZE must both be set (",
                has("RANK") ? "WORLD_SIZE" : "RANK", " is missing)");
    e.source = "torchrun-style RANK/WORLD_SIZE";
    rank_var = "RANK", world_var = "WORLD_SIZE";
    e.local_rank = has("LOCAL_RANK") ? int_var("LOCAL_RANK", get("LOCAL_RANK")) : -1;
    if (has("LOCAL_WORLD_SIZE")) {
      e.local_world = int_var("LOCAL_WORLD_SIZE", get("LOCAL_WORLD_SIZE"));
      e.local_world_from = "LOCAL_WORLD_SIZE";
    }
    if (has("TORCHELASTIC_RUN_ID")) e.run_id = get("TORCHELASTIC_RUN_ID");
  } else if (has("OMPI_COMM_WORLD_RANK") && has("OMPI_COMM_WORLD_SIZE")) {
    e.source = "Open MPI";
    rank_var = "OMPI_COMM_WORLD_RANK", world_var = "OMPI_COMM_WORLD_SIZE";
    e.local_rank = has("OMPI_COMM_WORLD_LOCAL_RANK") ? int_var("OMPI_COMM_WORLD_LOCAL_RANK", get("OMPI_COMM_WORLD_LOCAL_RANK")) : -1;
    if (has("OMPI_COMM_WORLD_LOCAL_SIZE")) {
      e.local_world = int_var("OMPI_COMM_WORLD_LOCAL_SIZE", get("OMPI_COMM_WORLD_LOCAL_SIZE"));
      e.local_world_from = "OMPI_COMM_WORLD_LOCAL_SIZE";
    }
    if (has("OMPI_MCA_ess_base_jobid")) e.run_id = cat("ompi-", get("OMPI_MCA_ess_base_jobid"));
    else if (has("PMIX_NAMESPACE")) e.run_id = get("PMIX_NAMESPACE");
  } else if (has("SLURM_PROCID") && has("SLURM_NTASKS")) {
    e.source = "SLURM";
    rank_var = "SLURM_PROCID", world_var = has("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
    e.local_rank = has("SLURM_LOCALID") ? int_var("SLURM_LOCALID", get("SLURM_LOCALID")) : -1;
    if (has("SLURM_NTASKS_PER_NODE")) {  // "4" or "4(x2)": the leading count
      const std::string v = get("SLURM_NTASKS_PER_NODE");
      e.local_world = int_var("SLURM_NTASKS_PER_NODE", v.substr(0, v.find('(')).c_str());
      e.local_world_from = "SLURM_NTASKS_PER_NODE";
    }
    if (has("SLURM_JOB_ID")) e.run_id = cat("slurm-", get("SLURM_JOB_ID"), has("SLURM_STEP_ID") ? "." : "",
                                            has("SLURM_STEP_ID") ? get("SLURM_STEP_ID") : "");
    const char* list = has("SLURM_JOB_NODELIST") ? get("SLURM_JOB_NODELIST") : (has("SLURM_NODELIST") ? get("SLURM_NODELIST") : nullptr);
    if (list) {
      const auto hosts = expand_slurm_hostlist(list);
      EMBER_CHECK(!hosts.empty(), "SLURM_JOB_NODELIST='", list, "' names no host");
      e.master_addr = hosts[0];
    }
  }
  if (!rank_var.empty()) {
    e.rank = int_var(rank_var.c_str(), get(rank_var.c_str()));
    e.world = int_var(world_var.c_str(), get(world_var.c_str()));
    EMBER_CHECK(e.world >= 1, world_var, " must be at least 1, got ", e.world);
    EMBER_CHECK(e.rank < e.world, rank_var, "=", e.rank, " is not a rank of ", world_var, "=", e.world);
    if (e.local_rank < 0) e.local_rank = e.rank;
    e.local_world = std::max(1, std::min(e.local_world, e.world));
  }
  // The master: flag > MASTER_ADDR > the launcher's (SLURM's first host).
  bool master_known = e.source == "SLURM" && e.master_addr != "127.0.0.1";
  if (has("MASTER_ADDR")) e.master_addr = get("MASTER_ADDR"), master_known = true;
  if (!flags.master_addr.empty()) e.master_addr = flags.master_addr, master_known = true;
  if (e.world > 1 && !master_known) {
    EMBER_CHECK(e.source != "Open MPI", "under Open MPI, give the host of rank 0 with --master-addr (or mpirun -x MASTER_ADDR)");
    fail(cat(e.source, " gives ", e.world, " ranks but no MASTER_ADDR: set it to the host of rank 0 (or --master-addr)"));
  }
  // Ranks started by hand on one host: their rendezvous is this host's loopback address.
  if (e.world > 1 && e.local_world_from.empty() && is_loopback(e.master_addr)) {
    e.local_world = e.world;
    e.local_world_from = cat("MASTER_ADDR ", e.master_addr);
  }
  if (has("MASTER_PORT")) {
    e.master_port = int_var("MASTER_PORT", get("MASTER_PORT"));
    EMBER_CHECK(e.master_port > 0 && e.master_port < 65536, "MASTER_PORT=", e.master_port, " is not a port (1-65535)");
  }
  if (flags.master_port != 0) {
    EMBER_CHECK(flags.master_port > 0 && flags.master_port < 65536, "--master-port ", flags.master_port,
                " is not a port (1-65535)");
    e.master_port = flags.master_port;
  }
  if (has("EMBER_RUN_ID")) e.run_id = get("EMBER_RUN_ID");
  if (!flags.run_id.empty()) e.run_id = flags.run_id;
  EMBER_CHECK(e.run_id.size() < 64, "run id '", e.run_id, "' is longer than 63 characters");
  return e;
}

}  // namespace ember::net::dist
