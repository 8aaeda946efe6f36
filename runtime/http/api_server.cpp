#include "runtime/http/api_server.hpp"

#include <sys/socket.h>

#include <atomic>
#include <thread>

#include <spdlog/spdlog.h>

#include "messages/error.hpp"
#include "messages/json.hpp"
#include "runtime/host/sysfs_text.hpp"
#include "runtime/http/api_routes_internal.hpp"
#include "runtime/http/console_assets.hpp"
#include "runtime/http/install_server.hpp"

namespace astraeus {

caf::expected<std::pair<std::string, uint16_t>> parse_host_port(const std::string& text,
                                                                const std::string& key) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    return caf::make_error(ec::invalid_config,
                           key + ": '" + text + "' is not HOST:PORT (e.g. 0.0.0.0:7451)");
  auto host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  auto port_text = text.substr(colon + 1);
  uint32_t port = 0;
  for (char c : port_text) {
    if (c < '0' || c > '9' || port > 65535)
      return caf::make_error(ec::invalid_config,
                             key + ": '" + port_text + "' is not a port (0-65535)");
    port = port * 10 + static_cast<uint32_t>(c - '0');
  }
  if (port > 65535)
    return caf::make_error(ec::invalid_config,
                           key + ": '" + port_text + "' is not a port (0-65535)");
  return std::pair{host, static_cast<uint16_t>(port)};
}

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

caf::error api_server_config::validate() const {
  if (plain_http && !is_loopback_host(host))
    return caf::make_error(ec::invalid_config,
                           "api.plain_http: plain HTTP is served on a loopback "
                           "api.listen only (127.0.0.1, ::1, localhost), not on "
                             + host + "; use HTTPS there");
  if (!plain_http && (certificate_path.empty() || private_key_path.empty()))
    return caf::make_error(ec::invalid_config,
                           "api.certificate: HTTPS needs a certificate and a key");
  if (organization.empty() || cluster.empty())
    return caf::make_error(ec::invalid_config,
                           "api.organization and cluster.name must not be empty");
  if (threads == 0)
    return caf::make_error(ec::invalid_config, "api.threads: at least 1");
  return caf::none;
}

namespace http {

const std::string& api_context::param(const char* name) const {
  static const std::string none;
  for (const auto& [k, v] : params)
    if (k == name)
      return v;
  return none;
}

void reply_json(httplib::Response& res, int status, std::string json) {
  res.status = status;
  json += '\n';
  // With "; charset=utf-8" httplib never compresses it: a client asking for
  // brotli must not make every answer cost the controller milliseconds.
  res.set_content(std::move(json), "application/json; charset=utf-8");
}

void reply_error(httplib::Response& res, int status, const std::string& code,
                 const std::string& message) {
  v1::Error e;
  // The cluster's requests say "invalid_request" for a missing thing and a
  // name in use too (http_status_of tells them apart by the words): a
  // script reading the code gets what the status says.
  if (code == "invalid_request" && status == 404)
    e.set_code(api_error_code("not_found"));
  else if (code == "invalid_request" && status == 409)
    e.set_code(api_error_code("already_exists"));
  else
    e.set_code(api_error_code(code));
  // Messages quote what the client sent, which may not be UTF-8.
  e.set_message(to_valid_utf8(message));
  reply_json(res, status, message_to_json(e, false));
}

void reply_error(httplib::Response& res, const caf::error& err) {
  v1::Error e;
  if (err.category() == caf::atom("astraeus"))
    e.set_code(to_string(static_cast<ec>(err.code())));
  else
    e.set_code(caf::to_string(err.category()));
  e.set_message(render_error(err));
  reply_error(res, http_status_of(e), e.code(), e.message());
}

const std::vector<std::string>& cluster_prefixes() {
  static const std::vector<std::string> all{"/api/v1/orgs/{org}/clusters/{cluster}",
                                            "/v1/organizations/{org}/clusters/{cluster}"};
  return all;
}

namespace {

/// A route split into segments, matched without regular expressions.
struct compiled_route {
  const api_route* route;
  std::vector<std::string> segments;  ///< "{name}" captures one segment
};

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < path.size()) {
    while (i < path.size() && path[i] == '/')
      ++i;
    auto j = path.find('/', i);
    if (j == std::string::npos)
      j = path.size();
    if (j > i)
      out.push_back(path.substr(i, j - i));
    i = j;
  }
  return out;
}

