// The web console (issue 19, "The console") in a real browser: a controller
// with the API on loopback, the agent of gpu-01 on the NVML stand-in
// (test/fixtures/nvml/console.json: five GPUs busy with memory Astraeus did
// not assign -> Used outside Astraeus, one at 90 °C -> At risk, two idle),
// an Xid 79 on the kernel-log FIFO (-> Faulty) and a run holding the last
// idle GPU (-> held, below 5 % busy: striped). Headless Chromium (Debian's
// `chromium`, installed by `bin/setup --tests`) loads the pages and the test
// reads what a person would see from the DOM it prints. Skipped, saying
// why, where chromium is not installed.
//
// ASTRAEUS_CONSOLE_SCREENSHOT=<file.png> also saves the GPUs page there (how
// docs/console-gpus.png was made).

#include <cerrno>
#include <csignal>
#include <cstring>
#include <functional>
#include <regex>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "integration/cluster_harness.hpp"

using namespace astraeus;
using namespace astraeus::itest;
using json = nlohmann::json;

namespace {

const std::string machine_name = "gpu-01";
const std::string fixture = std::string{ASTRAEUS_SOURCE_DIR} + "/test/fixtures/nvml/console.json";
const std::string dgx_root = std::string{ASTRAEUS_SOURCE_DIR} + "/test/fixtures/hosts/dgx-h100";
const std::string stand_in_ctk = ASTRAEUS_SOURCE_DIR "/test/fixtures/nvidia-ctk/nvidia-ctk.sh";
const std::string base = "/api/v1/orgs/default/clusters/default";
const std::string uuid_faulty = "GPU-1b7e4c2a-93d5-4f6e-8a21-6c0d9e8f7b32";   // 3a, Xid 79
const std::string uuid_held = "GPU-7d6c5b4a-3f2e-41d0-9c8b-a7f6e5d4c376";     // ba, idle run
const std::string uuid_at_risk = "GPU-e9f8d7c6-b5a4-4392-8170-6f5e4d3c2b87";  // db, 90 °C
const std::string uuid_foreign = "GPU-5f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b";  // 18, busy

/// The browser: Debian's chromium; empty when it is not installed.
std::string chromium_path() {
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (::access(p, X_OK) == 0)
      return p;
  return {};
}

/// The opening tag of the element with `attr`="`value`" in `dom`; "" if none.
std::string tag_with(const std::string& dom, const std::string& attr, const std::string& value) {
  auto at = dom.find(attr + "=\"" + value + "\"");
  if (at == std::string::npos)
    return {};
  auto open = dom.rfind('<', at);
  auto close = dom.find('>', at);
  return dom.substr(open, close - open + 1);
}

class Console : public ::testing::Test {
protected:
  void SetUp() override {
    port_ = free_port();
    ASSERT_NE(port_, 0);
    fifo_ = dir_ / "kmsg";
    auto why = make_kmsg_fifo(fifo_);
    ASSERT_TRUE(why.empty()) << why;
  }

  void TearDown() override {
    end_processes(procs_, HasFailure());
  }

  fs::path keys() const {
    return keys_dir_of((dir_ / "controller").string());
  }

  /// The controller, its API in plain HTTP on 127.0.0.1 (as `astraeus dev`).
  bool start_controller() {
    auto c = start_api_controller(procs_, dir_.path(), port_, {}, true);
    ctl_ = c.proc;
    api_port_ = c.api_port;
    owner_ = c.owner_token;
    return api_port_ != 0;
  }

  /// gpu-01: the stand-in GPUs, the kernel log from the FIFO, host-process workers.
  void start_agent() {
    std::vector<std::string> argv{
      program("astraeus-agent"), "--controller", "127.0.0.1:" + std::to_string(port_),
      "--data-dir", (dir_ / "agent").string(), "--name", machine_name, "--report-interval",
      "200ms", "--host-root", dgx_root, "--set",
      std::string{"gpu.nvml_library="} + ASTRAEUS_NVML_STAND_IN, "--set",
      "kmsg.path=" + fifo_.string(), "--set", "workers.runtime=process", "--set",
      "workers.poll_interval=50ms", "--set", "stop.grace=1s", "--set",
      "cdi.static_dir=" + (dir_ / "etc-cdi").string(), "--set",
      "cdi.dynamic_dir=" + (dir_ / "run-cdi").string(), "--set", "cdi.nvidia_ctk=" + stand_in_ctk};
    auto enrol = enrol_flags(port_, dir_.path(), machine_name);
    ASSERT_FALSE(enrol.empty());
    argv.insert(argv.end(), enrol.begin(), enrol.end());
    spawn_kept(procs_, dir_.path(), "agent", argv, {"ASTRAEUS_NVML_FIXTURE=" + fixture});
  }

