#include "runtime/validation/disk_check.hpp"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>

#include <dirent.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "messages/error.hpp"
#include "runtime/host/sysfs_text.hpp"
#include "runtime/process/program_run.hpp"
#include "runtime/validation/disk_direct_io.hpp"
#include "runtime/validation/fix_commands.hpp"

namespace astraeus::validation {

namespace {

using steady = std::chrono::steady_clock;

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, v >= 100 ? "%.0f" : "%.1f", v);
  return buf;
}

std::string read_trimmed(const std::string& path) {
  auto f = read_small_file(path, 4096);
  return f.error == 0 ? std::string{trim(f.text)} : std::string{};
}

}  // namespace

const char* to_string(disk_class c) {
  switch (c) {
    case disk_class::nvme: return "NVMe";
    case disk_class::ssd: return "SSD";
    case disk_class::hdd: return "HDD";
    case disk_class::virtual_disk: return "virtual";
    case disk_class::unknown: return "unknown";
  }
  return "unknown";
}

disk_device classify_block_device(const std::string& root, unsigned major, unsigned minor) {
  disk_device out;
  auto base = root_prefix(root);
  std::string dir = base + "/sys/dev/block/" + std::to_string(major) + ":" + std::to_string(minor);
  char real[4096];
  for (int hop = 0; hop < 4; ++hop) {
    auto n = ::realpath(dir.c_str(), real);
    if (!n)
      return out;
    std::string path = real;
    // A partition: its parent directory is the disk.
    struct stat st {};
    if (::stat((path + "/partition").c_str(), &st) == 0)
      path = path.substr(0, path.rfind('/'));
    // A device-mapper or md device: follow its first slave.
    std::string slaves = path + "/slaves";
    std::string first;
    if (auto* d = ::opendir(slaves.c_str())) {
      while (auto* e = ::readdir(d))
        if (e->d_name[0] != '.') {
          first = e->d_name;
          break;
        }
      ::closedir(d);
    }
    if (!first.empty()) {
      dir = slaves + "/" + first;
      continue;
    }
    out.name = path.substr(path.rfind('/') + 1);
    auto rot = read_trimmed(path + "/queue/rotational");
    if (starts_with(out.name, "nvme"))
      out.kind = disk_class::nvme;
    else if (starts_with(out.name, "vd") || starts_with(out.name, "xvd"))
      out.kind = disk_class::virtual_disk;
    else if (rot == "1")
      out.kind = disk_class::hdd;
    else if (rot == "0")
      out.kind = disk_class::ssd;
    return out;
  }
  return out;
}

caf::expected<disk_figures> parse_fio_json(std::string_view text) {
  auto b = text.find('{');
  if (b == std::string_view::npos)
    return caf::make_error(ec::invalid_request, "fio printed no JSON");
  auto j = nlohmann::json::parse(text.substr(b), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("jobs") || !j["jobs"].is_array())
    return caf::make_error(ec::invalid_request, "fio's output is not fio JSON (no \"jobs\")");
  disk_figures out;
  out.tool = j.value("fio version", std::string{"fio"});
  auto bytes_per_s = [](const nlohmann::json& side) -> double {
    if (side.contains("bw_bytes") && side["bw_bytes"].is_number())
      return side["bw_bytes"].get<double>();
    if (side.contains("bw") && side["bw"].is_number())
      return side["bw"].get<double>() * 1024;  // KiB/s
    return 0;
  };
  for (const auto& job : j["jobs"]) {
    auto name = job.value("jobname", std::string{});
    if (job.value("error", 0) != 0)
      return caf::make_error(ec::invalid_request,
                             "fio job " + name + " failed with error "
                               + std::to_string(job.value("error", 0)));
    if (name == "seq_write" && job.contains("write"))
      out.seq_write_mbs = bytes_per_s(job["write"]) / 1e6;
    else if (name == "seq_read" && job.contains("read"))
      out.seq_read_mbs = bytes_per_s(job["read"]) / 1e6;
    else if (name == "rand_read" && job.contains("read"))
      out.rand_read_iops = job["read"].value("iops", 0.0);
  }
  if (!out.seq_read_mbs && !out.seq_write_mbs && !out.rand_read_iops)
    return caf::make_error(ec::invalid_request,
                           "fio's JSON has none of the jobs seq_write, seq_read, rand_read");
  return out;
}

