#pragma once
/// @file
/// What a new machine downloads from the controller (issue 20; machines.md
/// "Create one"): `GET /api/v1/install.sh`, the installer
/// (installer/install.sh) with this controller's gate key, gate address,
/// releases URL, organisation, version and architecture filled in, and
/// `GET /releases/NAME`, the agent's release files (SHA256SUMS, the .deb,
/// the tarball) from the releases folder (controller key releases.dir).
/// Neither needs a token: the script carries no secret, and what it
/// installs is checked against SHA256SUMS and, through --org-id, against
/// the gate key the script pins.

#include <string>
#include <string_view>
#include <vector>

#include <httplib.h>

namespace astraeus::http {

/// What the installer routes serve.
struct installer_site {
  /// The folder of release files; empty or missing: /releases/ answers 404
  /// saying so.
  std::string releases_dir;
  /// The gate's Ed25519 public key (64 hex digits).
  std::string gate_key_hex;
  /// The gate as configured (gate.advertise_address, or ":PORT" whose host
  /// is then the one the client reached the API at).
  std::string gate_address;
  /// The organisation name (api.organization).
  std::string organization;
  /// "http" or "https": the scheme the releases URL is given with.
  std::string scheme = "https";
  /// curl's --pinnedpubkey for a self-signed certificate; empty: none.
  std::string curl_pin;
  /// The API's URL as machines reach it; empty: scheme://Host.
  std::string advertise_url;
};

/// The API's URL for a client that reached it at `host_header`:
/// site.advertise_url, else scheme://Host (127.0.0.1 when none).
std::string api_url_for_host(const installer_site& site, const std::string& host_header);

/// installer/install.sh as built into the program, its @@...@@ values
/// unfilled.
std::string_view install_script_template();

/// The install script for a client that reached the API at `host_header`
/// (HOST[:PORT], the Host header): every @@NAME@@ replaced, values
/// single-quote safe.
std::string render_install_script(const installer_site& site, const std::string& host_header);

/// HOST:PORT of the gate as machines reach it: `configured` when it names a
/// host, else the host of `host_header` (127.0.0.1 when none) with
/// `configured`'s ":PORT".
std::string gate_address_for_host(const std::string& configured, const std::string& host_header);

/// The Debian architecture of this program's machine (amd64, arm64, or
/// `uname -m` as is).
std::string machine_architecture();

/// Serves GET/HEAD /api/v1/install.sh and /releases/...; false for any
/// other request. A release name with a '/' or a leading '.', or one not in
/// the folder, is a 404 naming it; an empty folder is a 404 saying how to
/// fill it.
bool serve_installer(const httplib::Request& req, httplib::Response& res,
                     const installer_site& site);

/// The default releases folder: share/astraeus/releases next to the
/// directory of the running program (/proc/self/exe's parent's parent).
std::string default_releases_dir();

/// The names of the release files in `dir`, sorted; empty when none.
std::vector<std::string> release_files(const std::string& dir);

} // namespace astraeus::http