  /// Writes `text` to the kernel-log FIFO once the agent reads it.
  bool kmsg(const std::string& text) {
    return wait_until(
      [&] {
        int fd = ::open(fifo_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0)
          return false;
        auto n = ::write(fd, text.data(), text.size());
        ::close(fd);
        return n == static_cast<ssize_t>(text.size());
      },
      10s);
  }

  command_result astra(std::vector<std::string> args) {
    std::vector<std::string> argv{program("astra"), "--addr", "127.0.0.1:" + std::to_string(port_),
                                  "--token-file", (keys() / "owner-token").string()};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_command(argv, dir_.path());
  }

  /// The API's view of one GPU (null when it cannot be read).
  json gpu(const std::string& uuid) {
    httplib::Client c{"127.0.0.1", api_port_};
    c.set_bearer_token_auth(owner_);
    auto r = c.Get(base + "/gpus/" + uuid);
    if (!r || r->status != 200)
      return nullptr;
    return json::parse(r->body, nullptr, false);
  }

  /// Whether the API says gpu-01 is cordoned.
  bool cordoned() {
    httplib::Client c{"127.0.0.1", api_port_};
    c.set_bearer_token_auth(owner_);
    auto r = c.Get(base + "/nodes/" + machine_name);
    return r && r->status == 200 && json::parse(r->body, nullptr, false).value("cordoned", false);
  }

  bool wait_gpu(const std::string& uuid, const std::function<bool(const json&)>& pred) {
    return wait_until(
      [&] {
        auto g = gpu(uuid);
        return g.is_object() && pred(g);
      },
      15s, 100ms);
  }

  /// The page at `path` (+ "#token=<owner>&" and `fragment`) as headless
  /// Chromium leaves it once its requests are answered: the DOM it prints.
  std::string browse(const std::string& path, const std::string& fragment = {},
                     const std::string& screenshot = {}) {
    // A fragment of "-" signs nobody in (the sign-in page).
    auto url = "http://127.0.0.1:" + std::to_string(api_port_) + path
               + (fragment == "-" ? "" : "#token=" + owner_)
               + (fragment.empty() || fragment == "-" ? "" : "&" + fragment);
    std::vector<std::string> argv{chromium_, "--headless", "--disable-gpu", "--no-sandbox",
                                  "--no-first-run", "--disable-extensions",
                                  "--user-data-dir=" + (dir_ / "chromium").string(),
                                  "--virtual-time-budget=5000", "--window-size=1100,640"};
    argv.push_back(screenshot.empty() ? "--dump-dom" : "--screenshot=" + screenshot);
    argv.push_back(url);
    auto res = run_command(argv, dir_.path(), 60s);
    EXPECT_EQ(res.rc, 0) << "chromium failed on " << path << ":\n" << res.err;
    return res.out;
  }

  temp_dir dir_{"astraeus-console"};
  fs::path fifo_;
  uint16_t port_ = 0;
  uint16_t api_port_ = 0;
  std::string owner_;
  std::string chromium_ = chromium_path();
  process* ctl_ = nullptr;
  std::vector<std::unique_ptr<process>> procs_;
};

} // namespace