std::vector<compiled_route> compile_routes() {
  std::vector<compiled_route> out;
  for (const auto& r : api_routes()) {
    if (!r.cluster_scoped) {
      out.push_back({&r, split_path(r.path)});
      continue;
    }
    for (const auto& prefix : cluster_prefixes())
      out.push_back({&r, split_path(prefix + r.path)});
  }
  return out;
}

bool match(const compiled_route& r, const std::vector<std::string>& segs,
           std::vector<std::pair<std::string, std::string>>& params) {
  if (r.segments.size() != segs.size())
    return false;
  params.clear();
  for (size_t i = 0; i < segs.size(); ++i) {
    const auto& p = r.segments[i];
    if (p.size() > 2 && p.front() == '{' && p.back() == '}')
      params.emplace_back(p.substr(1, p.size() - 2), segs[i]);
    else if (p != segs[i])
      return false;
  }
  return true;
}

/// The bearer token of `req`; empty when none.
std::string bearer_token(const httplib::Request& req) {
  auto h = req.get_header_value("Authorization");
  static const std::string scheme = "Bearer ";
  if (h.size() <= scheme.size())
    return {};
  for (size_t i = 0; i < scheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(h[i]))
        != std::tolower(static_cast<unsigned char>(scheme[i])))
      return {};
  auto token = h.substr(scheme.size());
  while (!token.empty() && (token.back() == ' ' || token.back() == '\r'))
    token.pop_back();
  return token;
}

} // namespace

} // namespace http

struct api_server::impl {
  api_server_config cfg;
  std::shared_ptr<api_backend> backend;
  std::unique_ptr<httplib::Server> server;
  std::vector<http::compiled_route> routes;
  http::installer_site installer;
  std::thread thread;
  uint16_t port = 0;
  std::atomic<bool> stopped{false};

  void dispatch(const httplib::Request& req, httplib::Response& res);
  bool authorize(http::api_context& ctx, const http::api_route& route);
};

bool api_server::impl::authorize(http::api_context& ctx, const http::api_route& route) {
  std::string path = route.path;
  bool open = path == "/api/v1/openapi.json" || (path == "/metrics" && cfg.metrics_open);
  if (open)
    return true;
  auto token = http::bearer_token(ctx.req);
  if (token.empty()) {
    http::reply_error(ctx.res, 401, "unauthenticated",
                      "no API token: send the header 'Authorization: Bearer <API token>' "
                      "(`astra api-tokens create` mints one)");
    ctx.res.set_header("WWW-Authenticate", "Bearer");
    return false;
  }
  auto who = backend->authenticate(token);
  if (!who) {
    http::reply_error(ctx.res, who.error());
    if (ctx.res.status == 401)
      ctx.res.set_header("WWW-Authenticate", "Bearer error=\"invalid_token\"");
    return false;
  }
  ctx.caller = std::move(*who);
  return true;
}

