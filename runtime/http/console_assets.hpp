#pragma once
/// @file
/// The web console (issue 19, "The console"): plain HTML, CSS and
/// JavaScript from runtime/http/console/, embedded at build time by
/// runtime/http/console/embed.cmake and served by the API server:
///
///   /                      -> 302 to /o/<org>/compute/gpus
///   /o/<org>/..., /console/... -> the app (index.html; it routes in the page)
///   /console/static/<file> -> one embedded file (unknown: 404)

#include <cstddef>
#include <string>
#include <vector>

#include <httplib.h>

namespace astraeus::http {

/// One embedded console file.
struct console_asset {
  const char* name;          ///< file name, e.g. "console.js"
  const char* content_type;  ///< e.g. "text/javascript; charset=utf-8"
  const char* data;          ///< the bytes (not NUL-terminated text)
  size_t size;               ///< number of bytes
};

/// Every embedded file, sorted by name (generated at build time).
const std::vector<console_asset>& console_assets();

/// The embedded file called `name`; null when there is none.
const console_asset* find_console_asset(const std::string& name);

/// Answers `req` when it is a console page or file (GET or HEAD of `/`,
/// `/o/...`, `/console` or `/console/...`) and returns true; false for
/// every other request (the API's). `organization` and `cluster` are put
/// into the page for its API calls. `address_actions`: whether the page
/// clicks the buttons an address's `#do=` names (the browser test's way in);
/// the API server turns it on only where it serves plain HTTP on loopback
/// (dev and tests), never over TLS: there a link would act (clear a GPU's
/// fault) without the person's confirmation (a new-user trial).
bool serve_console(const httplib::Request& req, httplib::Response& res,
                   const std::string& organization, const std::string& cluster,
                   bool address_actions = false);

} // namespace astraeus::http
