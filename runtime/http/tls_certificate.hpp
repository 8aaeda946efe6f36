#pragma once
/// @file
/// The HTTP API's TLS certificate: a configured PEM pair, or a self-signed
/// one (ECDSA P-256, 10 years, for localhost, 127.0.0.1 and this host)
/// created in the keys folder on first start, as the gate's key is. Its
/// SHA-256 fingerprint is what a client pins (`curl --pinnedpubkey` takes the
/// key's; browsers show the certificate's).

#include <string>

#include <caf/expected.hpp>

namespace astraeus {

/// Where the API's certificate and key are, and the certificate's
/// fingerprint.
struct tls_certificate {
  std::string certificate_path;  ///< PEM certificate
  std::string private_key_path;  ///< PEM private key (mode 0600)
  std::string fingerprint;       ///< SHA-256 of the DER certificate, "AB:CD:..."
  /// For a self-signed certificate (none configured): curl's
  /// --pinnedpubkey value, "sha256//" + base64 of the SHA-256 of its
  /// public key (DER SubjectPublicKeyInfo), written into install commands.
  /// Empty for a configured certificate, which clients verify as usual.
  std::string curl_pin;
};

/// Loads `certificate` and `private_key` when both are set; else
/// `<keys_dir>/api.crt` and `api.key`, created self-signed for `hostname`
/// when missing. Errors: ec::invalid_config when only one of the two is
/// set, a file does not parse or the key does not match the certificate;
/// ec::store_failure when a file cannot be written.
caf::expected<tls_certificate> load_or_create_certificate(const std::string& keys_dir,
                                                          const std::string& certificate,
                                                          const std::string& private_key,
                                                          const std::string& hostname);

} // namespace astraeus
