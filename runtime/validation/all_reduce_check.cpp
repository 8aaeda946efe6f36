// The all-reduce check (all_reduce_check.hpp): the ranks meet over TCP,
// then NCCL (or the stand-in) sweeps the sizes; rank 0 prints the table.

#include "runtime/validation/all_reduce_check.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>
#include <type_traits>

#include <arpa/inet.h>
#include <dlfcn.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "messages/error.hpp"
#include "runtime/host/sysfs_text.hpp"
#include "runtime/validation/cuda_driver.hpp"

namespace astraeus::validation {

namespace {

using clock_type = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr const char* stand_in_env = "ASTRAEUS_CUDA_FIXTURE";
constexpr int warmup_iters = 5;
constexpr int timed_iters = 20;

std::string seconds_text(milliseconds d) {
  return show_number(static_cast<double>(d.count()) / 1000.0) + " s";
}

// ---- the meeting over TCP ------------------------------------------------

/// A socket closed when it goes.
struct socket_fd {
  int fd = -1;
  explicit socket_fd(int f = -1) : fd(f) {}
  socket_fd(socket_fd&& o) noexcept : fd(o.fd) { o.fd = -1; }
  socket_fd& operator=(socket_fd&& o) noexcept {
    std::swap(fd, o.fd);
    return *this;
  }
  ~socket_fd() {
    if (fd >= 0)
      ::close(fd);
  }
};

int remaining_ms(clock_type::time_point deadline) {
  auto left = std::chrono::duration_cast<milliseconds>(deadline - clock_type::now()).count();
  return left > 0 ? static_cast<int>(std::min<long long>(left, 1 << 30)) : 0;
}

bool send_line(int fd, const std::string& line) {
  std::string text = line + "\n";
  size_t at = 0;
  while (at < text.size()) {
    auto n = ::send(fd, text.data() + at, text.size() - at, MSG_NOSIGNAL);
    if (n <= 0)
      return false;
    at += static_cast<size_t>(n);
  }
  return true;
}

/// One line from `fd` before `deadline`; nullopt on timeout or close.
std::optional<std::string> read_line(int fd, clock_type::time_point deadline) {
  std::string line;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, remaining_ms(deadline)) <= 0)
      return std::nullopt;
    char c;
    if (::recv(fd, &c, 1, 0) != 1)
      return std::nullopt;
    if (c == '\n')
      return line;
    if (line.size() > 4096)
      return std::nullopt;
    line += c;
  }
}

/// What a rank learns at the meeting: whether to go on, the GPUs of the
/// whole group and its first GPU's global rank; `why` when not.
struct meeting {
  bool go = false;
  int total_gpus = 0;
  int first_gpu = 0;
  std::string why;
};

/// "rank R ranks N gpus K ready|unready WHY": what a rank tells the root.
std::string hello_of(int rank, int ranks, int gpus, const std::string& unready) {
  return "astraeus-allreduce rank " + std::to_string(rank) + " ranks " + std::to_string(ranks)
         + " gpus " + std::to_string(gpus) + (unready.empty() ? " ready" : " unready " + unready);
}

