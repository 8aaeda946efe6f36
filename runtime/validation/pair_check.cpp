// The pair check (pair_check.hpp): ib_write_bw per rail, server or client.

#include "runtime/validation/pair_check.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>

#include <unistd.h>

#include "messages/error.hpp"
#include "runtime/host/sysfs_text.hpp"
#include "runtime/process/program_run.hpp"

namespace astraeus::validation {

namespace {

using clock_type = std::chrono::steady_clock;

std::string gbps_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

std::chrono::milliseconds seconds(double s) {
  return std::chrono::milliseconds{static_cast<long long>(s * 1000)};
}

/// The whitespace-separated words of `line`, with "BW" joined to the word
/// after it ("BW average[Gb/sec]" is one column).
std::vector<std::string> columns_of(std::string_view line) {
  std::vector<std::string> out;
  std::string word;
  auto flush = [&] {
    if (word.empty())
      return;
    if (!out.empty() && out.back() == "BW")
      out.back() += " " + word;
    else
      out.push_back(word);
    word.clear();
  };
  for (char c : line) {
    if (c == ' ' || c == '\t' || c == '\r')
      flush();
    else
      word += c;
  }
  flush();
  return out;
}

/// Whether the run could not reach the server (it may not listen yet).
bool not_connected(const run_outcome& run) {
  for (const auto* text : {&run.out, &run.err})
    if (text->find("Couldn't connect") != std::string::npos
        || text->find("Unable to open file descriptor for socket connection")
             != std::string::npos)
      return true;
  return false;
}

}  // namespace

caf::expected<std::vector<pair_rail>> parse_pair_rails(std::string_view text) {
  std::vector<pair_rail> out;
  if (trim(text).empty())
    return caf::make_error(ec::invalid_request, "--rails is empty: give device:port:rate,...");
  for (auto entry : split(text, ',')) {
    entry = trim(entry);
    auto parts = split(entry, ':');
    auto bad = [&](const std::string& why) {
      return caf::make_error(ec::invalid_request, "--rails entry '" + std::string{entry}
                                                    + "' " + why + " (device:port:rate, e.g. "
                                                    "mlx5_0:1:400)");
    };
    if (parts.size() != 3 || parts[0].empty())
      return bad("is not device:port:rate");
    auto port = parse_u64(parts[1]);
    if (!port || *port == 0 || *port > 255)
      return bad("has no port number from 1 to 255");
    auto rate = parse_double(parts[2]);
    if (!rate || *rate <= 0)
      return bad("has no positive rate in Gb/s");
    out.push_back({std::string{parts[0]}, static_cast<uint32_t>(*port), *rate});
  }
  return out;
}

std::string format_pair_rails(const std::vector<pair_rail>& rails) {
  std::string out;
  for (const auto& r : rails)
    out += (out.empty() ? "" : ",") + r.device + ":" + std::to_string(r.port) + ":"
           + show_number(r.rate_gbps);
  return out;
}

caf::expected<double> parse_ib_write_bw(std::string_view output) {
  auto lines = nonblank_lines(output);
  for (size_t i = 0; i < lines.size(); ++i) {
    auto header = columns_of(lines[i]);
    size_t col = header.size();
    for (size_t c = 0; c < header.size(); ++c)
      if (header[c].rfind("BW average[", 0) == 0)
        col = c;
    if (col == header.size())
      continue;
    bool mib = header[col].find("MB/sec") != std::string::npos;
    for (size_t j = i + 1; j < lines.size(); ++j) {
      auto row = columns_of(lines[j]);
      if (row.empty() || !parse_double(row[0]))
        continue;  // a separator line, a warning
      if (row.size() <= col)
        break;
      auto v = parse_double(row[col]);
      if (!v || *v < 0)
        break;
      // perftest's MB/sec is MiB/s (2^20 bytes).
      return mib ? *v * 1048576.0 * 8 / 1e9 : *v;
    }
    return caf::make_error(ec::invalid_request,
                           "ib_write_bw printed its result header but no figure under \""
                             + header[col] + "\"");
  }
  return caf::make_error(ec::invalid_request,
                         "ib_write_bw printed no \"BW average\" result (is it perftest's?)");
}

void judge_rail(check_result& r, const pair_rail& rail, double gbps, const thresholds& t) {
  double warn_at = rail.rate_gbps * t.pairs_rate_fraction;
  double fail_at = rail.rate_gbps * t.pairs_fail_fraction;
  verdict v = gbps < fail_at ? verdict::fail : gbps < warn_at ? verdict::warn : verdict::pass;
  r.add_measurement({"write_bw", rail.device, "", gbps, "Gb/s",
                     ">= " + show_number(std::round(warn_at * 10) / 10) + " ("
                       + show_number(t.pairs_rate_fraction) + " x "
                       + show_number(rail.rate_gbps) + " Gb/s trained)",
                     v});
  r.add_measurement({"rate", rail.device, "", rail.rate_gbps, "Gb/s", "", verdict::pass});
  if (v == verdict::pass)
    return;
  r.add_finding(v, rail.device,
                rail.device + " RDMA write " + gbps_text(gbps) + " Gb/s, expected >= "
                  + gbps_text(warn_at) + " (" + show_number(t.pairs_rate_fraction) + " x its "
                  + show_number(rail.rate_gbps) + " Gb/s trained rate)",
                "Look at both ends of " + rail.device + ": `mlxlink -d " + rail.device
                  + " -m` shows each link's speed and errors; reseat or replace the cable "
                    "and transceiver of the end with errors.");
}

check_result run_pair(const check_options& o) {
  auto start = clock_type::now();
  const auto& t = o.policy.values();
  check_result out;
  out.check = "pair";
  auto rails = parse_pair_rails(o.pair_rails);
  bool server = o.pair_role == "server";
  if (!rails || (!server && o.pair_role != "client") || (!server && o.pair_peer.empty())) {
    out.add_finding(verdict::fail, "",
                    !rails ? render_error(rails.error())
                           : "the pair check needs --role server, or --role client with --peer ADDR",
                    "Run it as the validation does: astraeus-check pair --role server|client "
                    "--rails device:port:rate,...");
    return finish_result(std::move(out), start, "");
  }
  if (auto program = resolve_program(o.ib_write_bw);
      program.empty() || ::access(program.c_str(), X_OK) != 0) {
    // Skipped, as DCGM's check is without dcgmi: nothing was measured, and
    // no link is to blame (README: a machine every check of which was
    // skipped "(no perftest, no DCGM) is skipped").
    out.result = verdict::skipped;
    out.summary = o.ib_write_bw + " is not installed (perftest): install it on both machines "
                  "(`apt install perftest`), or pass --ib-write-bw PATH";
    return finish_result(std::move(out), start, "");
  }
  auto duration = o.duration.value_or(seconds(t.pairs_duration_s));
  auto connect_window = seconds(t.pairs_connect_timeout_s);
  for (size_t k = 0; k < rails->size(); ++k) {
    const auto& rail = (*rails)[k];
    std::vector<std::string> args{"-d", rail.device, "-i", std::to_string(rail.port), "-p",
                                  std::to_string(static_cast<int>(t.pairs_base_port) + k),
                                  "-D", std::to_string(std::max<long long>(
                                          1, std::chrono::duration_cast<std::chrono::seconds>(
                                               duration).count())),
                                  "--report_gbits", "-F"};
    if (!server)
      args.push_back(o.pair_peer);
    // The server waits for its client as long as the client may try; the
    // client tries again while the server's listener is not up yet.
    auto tries_until = clock_type::now() + connect_window;
    run_outcome run;
    for (;;) {
      auto deadline = clock_type::now() + duration + seconds(15)
                      + (server ? connect_window : std::chrono::milliseconds{0});
      run = run_program(o.ib_write_bw, args, deadline);
      if (server || run.timed_out || !run.started || !not_connected(run)
          || clock_type::now() >= tries_until)
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds{500});
    }
    auto gbps = run.started && !run.timed_out ? parse_ib_write_bw(run.out) : caf::expected<double>{0.0};
    if (!run.started || run.timed_out || !gbps) {
      std::string why = !run.started  ? "cannot run: " + run.error
                        : run.timed_out ? (server ? "no client came within "
                                                  : "ran past its deadline of ")
                                            + show_number(t.pairs_connect_timeout_s) + " s"
                        : not_connected(run) ? "could not reach the server at " + o.pair_peer
                        : render_error(gbps.error()) + " (exit "
                            + std::to_string(run.exit_code) + ": "
                            + std::string{trim(run.err).substr(0, 160)} + ")";
      out.add_measurement({"write_bw", rail.device, "", 0, "Gb/s", "a figure", verdict::fail});
      out.add_finding(verdict::fail, rail.device,
                      rail.device + " ib_write_bw " + (server ? "server" : "client")
                        + " gave no figure: " + why,
                      "Check that both machines reach each other on TCP port "
                        + std::to_string(static_cast<int>(t.pairs_base_port) + k)
                        + " and that `ibv_devinfo -d " + rail.device
                        + "` shows the port Active on both.");
      continue;
    }
    judge_rail(out, rail, *gbps, t);
  }
  std::string pass = std::to_string(rails->size()) + " rail(s) at their trained rate";
  return finish_result(std::move(out), start, pass);
}

}  // namespace astraeus::validation
