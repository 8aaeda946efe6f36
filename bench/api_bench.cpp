// The HTTP API at 5,000 simulated machines x 8 GPUs (issue 19, "Figures"):
// GET nodes and GET gpus pages with keep-alive (p99, requests/s), a full
// list, /metrics for 40,000 GPUs, and the view's rebuild. The server is the
// real one (runtime/http/api_server.hpp) on 127.0.0.1; its backend serves
// a view built from simulated machines, as the bridge serves the cluster's
// (a token check is a map lookup, as the bridge's remembered tokens are).
//
// Usage: api_bench [machines=5000] [clients=4] [seconds=5] [gpu page=100]
//                  [node page=10]
//        api_bench metrics [machines=5000] [scrapes=10]
//          /metrics alone, as Prometheus scrapes it: each scrape finds a view
//          with 10 % of the GPUs changed (the text is rendered afresh) and
//          streams the body away (a scraper parses as it reads).

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <httplib.h>

#include "bench/sim_cluster.hpp"
#include "messages/error.hpp"
#include "runtime/http/api_server.hpp"
#include "runtime/http/api_view.hpp"
#include "runtime/http/prometheus_metrics.hpp"

using namespace astraeus;
using clock_type = std::chrono::steady_clock;

namespace {

double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

struct sim {
  v1::MachineList machines;
  v1::GpuList gpus;
  v1::RunList runs;
};

sim make_cluster(size_t n) {
  std::mt19937_64 rng{42};
  sim s;
  for (size_t i = 0; i < n; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "gpu-%05zu", i);
    auto* m = s.machines.add_machines();
    m->set_name(name);
    m->set_state(v1::Machine::Up);
    m->set_schedulable(true);
    m->set_connected(true);
    m->set_machine_id(bench::uuid(rng));
    (*m->mutable_labels())["pool"] = i % 5 == 4 ? "a100" : "h100";
    (*m->mutable_labels())["topology.astraeus.io/rack"] = "r" + std::to_string(i / 32);
    auto* f = m->mutable_facts();
    f->set_hostname(name);
    f->set_kernel("6.1.0-18-amd64");
    f->set_os("Debian GNU/Linux 12 (bookworm)");
    f->mutable_cpu()->set_model("Intel(R) Xeon(R) Platinum 8480C");
    f->mutable_cpu()->set_logical_cpus(224);
    f->mutable_memory()->set_total_bytes(2ull << 40);
    f->mutable_gpus()->set_read_as("driver: healthy");
    for (uint32_t g = 0; g < 8; ++g) {
      auto gpu = bench::sim_h100_gpu(rng, g);
      *f->mutable_gpus()->add_gpus() = gpu;
      auto* v = s.gpus.add_gpus();
      v->set_machine(name);
      *v->mutable_gpu() = std::move(gpu);
      auto roll = rng() % 100;
      v->set_health(roll < 2 ? "Faulty" : roll < 3 ? "AtRisk" : "Healthy");
      if (rng() % 3 == 0)
        v->set_holder("train-" + std::to_string(i % 97) + "-" + std::to_string(g));
      v->set_machine_up(true);
    }
  }
  for (int r = 0; r < 200; ++r) {
    auto* run = s.runs.add_runs();
    run->mutable_spec()->set_name("run-" + std::to_string(r));
    run->set_state(r % 4 == 0 ? "Waiting" : "Running");
  }
  return s;
}

/// Serves a fixed view; tokens from a map.
class bench_backend final : public api_backend {
public:
  explicit bench_backend(std::shared_ptr<const api_view> v) : view_(std::move(v)) {
  }
  caf::expected<v1::Principal> authenticate(const std::string& token) override {
    std::lock_guard<std::mutex> guard{m_};
    if (token != "asta_bench")
      return caf::make_error(ec::unauthenticated, "unknown API token");
    v1::Principal p;
    p.set_name("bench");
    p.set_role("owner");
    return p;
  }
  v1::Response call(v1::Request) override {
    v1::Response r;
    r.mutable_error()->set_code("invalid_request");
    return r;
  }
  std::shared_ptr<const api_view> view() override {
    std::lock_guard<std::mutex> guard{m_};
    return view_;
  }
  std::shared_ptr<const api_view> wait_view(uint64_t, std::chrono::milliseconds) override {
    return view();
  }
  void refresh() override {
  }
  /// The view later requests see.
  void set_view(std::shared_ptr<const api_view> v) {
    std::lock_guard<std::mutex> guard{m_};
    view_ = std::move(v);
  }
  void forget_tokens() override {
  }

private:
  std::mutex m_;
  std::shared_ptr<const api_view> view_;
};

