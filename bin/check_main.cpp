// astraeus-check: the checks a validation runs on a machine (issue 21;
// shared/DESIGN.md, "Validation"), one subcommand per check. Human progress
// goes to stderr; the last line on stdout is the check's JSON result
// (runtime/validation/check_result.hpp). Exit status: 0 for pass, warn and
// skipped, 1 for fail, 2 for bad usage.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "messages/error.hpp"
#include "runtime/host/sysfs_text.hpp"
#include "runtime/process/config.hpp"
#include "runtime/validation/all_reduce_check.hpp"
#include "runtime/validation/burn_check.hpp"
#include "runtime/validation/check_options.hpp"
#include "runtime/validation/check_result.hpp"
#include "runtime/validation/copies_check.hpp"
#include "runtime/validation/dcgm_check.hpp"
#include "runtime/validation/disk_check.hpp"
#include "runtime/validation/pair_check.hpp"
#include "runtime/validation/quick_check.hpp"

namespace {

using namespace astraeus::validation;

constexpr const char* usage_text =
  "usage: astraeus-check CHECK [OPTIONS]\n"
  "\n"
  "Checks (each prints one JSON result as its last line on stdout):\n"
  "  quick                    driver, NVML, GPUs on the bus, CDI spec, PCIe links\n"
  "  copies                   host<->device, device-local and peer copy bandwidth\n"
  "  burn [--duration 10m]    burn-in through CUDA, watching clocks, throttling, Xids\n"
  "  disk --data-dir PATH [--fio PROGRAM] [--peers FILE]\n"
  "                           sequential and random I/O of the data disk\n"
  "  dcgm [--level 2] [--dcgmi PROGRAM]\n"
  "                           DCGM diagnostics (skipped where DCGM is not installed)\n"
  "  pair --role server|client --rails DEV:PORT:RATE,... [--peer ADDR]\n"
  "       [--ib-write-bw PROGRAM] [--duration 5s]\n"
  "                           RDMA write bandwidth to another machine per rail\n"
  "                           (perftest's ib_write_bw; the client names the server)\n"
  "  allreduce --rank R --ranks N --root HOST:PORT [--gpus K]\n"
  "       [--min-bytes 8] [--max-bytes 1073741824] [--connect-timeout 120s]\n"
  "       [--nccl-lib libnccl.so.2]\n"
  "                           NCCL all-reduce over N machines, one rank each driving\n"
  "                           its GPUs (rank 0 listens at --root; its table is\n"
  "                           all_reduce_perf's); skipped where NCCL is not installed\n"
  "  explain [--json]         every threshold and verdict rule, with its source\n"
  "\n"
  "Common options:\n"
  "  --json                   accepted (the JSON result is always the last line)\n"
  "  --host-root DIR          read sysfs, procfs, /dev and /etc/cdi under DIR (default /)\n"
  "  --cuda-lib PATH          CUDA driver library (default libcuda.so.1)\n"
  "  --nvml-lib PATH          NVML library (default libnvidia-ml.so.1)\n"
  "  --cdi-static-dir DIR     CDI specs an admin wrote (default /etc/cdi under --host-root)\n"
  "  --cdi-dynamic-dir DIR    CDI specs tools write (default /var/run/cdi under --host-root)\n"
  "  --policy FILE            threshold overrides (YAML, keys as `explain` lists them)\n"
  "\n"
  "Exit status: 0 pass, warn or skipped; 1 fail; 2 bad usage.\n";

int bad_usage(const std::string& why) {
  std::fprintf(stderr, "astraeus-check: %s\n\n%s", why.c_str(), usage_text);
  return 2;
}

struct parsed {
  std::string check;
  check_options options;
  std::string policy_file;
  bool json = false;
};

/// The options that set a text field of check_options; null for others.
std::string check_options::* text_option(const std::string& name) {
  static const std::pair<const char*, std::string check_options::*> table[] = {
    {"--host-root", &check_options::host_root}, {"--cuda-lib", &check_options::cuda_lib},
    {"--nvml-lib", &check_options::nvml_lib},   {"--data-dir", &check_options::data_dir},
    {"--fio", &check_options::fio},             {"--peers", &check_options::peers_file},
    {"--dcgmi", &check_options::dcgmi},         {"--role", &check_options::pair_role},
    {"--peer", &check_options::pair_peer},      {"--rails", &check_options::pair_rails},
    {"--ib-write-bw", &check_options::ib_write_bw},
    {"--root", &check_options::allreduce_root}, {"--nccl-lib", &check_options::nccl_lib},
    {"--cdi-static-dir", &check_options::cdi_static_dir},
    {"--cdi-dynamic-dir", &check_options::cdi_dynamic_dir},
  };
  for (const auto& [option, field] : table)
    if (name == option)
      return field;
  return nullptr;
}

/// The agent's settings it ran this check with (check_options.hpp,
/// check_env): the defaults that options given override.
void take_agent_settings(check_options& o) {
  static const std::pair<const char*, std::string check_options::*> table[] = {
    {check_env::host_root, &check_options::host_root},
    {check_env::nvml_lib, &check_options::nvml_lib},
    {check_env::cdi_static_dir, &check_options::cdi_static_dir},
    {check_env::cdi_dynamic_dir, &check_options::cdi_dynamic_dir},
  };
  for (const auto& [name, field] : table)
    if (const char* value = std::getenv(name); value && *value)
      o.*field = value;
}

/// Parses argv into `p`; returns an error text, empty when fine.
std::string parse_args(int argc, char** argv, parsed& p) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty())
    return "no check given";
  p.check = args[0];
  auto& o = p.options;
  take_agent_settings(o);
  for (size_t i = 1; i < args.size(); ++i) {
    const auto& a = args[i];
    auto value = [&](std::string& into) -> bool {
      if (i + 1 >= args.size())
        return false;
      into = args[++i];
      return true;
    };
    std::string v;
    if (a == "--json") {
      p.json = true;
      continue;
    } else if (auto field = text_option(a)) {
      if (!value(v) || v.empty())
        return a + " needs a value";
      o.*field = v;
    } else if (a == "--policy" || a == "--duration" || a == "--level") {
      if (!value(v) || v.empty())
        return a + " needs a value";
      if (a == "--policy") {
        p.policy_file = v;
      } else if (a == "--duration") {
        auto d = astraeus::parse_duration_text(v);
        if (!d || d->count() <= 0)
          return "--duration '" + v + "' is not a duration (e.g. 10m, 90s)";
        o.duration = *d;
      } else {
        if (v.size() != 1 || v[0] < '1' || v[0] > '4')
          return "--level '" + v + "' is not a DCGM level (1 to 4)";
        o.dcgm_level = v[0] - '0';
      }
    } else if (a == "--rank" || a == "--ranks" || a == "--gpus" || a == "--min-bytes"
               || a == "--max-bytes") {
      if (!value(v) || v.empty())
        return a + " needs a value";
      auto n = astraeus::parse_u64(v);
      if (!n || (a != "--rank" && *n == 0) || *n > (uint64_t{1} << 40))
        return a + " '" + v + "' is not a " + (a == "--rank" ? "" : "positive ") + "number";
      if (a == "--rank")
        o.allreduce_rank = static_cast<int>(*n);
      else if (a == "--ranks")
        o.allreduce_ranks = static_cast<int>(*n);
      else if (a == "--gpus")
        o.allreduce_gpus = static_cast<int>(*n);
      else if (a == "--min-bytes")
        o.allreduce_min_bytes = *n;
      else
        o.allreduce_max_bytes = *n;
    } else if (a == "--connect-timeout") {
      if (!value(v) || v.empty())
        return a + " needs a value";
      auto d = astraeus::parse_duration_text(v);
      if (!d || d->count() <= 0)
        return "--connect-timeout '" + v + "' is not a duration (e.g. 120s, 2m)";
      o.allreduce_connect_timeout = *d;
    } else if (a == "-h" || a == "--help") {
      return "help";
    } else {
      return "unknown option '" + a + "' for " + p.check;
    }
  }
  if (p.check == "disk" && o.data_dir.empty())
    return "disk needs --data-dir PATH";
  if (p.check == "pair") {
    if (o.pair_role != "server" && o.pair_role != "client")
      return "pair needs --role server or --role client";
    if (o.pair_role == "client" && o.pair_peer.empty())
      return "pair --role client needs --peer ADDR (the server's address)";
    if (auto rails = parse_pair_rails(o.pair_rails); !rails)
      return astraeus::render_error(rails.error());
  }
  if (p.check == "allreduce") {
    if (o.allreduce_ranks < 1 || o.allreduce_rank < 0 || o.allreduce_rank >= o.allreduce_ranks)
      return "allreduce needs --rank R --ranks N with 0 <= R < N";
    auto root = parse_root(o.allreduce_root);
    if (!root)
      return astraeus::render_error(root.error());
    if (o.allreduce_rank > 0 && root->first.empty())
      return "allreduce --rank " + std::to_string(o.allreduce_rank)
             + " needs --root HOST:PORT naming rank 0's machine";
    if (o.allreduce_min_bytes > o.allreduce_max_bytes)
      return "allreduce --min-bytes is above --max-bytes";
  }
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  parsed p;
  auto why = parse_args(argc, argv, p);
  if (why == "help" || (argc >= 2 && (std::strcmp(argv[1], "-h") == 0
                                      || std::strcmp(argv[1], "--help") == 0))) {
    std::fputs(usage_text, stdout);
    return 0;
  }
  if (!why.empty())
    return bad_usage(why);
  if (!p.policy_file.empty())
    if (auto err = p.options.policy.apply_file(p.policy_file)) {
      std::fprintf(stderr, "astraeus-check: %s\n", astraeus::render_error(err).c_str());
      return 2;
    }
  check_result r;
  if (p.check == "explain") {
    if (p.json)
      std::cout << policy_rows_json(p.options.policy) << std::endl;
    else
      std::fputs(render_policy_table(p.options.policy).c_str(), stdout);
    return 0;
  } else if (p.check == "quick") {
    r = run_quick(p.options);
  } else if (p.check == "copies") {
    r = run_copies(p.options);
  } else if (p.check == "burn") {
    r = run_burn(p.options);
  } else if (p.check == "disk") {
    r = run_disk(p.options);
  } else if (p.check == "dcgm") {
    r = run_dcgm(p.options);
  } else if (p.check == "pair") {
    r = run_pair(p.options);
  } else if (p.check == "allreduce") {
    r = run_all_reduce(p.options);
  } else {
    return bad_usage("unknown check '" + p.check + "'");
  }
  for (const auto& f : r.findings)
    std::fprintf(stderr, "%s %s\n  fix: %s\n", f.severity == verdict::fail ? "!" : "~",
                 f.what.c_str(), f.fix.c_str());
  std::fprintf(stderr, "%s: %s: %s\n", r.check.c_str(), to_string(r.result), r.summary.c_str());
  std::fflush(stderr);
  std::cout << to_json_line(r) << std::endl;
  return exit_status(r.result);
}
