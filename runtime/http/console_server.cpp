// The web console's pages and files (runtime/http/console_assets.hpp).

#include "runtime/http/console_assets.hpp"

namespace astraeus::http {

namespace {

/// `text` with &, <, >, " and ' written as HTML entities.
std::string html_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

/// `text` with every `from` replaced by `to`.
std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (auto at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

/// Headers every console answer carries: no inline script, no framing.
void secure(httplib::Response& res) {
  res.set_header("Content-Security-Policy",
                 "default-src 'self'; img-src 'self' data:; style-src 'self'; "
                 "frame-ancestors 'none'; base-uri 'none'; form-action 'self'");
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Referrer-Policy", "no-referrer");
  res.set_header("Cache-Control", "no-cache");
}

void reply_text(httplib::Response& res, int status, const std::string& text) {
  res.status = status;
  res.set_content(text, "text/plain; charset=utf-8");
}

} // namespace

const console_asset* find_console_asset(const std::string& name) {
  for (const auto& a : console_assets())
    if (name == a.name)
      return &a;
  return nullptr;
}

bool serve_console(const httplib::Request& req, httplib::Response& res,
                   const std::string& organization, const std::string& cluster,
                   bool address_actions) {
  if (req.method != "GET" && req.method != "HEAD")
    return false;
  const auto& path = req.path;
  bool page = path == "/console" || starts_with(path, "/console/") || path == "/o"
              || starts_with(path, "/o/");
  if (path != "/" && !page)
    return false;
  secure(res);
  if (path == "/") {
    res.status = 302;
    res.set_header("Location", "/o/" + organization + "/compute/gpus");
    return true;
  }
  static const std::string static_prefix = "/console/static/";
  if (starts_with(path, static_prefix)) {
    const auto* a = find_console_asset(path.substr(static_prefix.size()));
    if (a == nullptr || std::string{a->name} == "index.html") {
      reply_text(res, 404, "no console file " + path + "\n");
      return true;
    }
    res.status = 200;
    res.set_content(std::string{a->data, a->size}, a->content_type);
    return true;
  }
  const auto* index = find_console_asset("index.html");
  if (index == nullptr) {
    reply_text(res, 500, "the console was built without index.html\n");
    return true;
  }
  // Every other console address is the app, which routes in the page (an
  // unknown one shows "No such page").
  auto html = replace_all(std::string{index->data, index->size}, "{{ORGANIZATION}}",
                          html_escape(organization));
  html = replace_all(std::move(html), "{{CLUSTER}}", html_escape(cluster));
  html = replace_all(std::move(html), "{{ADDRESS_ACTIONS}}", address_actions ? "on" : "off");
  res.status = 200;
  res.set_content(std::move(html), index->content_type);
  return true;
}

} // namespace astraeus::http