void api_server::impl::dispatch(const httplib::Request& req, httplib::Response& res) {
  // The installer and the agent's releases, the console's pages and files;
  // everything else is the API's.
  if (http::serve_installer(req, res, installer))
    return;
  if (http::serve_console(req, res, cfg.organization, cfg.cluster, cfg.plain_http))
    return;
  auto segs = http::split_path(req.path);
  std::vector<std::pair<std::string, std::string>> params;
  const http::compiled_route* found = nullptr;
  bool other_method = false;
  std::string allow;  // the methods served at this path (a 405's Allow)
  for (const auto& r : routes) {
    if (!http::match(r, segs, params))
      continue;
    if (req.method != r.route->method && !(req.method == "HEAD" && std::string{r.route->method} == "GET")) {
      other_method = true;
      std::string m = r.route->method;
      if (allow.find(m) == std::string::npos)
        allow += (allow.empty() ? "" : ", ") + m;
      continue;
    }
    found = &r;
    break;
  }
  if (found == nullptr) {
    if (other_method) {
      // RFC 9110 15.5.6: a 405 names the methods the path serves.
      if (allow.find("GET") != std::string::npos)
        allow += ", HEAD";
      res.set_header("Allow", allow);
      http::reply_error(res, 405, "method_not_allowed",
                        req.method + " is not served at " + req.path + " (it serves " + allow
                          + "; see /api/v1/openapi.json)");
    }
    else
      http::reply_error(res, 404, "no_route",
                        "no route " + req.method + " " + req.path
                          + " (see /api/v1/openapi.json)");
    return;
  }
  http::api_context ctx{req, res, params, {}, cfg, *backend, {}};
  if (found->route->cluster_scoped) {
    const auto& org = ctx.param("org");
    const auto& cluster = ctx.param("cluster");
    if (org != cfg.organization) {
      http::reply_error(res, 404, "not_found",
                        "no organisation named " + org + " (this controller serves "
                          + cfg.organization + ")");
      return;
    }
    if (cluster != cfg.cluster) {
      http::reply_error(res, 404, "not_found",
                        "no cluster named " + cluster + " in organisation " + org
                          + " (this controller serves " + cfg.cluster + ")");
      return;
    }
    ctx.prefix = (segs[0] == "v1" ? "/v1/organizations/" : "/api/v1/orgs/") + org
                 + "/clusters/" + cluster;
  }
  if (!authorize(ctx, *found->route))
    return;
  if (const char* takes = found->route->query)
    for (const auto& [name, value] : req.params) {
      const std::string list = std::string{","} + takes + ",";
      if (list.find("," + name + ",") != std::string::npos)
        continue;
      http::reply_error(res, 400, "invalid_request",
                        "unknown query parameter '" + name + "': " + req.method + " "
                          + found->route->path
                          + (*takes ? std::string{" takes "} + takes : std::string{" takes none"}));
      return;
    }
  try {
    found->route->handler(ctx);
  } catch (const std::exception& e) {
    spdlog::error("api: {} {}: {}", req.method, req.path, e.what());
    http::reply_error(res, 500, "internal", std::string{"internal error: "} + e.what());
  }
}

api_server::api_server(std::unique_ptr<impl> p) : impl_(std::move(p)) {
}

api_server::~api_server() {
  stop();
}

uint16_t api_server::port() const {
  return impl_->port;
}

const char* api_server::scheme() const {
  return impl_->cfg.plain_http ? "http" : "https";
}

void api_server::stop() {
  if (impl_->stopped.exchange(true))
    return;
  impl_->server->stop();
  if (impl_->thread.joinable())
    impl_->thread.join();
}