void judge_disk(const disk_figures& f, const disk_device& dev,
                const std::vector<check_result>& peers, const thresholds& t, check_result& out) {
  struct figure {
    const char* name;
    const char* words;
    std::optional<double> value;
    const char* unit;
    double nvme, ssd, hdd;
  };
  const figure figs[] = {
    {"seq_read", "sequential read", f.seq_read_mbs, "MB/s", t.disk_nvme_seq_read_mbs,
     t.disk_ssd_seq_read_mbs, t.disk_hdd_seq_read_mbs},
    {"seq_write", "sequential write", f.seq_write_mbs, "MB/s", t.disk_nvme_seq_write_mbs,
     t.disk_ssd_seq_write_mbs, t.disk_hdd_seq_write_mbs},
    {"rand_read", "4 KiB random read", f.rand_read_iops, "IOPS", t.disk_nvme_rand_read_iops,
     t.disk_ssd_rand_read_iops, t.disk_hdd_rand_read_iops},
  };
  auto device = dev.name.empty() ? std::string{"the data disk"} : dev.name;
  for (const auto& g : figs) {
    if (!g.value)
      continue;
    std::optional<double> floor;
    if (dev.kind == disk_class::nvme)
      floor = g.nvme;
    else if (dev.kind == disk_class::ssd)
      floor = g.ssd;
    else if (dev.kind == disk_class::hdd)
      floor = g.hdd;
    double best = 0;
    for (const auto& p : peers)
      for (const auto& m : p.measurements)
        if (m.name == g.name && m.value > best)
          best = m.value;
    verdict v = verdict::pass;
    std::string expected;
    if (floor) {
      expected = ">= " + fmt(*floor) + " (" + to_string(dev.kind) + ")";
      if (*g.value < *floor)
        v = verdict::fail;
    }
    bool slow_peer = best > 0 && *g.value < best * t.disk_peer_fraction;
    if (best > 0)
      expected += std::string{expected.empty() ? "" : ", "} + ">= "
                  + fmt(best * t.disk_peer_fraction) + " (" + show_number(t.disk_peer_fraction)
                  + " x best peer)";
    if (slow_peer)
      v = worse(v, verdict::warn);
    out.add_measurement({g.name, device, "", *g.value, g.unit, expected, v});
    if (v == verdict::pass)
      continue;
    std::string what = device + " " + g.words + " " + fmt(*g.value) + " " + g.unit;
    if (floor && *g.value < *floor)
      what += ", below the " + fmt(*floor) + " " + g.unit + " of an " + to_string(dev.kind)
              + " drive";
    if (slow_peer)
      what += std::string{floor && *g.value < *floor ? "; " : ", "}
              + std::to_string(static_cast<int>(*g.value / best * 100 + 0.5))
              + " % of the best peer's " + fmt(best);
    out.add_finding(v, device, what,
                    dev.kind == disk_class::nvme
                      ? "check " + device + "'s health and link (`nvme smart-log /dev/" + device
                          + "`, `lspci -vv` for its PCIe width) and that the data directory is "
                            "on it, not on a slower disk"
                      : "check that the data directory is on the intended drive (`findmnt -T "
                        "<dir>`) and the drive's health (`smartctl -a`)");
  }
}

namespace {

std::vector<check_result> read_peers(const std::string& file, check_result& out) {
  std::vector<check_result> peers;
  if (file.empty())
    return peers;
  std::ifstream in(file);
  if (!in) {
    out.add_finding(verdict::warn, "", "cannot read the peers' results " + file,
                    "pass --peers a file of earlier disk results, one JSON line each");
    return peers;
  }
  std::string line;
  while (std::getline(in, line))
    if (auto r = parse_check_result(trim(line)); r && r->check == "disk")
      peers.push_back(std::move(*r));
  return peers;
}

caf::expected<disk_figures> run_fio(const check_options& o, const std::string& file) {
  const auto& t = o.policy.values();
  auto runtime = std::to_string(static_cast<long long>(t.disk_runtime_s));
  std::vector<std::string> args = {
    "--output-format=json", "--filename=" + file,
    "--size=" + std::to_string(static_cast<long long>(t.disk_size_mib)) + "M", "--direct=1",
    "--ioengine=libaio", "--runtime=" + runtime,
    "--name=seq_write", "--rw=write", "--bs=1M", "--iodepth=16",
    "--name=seq_read", "--stonewall", "--rw=read", "--bs=1M", "--iodepth=16",
    "--name=rand_read", "--stonewall", "--rw=randread", "--bs=4k", "--iodepth=64",
    "--time_based", "--runtime=" + runtime};
  auto deadline = steady::now() + std::chrono::seconds{static_cast<long long>(t.disk_runtime_s * 3 + 120)};
  auto run = run_program(o.fio, args, deadline);
  if (!run.started)
    return caf::make_error(ec::host_read_failure, "fio cannot run: " + run.error);
  if (run.timed_out)
    return caf::make_error(ec::timeout, "fio ran past its deadline");
  auto parsed = parse_fio_json(run.out);
  if (!parsed)
    return caf::make_error(ec::host_read_failure,
                           render_error(parsed.error()) + " (fio exited "
                             + std::to_string(run.exit_code) + ": "
                             + std::string{trim(run.err).substr(0, 200)} + ")");
  return parsed;
}

}  // namespace

