#pragma once
// Deterministic broker tests under GoogleTest (the gate, a standby's gate,
// the agent): an actor system on CAF's test coordinator and test multiplexer
// (caf/io/network/test_multiplexer.hpp), so connections, bytes and timers
// are simulated and every step runs in one thread, with no socket and no
// sleep. Log lines are captured for assertions.

#include <algorithm>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/network/test_multiplexer.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "runtime/gate/frame_codec.hpp"
#include "runtime/process/system_setup.hpp"

namespace astraeus::test {

/// Base fixture: `sys` on the test coordinator (`sched`) and the test
/// multiplexer (`mpx`), and the log lines written meanwhile (`log_text`).
class io_test : public ::testing::Test {
protected:
  io_test()
    : sys(init(cfg)),
      sched(dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler())),
      mpx(dynamic_cast<caf::io::network::test_multiplexer&>(sys.middleman().backend())) {
    sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log);
    spdlog::default_logger()->sinks().push_back(sink);
    // Info lines are part of what tests read, whatever level a test before
    // this one left the logger at.
    level = spdlog::default_logger()->level();
    spdlog::default_logger()->set_level(spdlog::level::info);
  }

  ~io_test() override {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink), sinks.end());
    spdlog::default_logger()->set_level(level);
  }

  static caf::actor_system_config& init(caf::actor_system_config& c) {
    configure_actor_system(c);
    c.set("scheduler.policy", caf::atom("testing"));
    c.set("middleman.network-backend", caf::atom("testing"));
    c.set("logger.file-verbosity", caf::atom("quiet"));
    return c;
  }

  /// Runs actors, brokers' runnables and pending reads until nothing moves.
  void exec_all() {
    while (sched.try_run_once() || mpx.try_exec_runnable() || mpx.read_data()) {
    }
  }

  /// Advances virtual time by `d`, then runs what that made due.
  void advance(caf::timespan d) {
    sched.clock().advance_time(d);
    exec_all();
  }

  /// A peer connects to `acceptor` as connection `id`.
  caf::io::connection_handle connect(caf::io::accept_handle acceptor, int64_t id) {
    auto conn = caf::io::connection_handle::from_int(id);
    mpx.add_pending_connect(acceptor, conn);
    mpx.accept_connection(acceptor);
    exec_all();
    return conn;
  }

  /// The peer on `conn` sends `bytes`.
  void send(caf::io::connection_handle conn, const std::string& bytes) {
    caf::io::network::test_multiplexer::buffer_type buf(bytes.begin(), bytes.end());
    mpx.virtual_send(conn, buf);
    exec_all();
  }

  /// The whole records written to `conn` since the last call (each
  /// record's bytes after its length prefix).
  std::vector<std::string> records(caf::io::connection_handle conn) {
    auto& out = mpx.output_buffer(conn);
    std::vector<std::string> recs;
    size_t pos = 0;
    while (out.size() - pos >= frame_header_size) {
      auto len = decode_frame_length(out.data() + pos, 1u << 20);
      if (!len || out.size() - pos - frame_header_size < *len)
        break;
      recs.emplace_back(out.data() + pos + frame_header_size, *len);
      pos += frame_header_size + *len;
    }
    out.erase(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(pos));
    return recs;
  }

  /// What was logged since the fixture started.
  std::string log_text() const {
    return log.str();
  }

  std::ostringstream log;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink;
  spdlog::level::level_enum level = spdlog::level::info;
  caf::actor_system_config cfg;
  caf::actor_system sys;
  caf::scheduler::test_coordinator& sched;
  caf::io::network::test_multiplexer& mpx;
};

} // namespace astraeus::test