/// Rank 0: listens on `port` until every other rank said hello (or the
/// deadline), then tells each to go (with its first GPU) or to stop.
meeting meet_as_root(uint16_t port, int ranks, int gpus, const std::string& unready,
                     milliseconds window) {
  meeting out;
  socket_fd listener{::socket(AF_INET6, SOCK_STREAM, 0)};
  bool v6 = listener.fd >= 0;
  if (!v6)
    listener = socket_fd{::socket(AF_INET, SOCK_STREAM, 0)};
  int one = 1, zero = 0;
  ::setsockopt(listener.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  int rc;
  if (v6) {
    ::setsockopt(listener.fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(port);
    rc = ::bind(listener.fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(port);
    rc = ::bind(listener.fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
  if (listener.fd < 0 || rc != 0 || ::listen(listener.fd, 64) != 0) {
    out.why = "rank 0 cannot listen on TCP port " + std::to_string(port) + ": "
              + std::strerror(errno);
    return out;
  }
  auto deadline = clock_type::now() + window;
  std::map<int, std::pair<socket_fd, int>> peers;  // rank -> (socket, gpus)
  std::string stop = unready.empty() ? "" : "rank 0 cannot run: " + unready;
  while (static_cast<int>(peers.size()) < ranks - 1) {
    pollfd p{listener.fd, POLLIN, 0};
    if (::poll(&p, 1, remaining_ms(deadline)) <= 0)
      break;
    socket_fd peer{::accept(listener.fd, nullptr, nullptr)};
    if (peer.fd < 0)
      continue;
    auto hello = read_line(peer.fd, clock_type::now() + std::chrono::seconds{10});
    if (!hello)
      continue;
    auto f = split(*hello, ' ');
    auto r = f.size() >= 8 ? parse_u64(f[2]) : std::nullopt;
    auto n = f.size() >= 8 ? parse_u64(f[4]) : std::nullopt;
    auto k = f.size() >= 8 ? parse_u64(f[6]) : std::nullopt;
    if (f.size() < 8 || f[0] != "astraeus-allreduce" || !r || !n || !k)
      continue;  // not one of ours
    if (static_cast<int>(*n) != ranks || *r == 0 || static_cast<int>(*r) >= ranks
        || peers.count(static_cast<int>(*r))) {
      send_line(peer.fd, "stop rank 0 expects ranks 1 to " + std::to_string(ranks - 1)
                           + " of " + std::to_string(ranks) + " once each, not rank "
                           + std::string{f[2]} + " of " + std::string{f[4]});
      continue;
    }
    if (f[7] != "ready" && stop.empty()) {
      std::string why;
      for (size_t i = 8; i < f.size(); ++i)
        why += (why.empty() ? "" : " ") + std::string{f[i]};
      stop = "rank " + std::string{f[2]} + " cannot run: " + why;
    }
    peers[static_cast<int>(*r)] = std::make_pair(std::move(peer), static_cast<int>(*k));
  }
  if (static_cast<int>(peers.size()) < ranks - 1) {
    std::string missing;
    for (int r = 1; r < ranks; ++r)
      if (!peers.count(r))
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    stop = "rank 0 heard from " + std::to_string(peers.size() + 1) + " of "
           + std::to_string(ranks) + " ranks within " + seconds_text(window)
           + " on TCP port " + std::to_string(port) + " (missing: rank " + missing + ")";
  }
  int total = gpus;
  for (const auto& [r, p] : peers)
    total += p.second;
  int first = gpus;
  for (auto& [r, p] : peers) {
    send_line(p.first.fd, stop.empty() ? "go " + std::to_string(total) + " " + std::to_string(first)
                                       : "stop " + stop);
    first += p.second;
  }
  out.go = stop.empty();
  out.why = stop;
  out.total_gpus = total;
  out.first_gpu = 0;
  return out;
}

/// Ranks 1..N-1: connect to the root (trying again until the deadline: it
/// may not listen yet), say hello, wait for go or stop.
meeting meet_as_peer(const std::string& host, uint16_t port, int rank, int ranks, int gpus,
                     const std::string& unready, milliseconds window) {
  meeting out;
  const std::string where = host + ":" + std::to_string(port);
  auto deadline = clock_type::now() + window;
  std::string last = "no answer";
  socket_fd s;
  while (s.fd < 0) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_socktype = SOCK_STREAM;
    int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
    if (gai != 0) {
      last = std::string{"cannot resolve it: "} + ::gai_strerror(gai);
    } else {
      for (auto* a = res; a && s.fd < 0; a = a->ai_next) {
        socket_fd c{::socket(a->ai_family, a->ai_socktype, a->ai_protocol)};
        if (c.fd >= 0 && ::connect(c.fd, a->ai_addr, a->ai_addrlen) == 0)
          s = std::move(c);
        else
          last = std::strerror(errno);
      }
      ::freeaddrinfo(res);
    }
    if (s.fd >= 0 || clock_type::now() >= deadline)
      break;
    std::this_thread::sleep_for(milliseconds{200});
  }
  if (s.fd < 0) {
    out.why = "rank " + std::to_string(rank) + " could not reach the all-reduce root at " + where
              + " within " + seconds_text(window) + ": " + last;
    return out;
  }
  if (!send_line(s.fd, hello_of(rank, ranks, gpus, unready))) {
    out.why = "rank " + std::to_string(rank) + " lost the root at " + where + " saying hello";
    return out;
  }
  auto answer = read_line(s.fd, deadline + std::chrono::seconds{10});
  if (!answer) {
    out.why = "rank " + std::to_string(rank) + " heard no go from the root at " + where
              + " within " + seconds_text(window);
    return out;
  }
  if (answer->rfind("stop ", 0) == 0) {
    out.why = answer->substr(5);
    return out;
  }
  auto f = split(*answer, ' ');
  auto total = f.size() == 3 ? parse_u64(f[1]) : std::nullopt;
  auto first = f.size() == 3 ? parse_u64(f[2]) : std::nullopt;
  if (f.size() != 3 || f[0] != "go" || !total || !first) {
    out.why = "the root at " + where + " answered '" + answer->substr(0, 80) + "'";
    return out;
  }
  out.go = true;
  out.total_gpus = static_cast<int>(*total);
  out.first_gpu = static_cast<int>(*first);
  return out;
}

// ---- NCCL, loaded at run time --------------------------------------------

/// ncclUniqueId, ncclComm_t and the entry points used, as nccl.h (2.x)
/// declares them: every call returns ncclResult_t (ncclSuccess = 0).
struct nccl_unique_id {
  char internal[128];  // NCCL_UNIQUE_ID_BYTES
};
using nccl_comm = struct nccl_comm_st*;
constexpr int nccl_float32 = 7;  // ncclFloat32 (= ncclFloat)
constexpr int nccl_sum = 0;      // ncclSum

struct nccl_api {
  int (*get_version)(int*) = nullptr;                                    // ncclGetVersion
  int (*get_unique_id)(nccl_unique_id*) = nullptr;                       // ncclGetUniqueId
  int (*comm_init_rank)(nccl_comm*, int, nccl_unique_id, int) = nullptr; // ncclCommInitRank
  int (*comm_destroy)(nccl_comm) = nullptr;                              // ncclCommDestroy
  int (*all_reduce)(const void*, void*, size_t, int, int, nccl_comm,
                    cu_stream) = nullptr;                                // ncclAllReduce
  int (*group_start)() = nullptr;                                        // ncclGroupStart
  int (*group_end)() = nullptr;                                          // ncclGroupEnd
  const char* (*error_string)(int) = nullptr;                            // ncclGetErrorString
};

/// The loaded NCCL; the library stays loaded while this lives.
struct nccl_library {
  void* handle = nullptr;
  nccl_api api;
  int version = 0;
  ~nccl_library() {
    if (handle)
      ::dlclose(handle);
  }
};

/// dlopen()s `path` and resolves the entry points; "" and the library, or
/// why not.
std::unique_ptr<nccl_library> load_nccl(const std::string& path, std::string& why) {
  auto lib = std::make_unique<nccl_library>();
  lib->handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib->handle) {
    const char* e = ::dlerror();
    why = "dlopen " + path + ": " + (e ? e : "failed");
    return nullptr;
  }
  const char* missing = nullptr;
  auto bind = [&](const char* name, auto& fn) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(lib->handle, name));
    if (!fn && !missing)
      missing = name;
  };
  auto& a = lib->api;
  bind("ncclGetVersion", a.get_version);
  bind("ncclGetUniqueId", a.get_unique_id);
  bind("ncclCommInitRank", a.comm_init_rank);
  bind("ncclCommDestroy", a.comm_destroy);
  bind("ncclAllReduce", a.all_reduce);
  bind("ncclGroupStart", a.group_start);
  bind("ncclGroupEnd", a.group_end);
  bind("ncclGetErrorString", a.error_string);
  if (missing) {
    why = path + " has no " + missing + ": not an NCCL library";
    return nullptr;
  }
  a.get_version(&lib->version);
  return lib;
}

/// One GPU of this rank: its context, stream, buffers (send, receive, and
/// `ref` holding its fill value) and communicator.
struct rank_gpu {
  cu_context ctx = nullptr;
  cu_stream stream = nullptr;
  cu_deviceptr send = 0, recv = 0, ref = 0;
  nccl_comm comm = nullptr;
  float value = 0;
};

/// The NCCL sweep on this rank's GPUs; `meet` placed them in the group.
/// Errors name the failing call.
class nccl_sweep {
public:
  nccl_sweep(const cuda_driver& cuda, const nccl_library& nccl, const meeting& meet)
    : cu_(cuda), nccl_(nccl), meet_(meet) {}
  nccl_sweep(const nccl_sweep&) = delete;
  nccl_sweep& operator=(const nccl_sweep&) = delete;

  ~nccl_sweep() {
    const auto& a = cu_.api();
    for (auto& g : gpus_) {
      a.ctx_set_current(g.ctx);
      if (g.comm)
        nccl_.api.comm_destroy(g.comm);
      for (auto p : {g.send, g.recv, g.ref})
        if (p)
          a.mem_free(p);
      if (g.stream)
        a.stream_destroy(g.stream);
    }
    if (host_)
      a.mem_free_host(host_);
  }

  /// Contexts, streams, buffers of `max_bytes` (the ref filled with the
  /// GPU's global rank + 1) and one communicator per GPU.
  std::string set_up(const std::vector<cuda_gpu>& gpus, uint64_t max_bytes) {
    const auto& a = cu_.api();
    for (size_t i = 0; i < gpus.size(); ++i) {
      rank_gpu g;
      g.value = static_cast<float>(meet_.first_gpu + static_cast<int>(i) + 1);
      if (auto rc = a.primary_ctx_retain(&g.ctx, gpus[i].device))
        return cu_.describe("cuDevicePrimaryCtxRetain", rc);
      a.ctx_set_current(g.ctx);
      // Pinned memory needs a current context (CUDA_ERROR_INVALID_CONTEXT
      // without one, as an H200 answered); with unified addressing every
      // context can copy from it.
      if (!host_) {
        if (auto rc = a.mem_alloc_host(&host_, max_bytes))
          return cu_.describe("cuMemAllocHost_v2", rc);
      }
      if (auto rc = a.stream_create(&g.stream, cu_stream_non_blocking))
        return cu_.describe("cuStreamCreate", rc);
      for (auto* p : {&g.send, &g.recv, &g.ref})
        if (auto rc = a.mem_alloc(p, max_bytes))
          return cu_.describe("cuMemAlloc_v2", rc);
      std::fill_n(static_cast<float*>(host_), max_bytes / sizeof(float), g.value);
      if (auto rc = a.memcpy_htod_async(g.ref, host_, max_bytes, g.stream))
        return cu_.describe("cuMemcpyHtoDAsync_v2", rc);
      if (auto rc = a.stream_synchronize(g.stream))
        return cu_.describe("cuStreamSynchronize", rc);
      gpus_.push_back(g);
    }
    // Every rank's ncclGetUniqueId reads NCCL_COMM_ID (set by the caller),
    // so all get the same id; several GPUs of one process join inside one
    // group (NCCL: "ncclCommInitRank ... inside ncclGroupStart/End").
    nccl_unique_id id{};
    if (auto rc = nccl_.api.get_unique_id(&id))
      return nccl_error("ncclGetUniqueId", rc);
    nccl_.api.group_start();
    for (size_t i = 0; i < gpus_.size(); ++i) {
      a.ctx_set_current(gpus_[i].ctx);
      if (auto rc = nccl_.api.comm_init_rank(&gpus_[i].comm, meet_.total_gpus, id,
                                             meet_.first_gpu + static_cast<int>(i))) {
        nccl_.api.group_end();
        return nccl_error("ncclCommInitRank", rc);
      }
    }
    if (auto rc = nccl_.api.group_end())
      return nccl_error("ncclGroupEnd (ncclCommInitRank)", rc);
    return {};
  }

  /// One size, out-of-place then in-place: each checked once, then timed.
  std::string measure(uint64_t bytes, all_reduce_timing& row) {
    row.bytes = bytes;
    for (bool in_place : {false, true}) {
      int64_t wrong = 0;
      double us = 0;
      if (auto err = fill(bytes, in_place); !err.empty())
        return err;
      if (auto err = launch(bytes, in_place, 1); !err.empty())
        return err;
      if (auto err = count_wrong(bytes, wrong); !err.empty())
        return err;
      if (auto err = launch(bytes, in_place, warmup_iters - 1); !err.empty())
        return err;
      auto t0 = clock_type::now();
      if (auto err = launch(bytes, in_place, timed_iters); !err.empty())
        return err;
      us = std::chrono::duration<double, std::micro>(clock_type::now() - t0).count()
           / timed_iters;
      double algbw = us > 0 ? static_cast<double>(bytes) / 1e3 / us : 0;  // GB/s
      double busbw = all_reduce_busbw(algbw, meet_.total_gpus);
      (in_place ? row.in_place_time_us : row.time_us) = us;
      (in_place ? row.in_place_algbw_gbs : row.algbw_gbs) = algbw;
      (in_place ? row.in_place_busbw_gbs : row.busbw_gbs) = busbw;
      (in_place ? row.in_place_wrong : row.wrong) = wrong;
    }
    return {};
  }

private:
  std::string nccl_error(const char* call, int rc) const {
    return std::string{call} + " returned " + std::to_string(rc) + " ("
           + (nccl_.api.error_string ? nccl_.api.error_string(rc) : "?") + ")";
  }

  /// The input of every GPU (send, or recv in place) set from its ref.
  std::string fill(uint64_t bytes, bool in_place) {
    const auto& a = cu_.api();
    for (auto& g : gpus_) {
      a.ctx_set_current(g.ctx);
      if (auto rc = a.memcpy_dtod_async(in_place ? g.recv : g.send, g.ref, bytes, g.stream))
        return cu_.describe("cuMemcpyDtoDAsync_v2", rc);
    }
    return sync_all();
  }

  /// `iters` all-reduces of `bytes` on every GPU (one NCCL group each), then
  /// waits for them.
  std::string launch(uint64_t bytes, bool in_place, int iters) {
    const auto& a = cu_.api();
    for (int it = 0; it < iters; ++it) {
      nccl_.api.group_start();
      for (auto& g : gpus_) {
        a.ctx_set_current(g.ctx);
        const void* in = reinterpret_cast<const void*>(in_place ? g.recv : g.send);
        if (auto rc = nccl_.api.all_reduce(in, reinterpret_cast<void*>(g.recv),
                                           bytes / sizeof(float), nccl_float32, nccl_sum, g.comm,
                                           g.stream)) {
          nccl_.api.group_end();
          return nccl_error("ncclAllReduce", rc);
        }
      }
      if (auto rc = nccl_.api.group_end())
        return nccl_error("ncclGroupEnd (ncclAllReduce)", rc);
    }
    return sync_all();
  }

  /// Every GPU's result against the sum of every GPU's value: 1 + 2 + ... +
  /// total (exact in float for any group this size).
  std::string count_wrong(uint64_t bytes, int64_t& wrong) {
    const auto& a = cu_.api();
    const double n = meet_.total_gpus;
    const float expected = static_cast<float>(n * (n + 1) / 2);
    for (auto& g : gpus_) {
      a.ctx_set_current(g.ctx);
      if (auto rc = a.memcpy_dtoh_async(host_, g.recv, bytes, g.stream))
        return cu_.describe("cuMemcpyDtoHAsync_v2", rc);
      if (auto rc = a.stream_synchronize(g.stream))
        return cu_.describe("cuStreamSynchronize", rc);
      const float* v = static_cast<const float*>(host_);
      wrong += std::count_if(v, v + bytes / sizeof(float),
                             [&](float x) { return x != expected; });
    }
    return {};
  }

  std::string sync_all() {
    const auto& a = cu_.api();
    for (auto& g : gpus_) {
      a.ctx_set_current(g.ctx);
      if (auto rc = a.stream_synchronize(g.stream))
        return cu_.describe("cuStreamSynchronize", rc);
    }
    return {};
  }

  const cuda_driver& cu_;
  const nccl_library& nccl_;
  const meeting& meet_;
  std::vector<rank_gpu> gpus_;
  void* host_ = nullptr;
};

// ---- the stand-in ----------------------------------------------------------

/// The fixture's GPU count and all-reduce bus bandwidth (GB/s; default 100).
struct stand_in_fixture {
  int gpus = 0;
  double busbw_gbs = 100;
};

stand_in_fixture read_stand_in(const char* path) {
  stand_in_fixture out;
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  auto doc = nlohmann::json::parse(text.str(), nullptr, false);
  if (doc.is_discarded() || !doc.is_object())
    return out;
  if (auto g = doc.find("gpus"); g != doc.end() && g->is_array())
    out.gpus = static_cast<int>(g->size());
  if (auto b = doc.find("allreduce_busbw_gbs"); b != doc.end() && b->is_number())
    out.busbw_gbs = b->get<double>();
  return out;
}

/// The stand-in's row: the bytes at the fixture's bus bandwidth, but never
/// under 20 us (latency), so small sizes run slower and large ones at the
/// figure.
all_reduce_timing stand_in_row(uint64_t bytes, double busbw_gbs, int total_gpus) {
  all_reduce_timing r;
  r.bytes = bytes;
  double factor = total_gpus > 1 ? 2.0 * (total_gpus - 1) / total_gpus : 1;
  double algbw_peak = busbw_gbs / factor;
  r.time_us = std::max(20.0, static_cast<double>(bytes) / 1e3 / algbw_peak);
  r.algbw_gbs = static_cast<double>(bytes) / 1e3 / r.time_us;
  r.busbw_gbs = all_reduce_busbw(r.algbw_gbs, total_gpus);
  r.in_place_time_us = r.time_us;
  r.in_place_algbw_gbs = r.algbw_gbs;
  r.in_place_busbw_gbs = r.busbw_gbs;
  return r;
}

std::string fixed(double v, int decimals) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  return buf;
}

}  // namespace