TEST_F(Console, GpusMachinesAndClearFaultInHeadlessChromium) {
  if (chromium_.empty())
    GTEST_SKIP() << "chromium is not installed (bin/setup --tests installs Debian's chromium)";
  ASSERT_TRUE(start_controller()) << (ctl_ ? ctl_->err() : "");
  start_agent();
  ASSERT_TRUE(wait_gpu(uuid_at_risk, [](const json& g) { return g.value("health", "") == "AtRisk"; }))
    << gpu(uuid_at_risk).dump(2);
  // Xid 79 on 3a: Faulty. Then a run takes the one healthy free GPU (ba).
  ASSERT_TRUE(kmsg("4,500,1500000,-;NVRM: Xid (PCI:0000:3a:00): 79, pid=1234, name=python3, "
                   "GPU has fallen off the bus.\n"));
  ASSERT_TRUE(wait_gpu(uuid_faulty, [](const json& g) { return g.value("health", "") == "Faulty"; }));
  auto run = astra({"run", "--name", "idle", "--gpus", "1", "--", "sleep", "600"});
  ASSERT_EQ(run.rc, 0) << run.err;
  ASSERT_TRUE(wait_gpu(uuid_held, [](const json& g) { return !g.value("holder", "").empty(); }))
    << gpu(uuid_held).dump(2);
  auto holder = gpu(uuid_held).value("holder", "");
  // `astra machines` counts it (drove-gpu-scheduling.md: "free and used GPU
  // counts ... The UI and APIs show these counts").
  auto listed = astra({"machines"});
  EXPECT_TRUE(contains(listed.out, "), 1 held")) << listed.out;

  // `/` sends a person to Compute -> GPUs; unknown console files are 404.
  httplib::Client c{"127.0.0.1", api_port_};
  auto r = c.Get("/");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 302);
  EXPECT_EQ(r->get_header_value("Location"), "/o/default/compute/gpus");
  EXPECT_EQ(c.Get("/console/static/nope.js")->status, 404);
  auto js = c.Get("/console/static/console.js");
  EXPECT_EQ(js->status, 200);
  EXPECT_TRUE(contains(js->get_header_value("Content-Type"), "javascript"));
  EXPECT_TRUE(contains(js->get_header_value("Content-Security-Policy"), "default-src 'self'"));
  // Each header once (a new-user trial saw the installer's two added to
  // every console answer as well).
  EXPECT_EQ(js->get_header_value_count("Cache-Control"), 1u);
  EXPECT_EQ(js->get_header_value_count("X-Content-Type-Options"), 1u);
  // Without a token: the sign-in form, nothing of the cluster.
  auto dom = browse("/o/default/compute/gpus", "-");
  EXPECT_TRUE(contains(dom, "id=\"sign-in\"") && !contains(dom, "data-uuid")) << dom;

  // Compute -> GPUs: one square per GPU, by health first, then holder.
  dom = browse("/o/default/compute/gpus");
  auto faulty = tag_with(dom, "data-uuid", uuid_faulty);
  EXPECT_TRUE(contains(faulty, "health-faulty") && contains(faulty, "Xid 79 fault")) << faulty;
  auto held = tag_with(dom, "data-uuid", uuid_held);
  EXPECT_TRUE(contains(held, "health-healthy held striped")) << held;
  EXPECT_TRUE(contains(held, "data-holder=\"" + holder + "\"") && contains(held, "held by " + holder))
    << held;
  auto at_risk = tag_with(dom, "data-uuid", uuid_at_risk);
  EXPECT_TRUE(contains(at_risk, "health-atrisk") && contains(at_risk, "At risk")) << at_risk;
  EXPECT_FALSE(contains(at_risk, "striped"));
  auto foreign = tag_with(dom, "data-uuid", uuid_foreign);
  EXPECT_TRUE(contains(foreign, "health-foreign") && contains(foreign, "Used outside Astraeus"))
    << foreign;
  EXPECT_TRUE(contains(dom, "data-machine=\"gpu-01\"")) << dom;
  EXPECT_TRUE(contains(dom, "id=\"legend\"") && contains(dom, "below 5 % busy")) << dom;
  EXPECT_TRUE(contains(dom, "8 GPUs on 1 machine")) << dom;
  if (const char* shot = std::getenv("ASTRAEUS_CONSOLE_SCREENSHOT"); shot && *shot)
    browse("/o/default/compute/gpus", {}, shot);
  // In a workspace: the GPUs it can see (gpus.md), those of machines
  // carrying its granted labels; gpu-01 carries no pool=a100.
  auto created = astra({"workspace", "create", "vision", "--grant", "pool=a100"});
  ASSERT_EQ(created.rc, 0) << created.err;
  dom = browse("/o/default/w/vision/compute/gpus");
  EXPECT_TRUE(contains(dom, "0 GPUs on 0 machines in ")) << dom;
  EXPECT_TRUE(contains(dom, "that workspace vision can see (machines labelled pool=a100)")) << dom;
  EXPECT_FALSE(contains(dom, "data-uuid")) << dom;
  EXPECT_TRUE(contains(dom, "No GPU is on a machine labelled pool=a100")) << dom;
  dom = browse("/o/default/w/default/compute/gpus");
  EXPECT_TRUE(contains(dom, "8 GPUs on 1 machine")) << dom;

  // Machines: state, pool and labels, GPUs, conditions, Cordon for the owner.
  dom = browse("/o/default/machines");
  auto row = tag_with(dom, "id", "machine-gpu-01");
  EXPECT_TRUE(contains(row, "data-state=\"Up\"")) << dom;
  EXPECT_TRUE(contains(dom, "8 × NVIDIA H100 80GB HBM3")) << dom;
  EXPECT_TRUE(contains(dom, "GPUs healthy: GPUFault")) << dom;
  EXPECT_TRUE(contains(dom, "id=\"cordon-gpu-01\"")) << dom;
  // Its Cordon button, clicked (#do=<button id>), then Uncordon.
  dom = browse("/o/default/machines", "do=cordon-gpu-01");
  EXPECT_TRUE(contains(tag_with(dom, "id", "machine-gpu-01"), "data-cordoned=\"true\"")) << dom;
  EXPECT_TRUE(contains(dom, "id=\"uncordon-gpu-01\"")) << dom;
  EXPECT_TRUE(cordoned()) << "Cordon did not cordon gpu-01";
  dom = browse("/o/default/machines", "do=uncordon-gpu-01");
  EXPECT_TRUE(contains(dom, "id=\"cordon-gpu-01\"")) << dom;
  EXPECT_FALSE(cordoned()) << "Uncordon did not uncordon gpu-01";

  // The faulty GPU's page: model, holder, its latched fault, Clear fault.
  auto page = "/o/default/machines/gpu-01/gpus/" + uuid_faulty;
  dom = browse(page);
  EXPECT_TRUE(contains(dom, "NVIDIA H100 80GB HBM3")) << dom;
  EXPECT_TRUE(contains(dom, "Faulty: Xid 79 fault")) << dom;
  EXPECT_TRUE(contains(dom, "class=\"latch\"")) << dom;
  EXPECT_TRUE(contains(dom, "id=\"clear-fault\"")) << dom;
  // Its NVLink links, one row each (console.json: link 3 down, link 5 with
  // 12 CRC errors).
  EXPECT_TRUE(contains(dom, "18 links, 1 down, 12 CRC errors")) << dom;
  EXPECT_TRUE(contains(tag_with(dom, "id", "nvlink-3"), "data-active=\"false\"")) << dom;
  EXPECT_TRUE(contains(tag_with(dom, "id", "nvlink-4"), "data-active=\"true\"")) << dom;
  EXPECT_TRUE(contains(dom, "switch 0008:00:00.0") || contains(dom, "switch 00000008:00:00.0"))
    << dom;
  // Its history as SVG line charts (issue 19).
  EXPECT_TRUE(contains(dom, "id=\"gpu-history\"") && contains(dom, "id=\"chart-temperature\"")
              && contains(dom, "<polyline"))
    << dom;
  // Clear fault, clicked, with the confirmation given by the address.
  dom = browse(page, "do=clear-fault");
  EXPECT_TRUE(contains(dom, "Fault cleared.")) << dom;
  EXPECT_TRUE(wait_gpu(uuid_faulty, [](const json& g) { return g.value("health", "") == "Healthy"; }))
    << gpu(uuid_faulty).dump(2);
  // And the GPUs page shows it Healthy now.
  dom = browse("/o/default/compute/gpus");
  EXPECT_TRUE(contains(tag_with(dom, "data-uuid", uuid_faulty), "health-healthy")) << dom;
  // An unknown console page is the app's "No such page".
  dom = browse("/o/default/nowhere");
  EXPECT_TRUE(contains(dom, "No such page")) << dom;

  // Issue 20: the machine's data location (none chosen: said so), then an
  // admin's choice through the API.
  dom = browse("/o/default/machines");
  EXPECT_TRUE(contains(dom, "Choose where to keep data on gpu-01")) << dom;
  {
    httplib::Client a{"127.0.0.1", api_port_};
    a.set_bearer_token_auth(owner_);
    auto put = a.Put(base + "/nodes/gpu-01/data-location", R"({"path": "/mnt/nvme0/astraeus"})",
                     "application/json");
    ASSERT_TRUE(put);
    EXPECT_EQ(put->status, 200) << put->body;
    auto bad = a.Put(base + "/nodes/gpu-01/data-location", R"({"path": "data"})",
                     "application/json");
    ASSERT_TRUE(bad);
    EXPECT_EQ(bad->status, 400) << bad->body;
    EXPECT_TRUE(contains(bad->body, "data location 'data' is not an absolute path")) << bad->body;
  }
  dom = browse("/o/default/machines");
  EXPECT_TRUE(contains(tag_with(dom, "id", "data-location-gpu-01"), "data-location"));
  EXPECT_TRUE(contains(dom, "/mnt/nvme0/astraeus (admin)")) << dom;
  // The machine's own page (bring-up step 5: "open the machine for the
  // same, beside its ports and their cabling"), linked from its row.
  EXPECT_TRUE(contains(dom, "href=\"/o/default/machines/gpu-01\"")) << dom;
  auto page_of_machine = browse("/o/default/machines/gpu-01");
  EXPECT_TRUE(contains(page_of_machine, "<h1>gpu-01</h1>")) << page_of_machine;
  EXPECT_TRUE(contains(page_of_machine, "Ports and their cabling")) << page_of_machine;
  EXPECT_TRUE(contains(page_of_machine, "id=\"machine-gpus\"")) << page_of_machine;
  // Each GPU with its health and why (the Faulty one was cleared above).
  EXPECT_TRUE(contains(page_of_machine, "data-health=\"Foreign\"")) << page_of_machine;
  EXPECT_TRUE(contains(page_of_machine, "in use outside Astraeus")) << page_of_machine;
  EXPECT_TRUE(std::regex_search(page_of_machine, std::regex{R"(Findings \(\d+\))"}))
    << page_of_machine;
  // An admin chooses it on the row (machines.md): a path field and Set.
  EXPECT_TRUE(contains(dom, "id=\"data-location-path-gpu-01\"")) << dom;
  EXPECT_TRUE(contains(dom, "id=\"set-data-location-gpu-01\"")) << dom;

  // Issue 21: Compute -> Validation, the Cluster Report as a person sees it.
  ASSERT_EQ(astra({"label", "gpu-01", "pool=h100"}).rc, 0);
  json node;
  EXPECT_TRUE(wait_until(
    [&] {
      httplib::Client c{"127.0.0.1", api_port_};
      c.set_bearer_token_auth(owner_);
      auto r = c.Get(base + "/nodes");
      node = r ? json::parse(r->body, nullptr, false) : json{};
      for (const auto& m : node.value("machines", json::array()))
        if (m.value("labels", json::object()).value("pool", "") == "h100")
          return true;
      return false;
    },
    15s, 100ms))
    << "GET /nodes never showed gpu-01's pool label: " << node.dump();
  const std::string validation = "/o/default/w/default/validation";
  dom = browse(validation + "?cluster=default");
  EXPECT_TRUE(contains(dom, "<h1>Validation</h1>")) << dom;
  EXPECT_TRUE(contains(dom, "id=\"report\"")) << dom;
  for (const char* h : {"MACHINE", "STATE", "VERDICT", "QUICK", "DCGM", "BURN", "COPIES", "DISK",
                        "PAIRS", "ALL-REDUCE"})
    EXPECT_TRUE(contains(dom, std::string{"<th>"} + h + "</th>")) << h;
  EXPECT_TRUE(contains(dom, "id=\"report-gpu-01\"")) << dom;
  EXPECT_TRUE(std::regex_search(dom, std::regex{R"(What to fix \(\d+\))"})) << dom;
  EXPECT_TRUE(contains(dom, "No machine is accepted yet.")) << dom;
  EXPECT_TRUE(contains(dom, "id=\"run-acceptance\"")) << dom;
  EXPECT_TRUE(contains(dom, "id=\"suite\"") && contains(dom, "id=\"start\"")) << dom;
  EXPECT_TRUE(contains(dom, "Printable page") && contains(dom, "id=\"download-json\"")) << dom;
  EXPECT_TRUE(contains(dom, "id=\"policy-h100\"")
              && contains(dom, "New machines must pass acceptance"))
    << dom;
  // Run acceptance, clicked: a validation starts on the pool and is shown.
  dom = browse(validation + "?cluster=default", "do=run-acceptance");
  EXPECT_TRUE(std::regex_search(dom, std::regex{"validation val-\\d{8}-[0-9a-f]{6}: acceptance "
                                                "on gpu-01"}))
    << dom;
  EXPECT_TRUE(contains(dom, "id=\"validation\"")) << dom;
  // Cancel validation, clicked on its page (the address is the confirmation):
  // it ends Cancelled, naming who cancelled it.
  std::smatch started;
  ASSERT_TRUE(std::regex_search(dom, started, std::regex{"validation (val-\\d{8}-[0-9a-f]{6}): "}))
    << dom;
  const std::string id = started[1];
  dom = browse(validation + "?cluster=default&validation=" + id, "do=cancel-validation");
  EXPECT_TRUE(contains(dom, "validation " + id + " cancelled.")) << dom;
  EXPECT_TRUE(contains(dom, "data-state=\"Cancelled\"")) << dom;
  EXPECT_TRUE(contains(dom, "id=\"cancelled\"")) << dom;
  // Policies: Save, clicked.
  dom = browse(validation + "?cluster=default", "do=save-policy-h100");
  EXPECT_TRUE(contains(dom, "pool h100: policy saved")) << dom;
  // Issue 12: Compute -> Topology: the findings (none on the DGX fixture's
  // eight 400 Gb/s InfiniBand ports), its fabrics, and what was not checked.
  dom = browse("/o/default/compute/topology");
  EXPECT_TRUE(contains(dom, "<h1>Topology</h1>")) << dom;
  EXPECT_TRUE(contains(dom, "Findings (0)")) << dom;
  EXPECT_TRUE(contains(dom, "id=\"fabrics\"") && contains(dom, "gpu-01")) << dom;
  EXPECT_TRUE(contains(dom, "id=\"not-checked\"")) << dom;
  // Runs, the run's page (the address `astra run` prints) with its worker
  // and log, Audit, and Add machine's install command.
  dom = browse("/o/default/jobs");
  EXPECT_TRUE(contains(dom, "<h1>Runs</h1>") && contains(dom, "id=\"run-idle\"")) << dom;
  EXPECT_TRUE(contains(dom, "href=\"/o/default/w/default/jobs/default/idle\"")) << dom;
  dom = browse("/o/default/w/default/jobs/default/idle");
  EXPECT_TRUE(contains(dom, "<h1>idle</h1>")) << dom;
  EXPECT_TRUE(contains(dom, "id=\"worker-0\"") && contains(dom, "id=\"logs\"")) << dom;
  dom = browse("/o/default/audit");
  EXPECT_TRUE(contains(dom, "<h1>Audit</h1>") && contains(dom, "create join token")) << dom;
  dom = browse("/o/default/machines", "do=add-machine,get-install-command");
  EXPECT_TRUE(contains(dom, "id=\"install-command\"") && contains(dom, "install.sh")) << dom;
  EXPECT_TRUE(contains(dom, "Waiting for the machine to connect")) << dom;
  // The run's worker (a host process) ends with the run, not with the test.
  httplib::Client owner{"127.0.0.1", api_port_};
  owner.set_bearer_token_auth(owner_);
  auto stopped = owner.Delete(base + "/runs/idle");
  EXPECT_TRUE(stopped && stopped->status == 200) << (stopped ? stopped->body : "no answer");
}
