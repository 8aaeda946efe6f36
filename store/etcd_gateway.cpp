#include "store/etcd_gateway.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <mutex>

#include <httplib.h>

#include "messages/error.hpp"

namespace astraeus {

namespace {

constexpr char b64_chars[] =
  "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// "http://host:port" for "host:port"; kept as it is with a scheme.
std::string with_scheme(const std::string& endpoint) {
  if (endpoint.rfind("http://", 0) == 0 || endpoint.rfind("https://", 0) == 0)
    return endpoint;
  return "http://" + endpoint;
}

/// A JSON POST of `text` to `path` that records the answer's HTTP status
/// in `status` (which must outlive the request) as soon as it arrives.
httplib::Request post_request(const std::string& path, const std::string& text, int& status) {
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = text;
  req.set_header("Content-Type", "application/json");
  req.response_handler = [&status](const httplib::Response& r) {
    status = r.status;
    return true;
  };
  return req;
}

} // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    uint32_t n = (static_cast<uint8_t>(bytes[i]) << 16)
                 | (static_cast<uint8_t>(bytes[i + 1]) << 8)
                 | static_cast<uint8_t>(bytes[i + 2]);
    out += b64_chars[(n >> 18) & 63];
    out += b64_chars[(n >> 12) & 63];
    out += b64_chars[(n >> 6) & 63];
    out += b64_chars[n & 63];
  }
  if (auto rest = bytes.size() - i; rest > 0) {
    uint32_t n = static_cast<uint8_t>(bytes[i]) << 16;
    if (rest == 2)
      n |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    out += b64_chars[(n >> 18) & 63];
    out += b64_chars[(n >> 12) & 63];
    out += rest == 2 ? b64_chars[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
  std::array<int, 256> value;
  value.fill(-1);
  for (int i = 0; i < 64; ++i)
    value[static_cast<uint8_t>(b64_chars[i])] = i;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  uint32_t acc = 0;
  int bits = 0;
  size_t pad = 0;
  for (auto c : text) {
    if (c == '=') {
      ++pad;
      continue;
    }
    if (pad > 0)
      return std::nullopt;  // data after padding
    auto v = value[static_cast<uint8_t>(c)];
    if (v < 0)
      return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  if (pad > 2)
    return std::nullopt;
  return out;
}

std::string prefix_range_end(std::string_view prefix) {
  std::string end{prefix};
  while (!end.empty()) {
    auto last = static_cast<uint8_t>(end.back());
    if (last < 0xff) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

struct etcd_gateway::impl {
  std::vector<std::string> endpoints;
  std::chrono::milliseconds timeout;
  /// One connection per endpoint, used by one call at a time.
  struct lane {
    std::mutex mu;
    std::vector<std::unique_ptr<httplib::Client>> clients;
  };
  /// The pool: a call takes a free lane, or waits for the one it was dealt.
  std::vector<std::unique_ptr<lane>> lanes;
  std::atomic<size_t> next_lane{0};
  /// The endpoint that answered last.
  std::atomic<size_t> current{0};

  /// A lane for one call, locked: the first free one from a rotating start,
  /// else (all busy) the start's, once it is free.
  std::unique_lock<std::mutex> take_lane(lane*& out) {
    auto n = lanes.size();
    auto start = next_lane.fetch_add(1, std::memory_order_relaxed) % n;
    for (size_t k = 0; k < n; ++k) {
      auto* l = lanes[(start + k) % n].get();
      std::unique_lock<std::mutex> lock{l->mu, std::try_to_lock};
      if (lock.owns_lock()) {
        out = l;
        return lock;
      }
    }
    out = lanes[start].get();
    return std::unique_lock<std::mutex>{out->mu};
  }

  httplib::Client& client(lane& l, size_t i) {
    auto& c = l.clients[i];
    if (!c) {
      c = std::make_unique<httplib::Client>(with_scheme(endpoints[i]));
      auto secs = timeout.count() / 1000;
      auto usecs = (timeout.count() % 1000) * 1000;
      c->set_connection_timeout(secs, usecs);
      c->set_read_timeout(secs, usecs);
      c->set_write_timeout(secs, usecs);
      c->set_keep_alive(true);
      // cpp-httplib writes a request's headers and body separately: with
      // Nagle's algorithm the body waits for the server's delayed ACK
      // (~40 ms per call, measured), so every etcd call would take 40 ms.
      c->set_tcp_nodelay(true);
    }
    return *c;
  }

  /// etcd's error answer as our error.
  caf::error etcd_error(size_t i, const std::string& path, int status,
                        const std::string& body) const {
    std::string message;
    auto parsed = nlohmann::json::parse(body, nullptr, false);
    if (parsed.is_object()) {
      if (parsed.contains("message") && parsed["message"].is_string())
        message = parsed["message"].get<std::string>();
      else if (parsed.contains("error") && parsed["error"].is_string())
        message = parsed["error"].get<std::string>();
    }
    if (message.empty())
      message = "HTTP " + std::to_string(status) + ": " + body.substr(0, 200);
    return caf::make_error(ec::store_failure,
                           "etcd " + endpoints[i] + " " + path + ": " + message);
  }
};

etcd_gateway::etcd_gateway(std::vector<std::string> endpoints,
                           std::chrono::milliseconds timeout, size_t connections)
  : impl_(std::make_unique<impl>()) {
  impl_->endpoints = std::move(endpoints);
  impl_->timeout = timeout;
  for (size_t k = 0; k < std::max<size_t>(1, connections); ++k) {
    impl_->lanes.push_back(std::make_unique<impl::lane>());
    impl_->lanes.back()->clients.resize(impl_->endpoints.size());
  }
}

etcd_gateway::~etcd_gateway() = default;

size_t etcd_gateway::connections() const {
  return impl_->lanes.size();
}

caf::expected<nlohmann::json> etcd_gateway::call(const std::string& path,
                                                 const nlohmann::json& body) {
  if (impl_->endpoints.empty())
    return caf::make_error(ec::invalid_config, "etcd: no endpoint configured");
  impl::lane* lane = nullptr;
  auto lock = impl_->take_lane(lane);
  auto text = body.dump();
  std::string failures;
  auto n = impl_->endpoints.size();
  auto first = impl_->current.load();
  for (size_t k = 0; k < n; ++k) {
    auto i = (first + k) % n;
    // The body is collected as it arrives: etcd's error answers end with
    // an HTTP trailer (Grpc-Trailer-Content-Type) that cpp-httplib 0.11
    // cannot parse, so such a call "fails" after its whole body was read.
    int status = 0;
    std::string answer;
    auto req = post_request(path, text, status);
    req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
      answer.append(data, len);
      return true;
    };
    httplib::Response res;
    httplib::Error err = httplib::Error::Success;
    auto ok = impl_->client(*lane, i).send(req, res, err);
    if (!ok) {
      // A broken keep-alive connection is rebuilt on the next call.
      lane->clients[i].reset();
      if (status == 0 || answer.empty()) {
        if (!failures.empty())
          failures += "; ";
        failures += impl_->endpoints[i] + ": " + httplib::to_string(err);
        continue;
      }
    }
    impl_->current = i;
    if (status != 200)
      return impl_->etcd_error(i, path, status, answer);
    auto parsed = nlohmann::json::parse(answer, nullptr, false);
    if (parsed.is_discarded())
      return caf::make_error(ec::store_failure, "etcd " + impl_->endpoints[i] + " "
                                                  + path + ": answer is not JSON: "
                                                  + answer.substr(0, 200));
    return parsed;
  }
  return caf::make_error(ec::unreachable, "etcd: no endpoint answered (" + failures + ")");
}

caf::error etcd_gateway::stream(const std::string& path, const nlohmann::json& body,
                                const std::function<bool(const nlohmann::json&)>& on_result,
                                std::chrono::milliseconds idle) {
  auto first = impl_->current.load();
  auto n = impl_->endpoints.size();
  std::string failures;
  auto text = body.dump();
  for (size_t k = 0; k < n; ++k) {
    auto i = (first + k) % n;
    // Its own connection: a stream holds it for as long as it runs.
    httplib::Client cli{with_scheme(impl_->endpoints[i])};
    auto t = impl_->timeout;
    cli.set_connection_timeout(t.count() / 1000, (t.count() % 1000) * 1000);
    cli.set_write_timeout(t.count() / 1000, (t.count() % 1000) * 1000);
    cli.set_read_timeout(idle.count() / 1000, (idle.count() % 1000) * 1000);
    cli.set_tcp_nodelay(true);
    std::string pending;
    std::string error_body;
    bool got_any = false;
    bool stopped = false;
    int status = 0;
    auto req = post_request(path, text, status);
    req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
      got_any = true;
      if (status != 200) {
        error_body.append(data, len);
        return true;
      }
      pending.append(data, len);
      size_t pos;
      while ((pos = pending.find('\n')) != std::string::npos) {
        auto line = pending.substr(0, pos);
        pending.erase(0, pos + 1);
        if (line.find_first_not_of(" \r\t") == std::string::npos)
          continue;
        auto msg = nlohmann::json::parse(line, nullptr, false);
        if (msg.is_discarded())
          continue;
        if (msg.contains("error")) {
          error_body = line;
          stopped = true;
          return false;
        }
        if (msg.contains("result") && !on_result(msg["result"])) {
          stopped = true;
          return false;
        }
      }
      return true;
    };
    httplib::Response res;
    httplib::Error err = httplib::Error::Success;
    auto ok = cli.send(req, res, err);
    if (!error_body.empty())
      return impl_->etcd_error(i, path, status, error_body);
    if (ok && res.status != 200)
      return impl_->etcd_error(i, path, res.status, res.body);
    if (ok || stopped || got_any || status == 200)
      return caf::none;  // ended, stopped by the caller, or idle: the caller decides
    if (err == httplib::Error::Read)
      return caf::none;  // connected, nothing arrived within `idle`
    if (!failures.empty())
      failures += "; ";
    failures += impl_->endpoints[i] + ": " + httplib::to_string(err);
  }
  return caf::make_error(ec::unreachable, "etcd: no endpoint answered (" + failures + ")");
}

std::string etcd_gateway::endpoint() const {
  return impl_->endpoints.empty() ? std::string{} : impl_->endpoints[impl_->current.load()];
}

std::string etcd_gateway::endpoints() const {
  std::string out;
  for (const auto& e : impl_->endpoints) {
    if (!out.empty())
      out += ",";
    out += e;
  }
  return out;
}

} // namespace astraeus