double all_reduce_busbw(double algbw_gbs, int ranks) {
  return ranks > 1 ? algbw_gbs * 2.0 * (ranks - 1) / ranks : 0.0;
}

caf::expected<std::pair<std::string, uint16_t>> parse_root(std::string_view text) {
  auto colon = text.rfind(':');
  auto bad = [&](const std::string& why) {
    return caf::make_error(ec::invalid_request,
                           "--root '" + std::string{text} + "' " + why + " (HOST:PORT)");
  };
  if (colon == std::string_view::npos)
    return bad("has no port");
  auto port = parse_u64(text.substr(colon + 1));
  if (!port || *port == 0 || *port > 65534)
    return bad("has no port from 1 to 65534");
  std::string host{text.substr(0, colon)};
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  return std::make_pair(host, static_cast<uint16_t>(*port));
}

std::vector<uint64_t> all_reduce_sizes(uint64_t min_bytes, uint64_t max_bytes) {
  std::vector<uint64_t> out;
  uint64_t lo = std::max<uint64_t>(4, min_bytes / 4 * 4);
  uint64_t hi = max_bytes / 4 * 4;
  for (uint64_t s = lo; s <= hi && s > 0; s *= 2)
    out.push_back(s);
  return out;
}

std::string format_all_reduce_table(const std::vector<all_reduce_timing>& rows, int gpus,
                                    uint64_t min_bytes, uint64_t max_bytes) {
  std::ostringstream t;
  t << "# nThread 1 nGpus " << gpus << " minBytes " << min_bytes << " maxBytes " << max_bytes
    << " step: 2(factor) warmup iters: " << warmup_iters << " iters: " << timed_iters
    << " agg iters: 1 validation: 1 graph: 0\n#\n"
    << "#                                                              out-of-place        "
       "               in-place          \n"
    << "#       size         count      type   redop    root     time   algbw   busbw #wrong"
       "     time   algbw   busbw #wrong\n"
    << "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)       "
       "     (us)  (GB/s)  (GB/s)       \n";
  double sum = 0;
  int64_t wrong = 0;
  char line[256];
  for (const auto& r : rows) {
    std::snprintf(line, sizeof(line),
                  "%12llu  %12llu  %8s  %6s  %6d  %7s  %6s  %6s  %5lld  %7s  %6s  %6s  %5lld\n",
                  static_cast<unsigned long long>(r.bytes),
                  static_cast<unsigned long long>(r.bytes / 4), "float", "sum", -1,
                  fixed(r.time_us, 2).c_str(), fixed(r.algbw_gbs, 2).c_str(),
                  fixed(r.busbw_gbs, 2).c_str(), static_cast<long long>(r.wrong),
                  fixed(r.in_place_time_us, 2).c_str(), fixed(r.in_place_algbw_gbs, 2).c_str(),
                  fixed(r.in_place_busbw_gbs, 2).c_str(), static_cast<long long>(r.in_place_wrong));
    t << line;
    sum += r.busbw_gbs + r.in_place_busbw_gbs;
    wrong += std::max<int64_t>(0, r.wrong) + std::max<int64_t>(0, r.in_place_wrong);
  }
  t << "# Out of bounds values : " << wrong << (wrong == 0 ? " OK" : " FAILED") << "\n"
    << "# Avg bus bandwidth    : " << fixed(rows.empty() ? 0 : sum / (2.0 * rows.size()), 4)
    << " \n#\n";
  return t.str();
}