check_result run_disk(const check_options& o) {
  auto start = steady::now();
  check_result out;
  out.check = "disk";
  const auto& t = o.policy.values();
  struct stat st {};
  if (::stat(o.data_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    out.add_finding(verdict::fail, "", "the data directory " + o.data_dir + " does not exist",
                    "create it on the machine (mkdir -p " + o.data_dir + ") or choose another "
                    "with `" + fix_command::data_location("MACHINE") + "`, then run the disk check "
                    "again");
    return finish_result(std::move(out), start, "");
  }
  auto dev = classify_block_device(o.host_root, major(st.st_dev), minor(st.st_dev));
  auto peers = read_peers(o.peers_file, out);
  std::string file = o.data_dir + "/.astraeus-disk-check." + std::to_string(::getpid());
  caf::expected<disk_figures> figs = caf::make_error(ec::host_read_failure, "not run");
  auto fio = o.fio.empty() ? std::string{} : resolve_program(o.fio);
  if (!fio.empty() && ::access(fio.c_str(), X_OK) == 0) {
    std::fprintf(stderr, "disk: fio on %s (%s)\n", o.data_dir.c_str(), to_string(dev.kind));
    figs = run_fio(o, file);
    if (!figs)
      std::fprintf(stderr, "disk: %s; using the built-in test\n", render_error(figs.error()).c_str());
  }
  if (!figs) {
    std::fprintf(stderr, "disk: built-in O_DIRECT test on %s\n", o.data_dir.c_str());
    figs = direct_io_test(file, static_cast<uint64_t>(t.disk_size_mib) << 20, t.disk_runtime_s);
  }
  ::unlink(file.c_str());
  if (!figs) {
    out.add_finding(verdict::fail, dev.name, "the data disk cannot be tested: "
                                               + render_error(figs.error()),
                    "check that " + o.data_dir + " is writable and has "
                      + show_number(t.disk_size_mib) + " MiB free");
  } else {
    judge_disk(*figs, dev, peers, t, out);
  }
  std::string disk = std::string{to_string(dev.kind)} + " " + (dev.name.empty() ? "disk" : dev.name);
  std::string pass_summary;
  if (dev.kind == disk_class::virtual_disk || dev.kind == disk_class::unknown) {
    // No class floor to meet: say what was measured, and what it was held to.
    pass_summary = disk + (dev.kind == disk_class::virtual_disk ? " (virtual: no class floor)"
                                                                 : " (no class floor)");
    if (figs) {
      std::vector<std::string> parts;
      if (figs->seq_read_mbs) parts.push_back("reads " + fmt(*figs->seq_read_mbs) + " MB/s");
      if (figs->seq_write_mbs) parts.push_back("writes " + fmt(*figs->seq_write_mbs) + " MB/s");
      if (figs->rand_read_iops) parts.push_back(fmt(*figs->rand_read_iops) + " random-read IOPS");
      for (size_t i = 0; i < parts.size(); ++i)
        pass_summary += (i == 0 ? " " : ", ") + parts[i];
    }
    pass_summary += peers.empty() ? "" : ", within its peers";
  } else {
    pass_summary = disk + " meets its class" + (peers.empty() ? "" : " and its peers");
  }
  return finish_result(std::move(out), start,
                       pass_summary + " (" + (figs ? figs->tool : "") + ")");
}

}  // namespace astraeus::validation
