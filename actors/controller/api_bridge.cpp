#include "actors/controller/api_bridge.hpp"

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>
#include <spdlog/spdlog.h>

#include "actors/controller/cluster_requests.hpp"
#include "actors/controller/controller.hpp"
#include "runtime/gate/secure_channel.hpp"
#include "runtime/gate/tokens.hpp"
#include "runtime/http/install_server.hpp"
#include "runtime/http/tls_certificate.hpp"
#include "messages/error.hpp"

namespace astraeus {

namespace {

/// Who the view's own requests come from: a member may read everything
/// the view holds.
v1::Principal view_reader() {
  v1::Principal p;
  p.set_name("api-view");
  p.set_role("member");
  return p;
}

} // namespace

api_bridge::api_bridge(caf::actor_system& sys, cluster_actor cluster, api_bridge_config cfg)
  : sys_(sys), cluster_(std::move(cluster)), cfg_(cfg) {
  thread_ = std::thread{[this] { run(); }};
}

api_bridge::~api_bridge() {
  {
    std::lock_guard<std::mutex> guard{mutex_};
    stopping_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable())
    thread_.join();
}

caf::expected<v1::Principal> api_bridge::authenticate(const std::string& token) {
  auto now = steady::now();
  {
    std::lock_guard<std::mutex> guard{tokens_mutex_};
    auto i = tokens_.find(token);
    if (i != tokens_.end() && now - i->second.second < cfg_.token_memory)
      return i->second.first;
  }
  caf::scoped_actor self{sys_};
  caf::expected<v1::Principal> out{caf::make_error(ec::timeout, "the cluster did not answer")};
  self->request(cluster_, cfg_.request_timeout, atom::login_v, token)
    .receive([&](v1::Principal& who) { out = std::move(who); },
             [&](caf::error& err) { out = std::move(err); });
  if (out) {
    std::lock_guard<std::mutex> guard{tokens_mutex_};
    if (tokens_.size() > 10000)
      tokens_.clear();
    tokens_[token] = {*out, now};
  }
  return out;
}

void api_bridge::forget_tokens() {
  std::lock_guard<std::mutex> guard{tokens_mutex_};
  tokens_.clear();
}

v1::Response api_bridge::call(v1::Request req) {
  auto id = req.id();
  caf::scoped_actor self{sys_};
  v1::Response out;
  self->request(cluster_, cfg_.request_timeout, std::move(req))
    .receive([&](v1::Response& resp) { out = std::move(resp); },
             [&](caf::error& err) { out = error_response(id, err); });
  return out;
}

std::shared_ptr<const api_view> api_bridge::view() {
  std::unique_lock<std::mutex> lock{mutex_};
  last_read_ = steady::now();
  if (!view_) {
    ++asked_;
    changed_.notify_all();
    changed_.wait(lock, [this] { return view_ != nullptr || stopping_; });
    if (!view_)
      return std::make_shared<const api_view>();
  }
  // A view older than its period is not served: the read waits for one
  // built after it asked (so a cordon made through `astra` a moment ago
  // shows on the next read, not the one after). Reads within the period
  // share the view built last.
  auto period = std::max<steady::duration>(cfg_.view_refresh, 4 * last_build_);
  if (last_read_ - built_at_ >= period) {
    auto ticket = ++asked_;
    changed_.notify_all();
    changed_.wait_for(lock, cfg_.request_timeout,
                      [&] { return stopping_ || done_ >= ticket; });
  }
  return view_;
}

std::shared_ptr<const api_view> api_bridge::wait_view(uint64_t index,
                                                      std::chrono::milliseconds wait) {
  auto current = view();
  std::unique_lock<std::mutex> lock{mutex_};
  ++watchers_;
  changed_.notify_all();
  changed_.wait_for(lock, wait, [&] { return stopping_ || (view_ && view_->index > index); });
  --watchers_;
  return view_ ? view_ : current;
}

void api_bridge::refresh() {
  std::unique_lock<std::mutex> lock{mutex_};
  auto ticket = ++asked_;
  changed_.notify_all();
  changed_.wait_for(lock, cfg_.request_timeout,
                    [&] { return stopping_ || done_ >= ticket; });
}

void api_bridge::run() {
  std::unique_lock<std::mutex> lock{mutex_};
  while (!stopping_) {
    auto now = steady::now();
    bool asked = asked_ > done_;
    // At most a fifth of the time rebuilding: a large cluster's view is
    // rebuilt less often than api.view_refresh asks.
    auto period = std::max<steady::duration>(cfg_.view_refresh, 4 * last_build_);
    bool read_recently = view_ && now - last_read_ < 2 * period;
    bool stale = view_ && now - built_at_ >= period;
    if (!asked && !(stale && (read_recently || watchers_ > 0))) {
      // Woken by a read, a refresh or a watch; else when the view goes stale.
      auto left = stale || !view_ ? period : period - (now - built_at_);
      changed_.wait_for(lock, left);
      continue;
    }
    auto ticket = asked_;
    lock.unlock();
    rebuild();
    lock.lock();
    done_ = std::max(done_, ticket);
    changed_.notify_all();
  }
}

void api_bridge::rebuild() {
  caf::scoped_actor self{sys_};
  auto ask = [&](v1::Request req) -> std::optional<v1::Response> {
    *req.mutable_caller() = view_reader();
    std::optional<v1::Response> out;
    self->request(cluster_, cfg_.request_timeout, std::move(req))
      .receive([&](v1::Response& resp) { out = std::move(resp); },
               [&](caf::error& err) {
                 spdlog::warn("api: the view's request got no answer: {}", render_error(err));
               });
    if (out && out->has_error()) {
      spdlog::warn("api: the view's request failed: {}", out->error().message());
      out.reset();
    }
    return out;
  };
  v1::Request machines, gpus, runs;
  machines.mutable_list_machines();
  gpus.mutable_list_gpus();
  runs.mutable_list_runs();
  auto started = steady::now();
  auto m = ask(std::move(machines));
  auto g = m ? ask(std::move(gpus)) : std::nullopt;
  auto r = g ? ask(std::move(runs)) : std::nullopt;
  if (!m || !g) {
    std::lock_guard<std::mutex> guard{mutex_};
    if (!view_) {
      view_ = std::make_shared<const api_view>();
      built_at_ = started;
    }
    return;
  }
  std::shared_ptr<const api_view> previous;
  {
    std::lock_guard<std::mutex> guard{mutex_};
    previous = view_;
  }
  auto next = build_api_view(std::move(*m->mutable_machines()), std::move(*g->mutable_gpus()),
                             r ? std::move(*r->mutable_runs()) : v1::RunList{}, previous);
  std::lock_guard<std::mutex> guard{mutex_};
  view_ = std::move(next);
  built_at_ = started;
  last_build_ = steady::now() - started;
}

namespace {

/// Where machines fetch install.sh from, for join tokens minted through the
/// gate (`astra tokens create`): api.advertise_url, else the API's scheme
/// and port with gate.advertise_address's host, else api.listen's host,
/// else 127.0.0.1.
install_site_info install_site_for(const ControllerConfig& cfg, const api_server_config& sc,
                                   uint16_t gate_port, uint16_t api_port) {
  install_site_info info;
  std::string host;
  if (!cfg.advertise_address.empty()) {
    auto hp = parse_host_port(cfg.advertise_address, "gate.advertise_address");
    if (hp)
      host = hp->first;
  }
  if (host.empty())
    host = sc.host == "0.0.0.0" || sc.host == "::" ? std::string{"127.0.0.1"} : sc.host;
  auto url_host = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  info.api_url = cfg.api_advertise_url.empty()
                   ? std::string{sc.plain_http ? "http" : "https"} + "://" + url_host + ":"
                       + std::to_string(api_port)
                   : cfg.api_advertise_url;
  while (!info.api_url.empty() && info.api_url.back() == '/')
    info.api_url.pop_back();
  info.gate_address = cfg.advertise_address.empty()
                        ? url_host + ":" + std::to_string(gate_port)
                        : cfg.advertise_address;
  info.organization = cfg.api_organization;
  info.curl_pin = sc.curl_pin;
  return info;
}

} // namespace

caf::expected<api_handles> start_api(caf::actor_system& sys, const controller_handles& ctl,
                                     const ControllerConfig& cfg) {
  api_handles out;
  if (cfg.api_listen == "off")
    return out;
  auto hp = parse_host_port(cfg.api_listen, "api.listen");
  if (!hp)
    return hp.error();
  api_server_config sc;
  sc.host = hp->first;
  sc.port = hp->second;
  sc.plain_http = cfg.api_plain_http;
  sc.organization = cfg.api_organization;
  sc.cluster = cfg.cluster_name;
  sc.gate_address = cfg.advertise_address.empty() ? ":" + std::to_string(ctl.port)
                                                  : cfg.advertise_address;
  sc.body_cap_bytes = cfg.api_body_cap_bytes;
  sc.threads = cfg.api_threads;
  sc.metrics_open = cfg.api_plain_http && is_loopback_host(sc.host);
  sc.request_timeout = cfg.request_timeout;
  sc.read_timeout = cfg.api_read_timeout;
  if (sc.plain_http && !is_loopback_host(sc.host))
    return sc.validate();
  if (!sc.plain_http) {
    auto cert = load_or_create_certificate(ctl.keys_dir, cfg.api_certificate,
                                           cfg.api_private_key, local_hostname());
    if (!cert)
      return cert.error();
    sc.certificate_path = cert->certificate_path;
    sc.private_key_path = cert->private_key_path;
    out.fingerprint = cert->fingerprint;
    sc.curl_pin = cert->curl_pin;
  }
  sc.gate_key_hex = ctl.identity->public_hex();
  sc.advertise_url = cfg.api_advertise_url;
  sc.releases_dir = cfg.releases_dir.empty() ? http::default_releases_dir() : cfg.releases_dir;
  if (http::release_files(sc.releases_dir).empty())
    spdlog::warn("controller: no agent releases in {} (releases.dir): install.sh cannot "
                 "install an agent until `ninja -C build agent-release` fills it",
                 sc.releases_dir);
  api_bridge_config bc;
  bc.request_timeout = cfg.request_timeout;
  bc.view_refresh = cfg.api_view_refresh;
  out.bridge = std::make_shared<api_bridge>(sys, ctl.cluster, bc);
  auto server = api_server::start(sc, out.bridge);
  if (!server)
    return server.error();
  out.server = std::move(*server);
  out.address = std::string{out.server->scheme()} + "://" + sc.host + ":"
                + std::to_string(out.server->port());
  if (ctl.install)
    ctl.install->set(install_site_for(cfg, sc, ctl.port, out.server->port()));
  return out;
}

} // namespace astraeus