/// `clients` keep-alive clients GET `paths` in turn for `seconds`.
void load(uint16_t port, int clients, double seconds, const std::vector<std::string>& paths,
          const char* what) {
  std::vector<std::vector<double>> lat(static_cast<size_t>(clients));
  std::atomic<uint64_t> bytes{0}, errors{0};
  auto t0 = clock_type::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c)
    threads.emplace_back([&, c] {
      httplib::Client cli{"127.0.0.1", port};
      cli.set_keep_alive(true);
      cli.set_tcp_nodelay(true);
      cli.set_read_timeout(60, 0);
      cli.set_bearer_token_auth("asta_bench");
      size_t i = static_cast<size_t>(c);
      while (ms_since(t0) < seconds * 1000) {
        auto s = clock_type::now();
        auto r = cli.Get(paths[i++ % paths.size()]);
        lat[static_cast<size_t>(c)].push_back(ms_since(s));
        if (!r || r->status != 200)
          ++errors;
        else
          bytes += r->body.size();
      }
    });
  for (auto& t : threads)
    t.join();
  double wall = ms_since(t0) / 1000;
  std::vector<double> all;
  for (auto& l : lat)
    all.insert(all.end(), l.begin(), l.end());
  auto n = all.size();
  std::sort(all.begin(), all.end());
  auto p50 = bench::percentile(all, 50), p99 = bench::percentile(all, 99),
       p999 = bench::percentile(all, 99.9);
  std::printf("  %-34s n %6zu  %7.0f req/s  p50 %6.2f  p99 %6.2f  p99.9 %6.2f ms  "
              "%6.1f KiB/answer  errors %" PRIu64 "\n",
              what, n, static_cast<double>(n) / wall, p50, p99, p999,
              n ? static_cast<double>(bytes.load()) / static_cast<double>(n) / 1024 : 0.0,
              errors.load());
}

/// One scrape as Prometheus reads it (32 KiB reads, as Go's io.Copy): a
/// fresh connection, GET /metrics, the body read to the end and dropped.
/// Returns the bytes read (headers included); 0 on failure.
size_t scrape_metrics(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  size_t total = 0;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string req = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                            "Authorization: Bearer asta_bench\r\nConnection: close\r\n\r\n";
    if (::send(fd, req.data(), req.size(), 0) == static_cast<ssize_t>(req.size())) {
      std::vector<char> buf(32 * 1024);
      for (ssize_t n; (n = ::recv(fd, buf.data(), buf.size(), 0)) > 0;)
        total += static_cast<size_t>(n);
    }
  }
  ::close(fd);
  return total;
}

double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