void add_all_reduce_rows(check_result& r, const std::vector<all_reduce_timing>& rows,
                         uint64_t max_bytes) {
  for (const auto& row : rows) {
    auto size = std::to_string(row.bytes);
    r.add_measurement({"busbw", size, "", row.busbw_gbs, "GB/s", "", verdict::pass});
    r.add_measurement({"busbw_in_place", size, "", row.in_place_busbw_gbs, "GB/s", "",
                       verdict::pass});
    r.add_measurement({"algbw", size, "", row.algbw_gbs, "GB/s", "", verdict::pass});
    for (bool in_place : {false, true}) {
      auto wrong = in_place ? row.in_place_wrong : row.wrong;
      r.add_measurement({in_place ? "wrong_in_place" : "wrong", size, "",
                         static_cast<double>(wrong), "values", "== 0",
                         wrong > 0 ? verdict::fail : verdict::pass});
      if (wrong > 0)
        r.add_finding(verdict::fail, "",
                      std::to_string(wrong) + " wrong value(s) at " + size + " B ("
                        + (in_place ? "in-place" : "out-of-place") + ")",
                      "Run the pairs and DCGM on these machines: a wrong sum is a faulty GPU, "
                      "NIC or link, not a slow one.");
    }
  }
  r.add_measurement({"max_bytes", "", "", static_cast<double>(max_bytes), "B", "",
                     verdict::pass});
}