caf::expected<std::unique_ptr<api_server>>
api_server::start(api_server_config cfg, std::shared_ptr<api_backend> backend) {
  if (auto err = cfg.validate())
    return err;
  auto p = std::make_unique<impl>();
  p->cfg = std::move(cfg);
  p->backend = std::move(backend);
  p->routes = http::compile_routes();
  p->installer.releases_dir = p->cfg.releases_dir;
  p->installer.gate_key_hex = p->cfg.gate_key_hex;
  p->installer.gate_address = p->cfg.gate_address;
  p->installer.organization = p->cfg.organization;
  p->installer.scheme = p->cfg.plain_http ? "http" : "https";
  p->installer.curl_pin = p->cfg.curl_pin;
  p->installer.advertise_url = p->cfg.advertise_url;
  if (p->cfg.plain_http) {
    p->server = std::make_unique<httplib::Server>();
  } else {
    auto ssl = std::make_unique<httplib::SSLServer>(p->cfg.certificate_path.c_str(),
                                                    p->cfg.private_key_path.c_str());
    if (!ssl->is_valid())
      return caf::make_error(ec::invalid_config,
                             "api.certificate: cannot use " + p->cfg.certificate_path
                               + " and " + p->cfg.private_key_path);
    p->server = std::move(ssl);
  }
  auto& srv = *p->server;
  auto threads = p->cfg.threads;
  srv.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  srv.set_payload_max_length(p->cfg.body_cap_bytes);
  srv.set_keep_alive_max_count(100000);
  // Headers and body go out in separate writes: without TCP_NODELAY a
  // keep-alive answer waits ~40 ms for the client's delayed ACK.
  srv.set_tcp_nodelay(true);
  auto rt = p->cfg.read_timeout.count();
  srv.set_read_timeout(rt / 1000, (rt % 1000) * 1000);  // a slow client is cut off
  srv.set_keep_alive_timeout(std::max<int64_t>(1, std::min<int64_t>(5, rt / 1000)));
  srv.set_write_timeout(30, 0);
  auto* self = p.get();
  auto handler = [self](const httplib::Request& req, httplib::Response& res) {
    self->dispatch(req, res);
  };
  // A request without a body (the seeds' `curl -X POST URL`, no
  // Content-Length) is answered before httplib would try to read one, which
  // it refuses as a malformed request.
  srv.set_pre_routing_handler([self](const httplib::Request& req, httplib::Response& res) {
    // curl's -d (the README's `curl -d @spec.json`) labels a body
    // application/x-www-form-urlencoded. httplib answers such a body over
    // 8 KiB with 413 (a limit compiled into Debian's libcpp-httplib) before
    // any handler sees it, and parses a smaller one into query parameters.
    // This API takes JSON only: the label is replaced, so the body is read
    // as it is, within api.body_cap. httplib hands over its own request,
    // not a const object, as const.
    if (req.get_header_value("Content-Type").rfind("application/x-www-form-urlencoded", 0) == 0) {
      auto& headers = const_cast<httplib::Request&>(req).headers;
      headers.erase("Content-Type");
      headers.emplace("Content-Type", "application/json");
    }
    // httplib reads "abc" as 0 and "1x" as 1: a length that is not a whole
    // number of bytes is a malformed request, answered before any body is.
    if (req.has_header("Content-Length")) {
      auto length = req.get_header_value("Content-Length");
      if (length.empty() || length.find_first_not_of("0123456789") != std::string::npos) {
        http::reply_error(res, 400, "bad_request",
                          "Content-Length '" + length.substr(0, 32)
                            + "' is not a whole number of bytes");
        res.set_header("Connection", "close");
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    if (req.has_header("Content-Length") || req.has_header("Transfer-Encoding"))
      return httplib::Server::HandlerResponse::Unhandled;
    self->dispatch(req, res);
    return httplib::Server::HandlerResponse::Handled;
  });
  srv.Get(".*", handler);
  srv.Post(".*", handler);
  srv.Put(".*", handler);
  srv.Patch(".*", handler);
  srv.Delete(".*", handler);
  srv.Options(".*", handler);
  srv.set_error_handler([self](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty())
      return;
    // httplib answers a Content-Length it cannot read (-1, "abc") as too
    // large; it is a malformed request.
    auto length = req.get_header_value("Content-Length");
    if (res.status == 413 && !length.empty()
        && length.find_first_not_of("0123456789") != std::string::npos)
      http::reply_error(res, 400, "bad_request",
                        "Content-Length '" + length.substr(0, 32)
                          + "' is not a whole number of bytes");
    else if (res.status == 413)
      http::reply_error(res, 413, "too_large",
                        "request body over api.body_cap ("
                          + std::to_string(self->cfg.body_cap_bytes) + " bytes)");
    else if (res.status == 400)
      http::reply_error(res, 400, "bad_request", "malformed HTTP request");
    else if (res.status == 404)
      http::reply_error(res, 404, "no_route", "no route " + req.method + " " + req.path);
    else
      http::reply_error(res, res.status, "http_error", "HTTP status " + std::to_string(res.status));
  });
  // cpp-httplib's default sets SO_REUSEPORT, which lets a second controller
  // bind the same API port without an error and take half its requests.
  // SO_REUSEADDR only: a restart still rebinds past TIME_WAIT, a second
  // listener fails ("api.listen: cannot listen on …").
  srv.set_socket_options([](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  int port = 0;
  if (p->cfg.port == 0)
    port = srv.bind_to_any_port(p->cfg.host.c_str());
  else
    port = srv.bind_to_port(p->cfg.host.c_str(), p->cfg.port) ? p->cfg.port : -1;
  if (port <= 0)
    return caf::make_error(ec::invalid_config,
                           "api.listen: cannot listen on " + p->cfg.host + ":"
                             + std::to_string(p->cfg.port) + " (in use, or not an address "
                             "of this machine)");
  p->port = static_cast<uint16_t>(port);
  p->thread = std::thread{[self] { self->server->listen_after_bind(); }};
  return std::unique_ptr<api_server>{new api_server(std::move(p))};
}

} // namespace astraeus