/// `api_bench metrics`: render alone, then whole scrapes of fresh views.
int metrics_only(size_t machines, int scrapes) {
  std::printf("api_bench metrics: %zu machines x 8 GPUs, %d scrapes\n", machines, scrapes);
  auto s = make_cluster(machines);
  auto view = build_api_view(s.machines, s.gpus, s.runs, nullptr);
  std::vector<double> render, cpu;
  std::string text;
  for (int i = 0; i < 6; ++i) {
    text.clear(); // the capacity stays, as a view's recycled buffer
    auto t = clock_type::now();
    auto c = thread_cpu_ms();
    render_prometheus_metrics(text, *view);
    if (i > 0) { // the first one faults the buffer in
      render.push_back(ms_since(t));
      cpu.push_back(thread_cpu_ms() - c);
    }
  }
  std::sort(render.begin(), render.end());
  std::sort(cpu.begin(), cpu.end());
  std::printf("  render into a kept buffer, %zu GPUs: %.1f MiB, median %.1f ms (CPU %.1f ms)\n",
              view->gpus.size(), static_cast<double>(text.size()) / (1 << 20),
              render[render.size() / 2], cpu[cpu.size() / 2]);
  auto backend = std::make_shared<bench_backend>(view);
  api_server_config cfg;
  cfg.host = "127.0.0.1";
  cfg.port = 0;
  cfg.plain_http = true;
  cfg.threads = 4;
  auto server = api_server::start(cfg, backend);
  if (!server) {
    std::fprintf(stderr, "api_bench: %s\n", render_error(server.error()).c_str());
    return 1;
  }
  std::vector<double> scrape, again;
  auto changed = s;
  for (int i = 0; i < scrapes; ++i) {
    for (int g = i % 10; g < changed.gpus.gpus_size(); g += 10)
      changed.gpus.mutable_gpus(g)->mutable_gpu()->set_utilization_percent(i % 100);
    view = build_api_view(changed.machines, changed.gpus, changed.runs, view);
    backend->set_view(view);
    for (auto* into : {&scrape, &again}) {
      auto t = clock_type::now();
      auto bytes = scrape_metrics((*server)->port());
      into->push_back(ms_since(t));
      if (bytes < text.size() / 2) {
        std::fprintf(stderr, "api_bench: scrape %d failed (%zu bytes)\n", i, bytes);
        return 1;
      }
    }
  }
  std::sort(again.begin(), again.end());
  std::sort(scrape.begin(), scrape.end());
  std::printf("  scrape of a fresh view (render + send), %d scrapes: p50 %.1f ms, max %.1f ms\n",
              scrapes, bench::percentile(scrape, 50), scrape.back());
  std::printf("  second scrape of the same view (send only):   p50 %.1f ms, max %.1f ms\n",
              bench::percentile(again, 50), again.back());
  (*server)->stop();
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "metrics")
    return metrics_only(argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 5000,
                        argc > 3 ? std::atoi(argv[3]) : 10);
  size_t machines = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 5000;
  int clients = argc > 2 ? std::atoi(argv[2]) : 4;
  double seconds = argc > 3 ? std::atof(argv[3]) : 5;
  int limit = argc > 4 ? std::atoi(argv[4]) : 100;
  // A machine carries its GPUs' facts (~20 KiB each in JSON): smaller pages.
  int node_limit = argc > 5 ? std::atoi(argv[5]) : 10;
  std::printf("api_bench: %zu machines x 8 GPUs, %d keep-alive clients, %.0f s per load, "
              "pages of %d GPUs, %d machines\n", machines, clients, seconds, limit, node_limit);
  auto s = make_cluster(machines);
  auto t = clock_type::now();
  auto view = build_api_view(s.machines, s.gpus, s.runs, nullptr);
  std::printf("  view build, cold (every object rendered)  %8.1f ms\n", ms_since(t));
  t = clock_type::now();
  auto again = build_api_view(s.machines, s.gpus, s.runs, view);
  std::printf("  view build, nothing changed               %8.1f ms (same view: %s)\n",
              ms_since(t), again == view ? "yes" : "no");
  auto changed = s;
  for (int i = 0; i < changed.gpus.gpus_size(); i += 10)
    changed.gpus.mutable_gpus(i)->mutable_gpu()->set_utilization_percent(99.5);
  t = clock_type::now();
  auto next = build_api_view(changed.machines, changed.gpus, changed.runs, view);
  std::printf("  view build, 10 %% of GPUs changed          %8.1f ms (index %" PRIu64 ")\n",
              ms_since(t), next->index);
  t = clock_type::now();
  auto metrics_size = view->metrics().size();
  std::printf("  /metrics render, %zu GPUs                %8.1f ms (%.1f MiB)\n", view->gpus.size(),
              ms_since(t), static_cast<double>(metrics_size) / (1 << 20));

  auto backend = std::make_shared<bench_backend>(view);
  api_server_config cfg;
  cfg.host = "127.0.0.1";
  cfg.port = 0;
  cfg.plain_http = true;
  cfg.threads = static_cast<uint32_t>(std::max(8, clients + 2));
  auto server = api_server::start(cfg, backend);
  if (!server) {
    std::fprintf(stderr, "api_bench: %s\n", render_error(server.error()).c_str());
    return 1;
  }
  auto port = (*server)->port();
  const std::string base = "/api/v1/orgs/default/clusters/default";
  std::vector<std::string> node_pages, gpu_pages;
  std::mt19937_64 rng{7};
  for (int i = 0; i < 64; ++i) {
    auto m = view->machines[rng() % view->machines.size()].key;
    node_pages.push_back(base + "/nodes?limit=" + std::to_string(node_limit) + "&cursor=" + m);
    gpu_pages.push_back(base + "/gpus?limit=" + std::to_string(limit) + "&cursor="
                        + httplib::detail::encode_query_param(m));
  }
  // Every object rendered once (a console that has shown each page once);
  // the first read of an object renders it (timed here).
  t = clock_type::now();
  for (const auto& m : view->machines)
    (void) m.json();
  std::printf("  first read: render JSON of %zu machines    %8.1f ms\n", view->machines.size(),
              ms_since(t));
  t = clock_type::now();
  for (const auto& g : view->gpus)
    (void) g.json();
  std::printf("  first read: render JSON of %zu GPUs       %8.1f ms\n", view->gpus.size(),
              ms_since(t));
  load(port, clients, seconds, node_pages,
       ("GET nodes?limit=" + std::to_string(node_limit)).c_str());
  load(port, clients, seconds, gpu_pages, ("GET gpus?limit=" + std::to_string(limit)).c_str());
  std::vector<std::string> node_gpus;
  for (int i = 0; i < 64; ++i) {
    auto m = view->machines[rng() % view->machines.size()].key;
    node_gpus.push_back(base + "/nodes/" + m + "/gpus");
  }
  load(port, clients, seconds, node_gpus, "GET nodes/{node}/gpus (8 GPUs)");
  load(port, 1, seconds, {base + "/gpus"}, "GET gpus (all, one client)");
  std::vector<std::string> node_metrics;
  for (int i = 0; i < 64; ++i)
    node_metrics.push_back("/metrics?machine=" + view->machines[rng() % view->machines.size()].key);
  load(port, clients, seconds, node_metrics, "GET /metrics?machine= (8 GPUs)");
  load(port, 1, seconds, {"/metrics"}, "GET /metrics (all, one client)");
  (*server)->stop();
  return 0;
}