check_result run_all_reduce(const check_options& o) {
  auto start = clock_type::now();
  check_result out;
  out.check = "allreduce";
  const int rank = o.allreduce_rank, ranks = o.allreduce_ranks;
  auto root = parse_root(o.allreduce_root);
  if (!root || ranks < 1 || rank < 0 || rank >= ranks || (rank > 0 && root->first.empty())) {
    out.add_finding(verdict::fail, "",
                    !root ? render_error(root.error())
                          : "--rank " + std::to_string(rank) + " --ranks " + std::to_string(ranks)
                              + " --root '" + o.allreduce_root
                              + "' do not make a rank of a group (0 <= rank < ranks; ranks "
                                "other than 0 name the root's host)",
                    "Run it as the validation does: astraeus-check allreduce --rank R --ranks N "
                    "--root HOST:PORT");
    return finish_result(std::move(out), start, "");
  }
  const char* fixture = std::getenv(stand_in_env);
  const bool stand_in = fixture && *fixture;
  // What this rank can drive, before it meets the others: a rank that
  // cannot run tells the root, so no rank waits for it in NCCL.
  std::string unready;
  std::unique_ptr<cuda_driver> cuda;
  std::vector<cuda_gpu> gpus;
  std::unique_ptr<nccl_library> nccl;
  int gpu_count = 0;
  stand_in_fixture fx;
  bool skip = false;
  if (stand_in) {
    fx = read_stand_in(fixture);
    gpu_count = o.allreduce_gpus > 0 ? std::min(o.allreduce_gpus, fx.gpus) : fx.gpus;
    if (gpu_count == 0)
      unready = "the stand-in fixture " + std::string{fixture} + " lists no GPU";
  } else {
    std::string why;
    nccl = load_nccl(o.nccl_lib, why);
    if (!nccl) {
      unready = "NCCL cannot be loaded: " + why;
      skip = true;
    } else {
      auto driver = cuda_driver::load(o.cuda_lib);
      auto listed = driver ? (*driver)->gpus() : caf::expected<std::vector<cuda_gpu>>{
                                                   driver.error()};
      if (!listed || listed->empty()) {
        unready = "the CUDA driver gives no GPU: "
                  + (listed ? std::string{"none listed"} : render_error(listed.error()));
      } else {
        cuda = std::move(*driver);
        gpus = std::move(*listed);
        if (o.allreduce_gpus > 0 && o.allreduce_gpus < static_cast<int>(gpus.size()))
          gpus.resize(static_cast<size_t>(o.allreduce_gpus));
        gpu_count = static_cast<int>(gpus.size());
      }
    }
  }
  for (auto& c : unready)
    if (c == '\n')
      c = ' ';
  meeting meet = rank == 0 ? meet_as_root(root->second, ranks, gpu_count, unready,
                                          o.allreduce_connect_timeout)
                           : meet_as_peer(root->first, root->second, rank, ranks, gpu_count,
                                          unready, o.allreduce_connect_timeout);
  if (skip) {
    out.result = verdict::skipped;
    out.summary = unready + ". NCCL is not in Debian: install NVIDIA's libnccl2 (from NVIDIA's "
                            "CUDA apt repository) on every machine of the group";
    return finish_result(std::move(out), start, "");
  }
  if (!meet.go) {
    // A rank that cannot drive its GPUs is no network problem (a ninth
    // trial read "check that every machine reaches :18600" beside "rank 0
    // cannot run: ... dlopen libcuda.so.1").
    // A rank that never came may never have started: its machine's agent
    // gone (a re-check's group kept a machine whose agent had stopped).
    const bool cannot_run = meet.why.find(" cannot run: ") != std::string::npos;
    const bool missing = meet.why.find("(missing: rank ") != std::string::npos;
    out.add_finding(verdict::fail, "", meet.why,
                    cannot_run
                      ? std::string{"Make the named rank's machine able to run it: the NVIDIA "
                                    "driver's libcuda.so.1 and NCCL (libnccl2) installed and its "
                                    "GPUs answering (`astra gpus --machine NAME`), then run the "
                                    "network suite again."}
                      : (missing ? std::string{"Check that the missing rank's machine is Up and "
                                               "connected (`astra machines`) and that its run "
                                               "started (`astra runs`); then "}
                                 : std::string{"Check "})
                          + "that every machine of the group reaches " + o.allreduce_root
                          + " (TCP ports " + std::to_string(root->second) + " and "
                          + std::to_string(root->second + 1)
                          + ") and read each rank's log (`astra logs RUN`).");
    return finish_result(std::move(out), start, "");
  }
  const std::string over = "rank " + std::to_string(rank) + " of " + std::to_string(ranks)
                           + " (" + std::to_string(gpu_count) + " of "
                           + std::to_string(meet.total_gpus) + " GPUs)";
  auto sizes = all_reduce_sizes(o.allreduce_min_bytes, o.allreduce_max_bytes);
  std::vector<all_reduce_timing> rows;
  if (stand_in) {
    for (auto s : sizes)
      rows.push_back(stand_in_row(s, fx.busbw_gbs, meet.total_gpus));
  } else {
    // NCCL's bootstrap root: rank 0's address (as the others reach it; rank
    // 0 given no host uses MASTER_ADDR, its machine's address) at PORT+1.
    std::string host = root->first;
    if (host.empty())
      if (const char* m = std::getenv("MASTER_ADDR"); m && *m)
        host = m;
    if (host.empty())
      host = "0.0.0.0";
    auto comm_id = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":"
                   + std::to_string(root->second + 1);
    ::setenv("NCCL_COMM_ID", comm_id.c_str(), 1);
    nccl_sweep sweep{*cuda, *nccl, meet};
    std::string err = sweep.set_up(gpus, sizes.empty() ? 4 : sizes.back());
    for (size_t i = 0; err.empty() && i < sizes.size(); ++i) {
      all_reduce_timing row;
      err = sweep.measure(sizes[i], row);
      if (err.empty())
        rows.push_back(row);
    }
    if (!err.empty()) {
      out.add_finding(verdict::fail, "", over + ": " + err + " (NCCL_COMM_ID " + comm_id + ")",
                      "Read the rank's log (`astra logs RUN`; NCCL_DEBUG=INFO says more); "
                      "check that every machine of the group reaches " + comm_id + ".");
    }
  }
  if (rank == 0) {
    std::cout << format_all_reduce_table(rows, meet.total_gpus, o.allreduce_min_bytes,
                                         o.allreduce_max_bytes)
              << std::flush;
    add_all_reduce_rows(out, rows, sizes.empty() ? 0 : sizes.back());
  } else {
    for (const auto& row : rows)
      if (row.wrong > 0 || row.in_place_wrong > 0)
        out.add_finding(verdict::fail, "",
                        over + ": " + std::to_string(std::max(row.wrong, row.in_place_wrong))
                          + " wrong value(s) at " + std::to_string(row.bytes) + " B",
                        "Run the pairs and DCGM on this machine: a wrong sum is a faulty GPU, "
                        "NIC or link, not a slow one.");
  }
  std::string pass = "all-reduce " + over;
  if (!rows.empty() && meet.total_gpus == 1)
    // Recorded on one H200: the in-place "all-reduce" of one GPU is a no-op
    // that ran at 943,824 GB/s; nccl-tests' factor 2(n-1)/n makes it 0.
    pass += ": its sums are right, but one GPU crosses no link, so there is no bus bandwidth "
            "to measure (run it over 2 or more GPUs)";
  else if (!rows.empty())
    pass += ": " + fixed(std::max(rows.back().busbw_gbs, rows.back().in_place_busbw_gbs), 1)
            + " GB/s bus bandwidth at " + std::to_string(rows.back().bytes) + " B";
  if (stand_in)
    pass += " (stand-in)";
  return finish_result(std::move(out), start, pass);
}

}  // namespace astraeus::validation
