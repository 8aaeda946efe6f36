#include "runtime/http/tls_certificate.hpp"

#include <cstdio>
#include <filesystem>
#include <memory>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "messages/error.hpp"
#include "runtime/process/private_file.hpp"

namespace astraeus {

namespace {

namespace fs = std::filesystem;

struct bio_free {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct x509_free {
  void operator()(X509* x) const { X509_free(x); }
};
struct pkey_free {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using bio_ptr = std::unique_ptr<BIO, bio_free>;
using x509_ptr = std::unique_ptr<X509, x509_free>;
using pkey_ptr = std::unique_ptr<EVP_PKEY, pkey_free>;

std::string bio_text(BIO* b) {
  char* data = nullptr;
  auto n = BIO_get_mem_data(b, &data);
  return std::string{data, static_cast<size_t>(n)};
}

caf::error bad(const std::string& what) {
  return caf::make_error(ec::invalid_config, what);
}

/// A new self-signed certificate and key for `hostname`, as PEM texts.
caf::expected<std::pair<std::string, std::string>> make_self_signed(const std::string& hostname) {
  pkey_ptr key{EVP_EC_gen("P-256")};
  if (!key)
    return bad("api certificate: cannot create an ECDSA P-256 key");
  x509_ptr cert{X509_new()};
  X509_set_version(cert.get(), 2);
  unsigned char serial[16];
  FILE* r = std::fopen("/dev/urandom", "rb");
  if (r == nullptr || std::fread(serial, 1, sizeof(serial), r) != sizeof(serial)) {
    if (r)
      std::fclose(r);
    return bad("api certificate: cannot read /dev/urandom");
  }
  std::fclose(r);
  serial[0] &= 0x7f;
  auto* bn = BN_bin2bn(serial, sizeof(serial), nullptr);
  BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get()));
  BN_free(bn);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 10L * 365 * 24 * 3600);
  X509_set_pubkey(cert.get(), key.get());
  auto* name = X509_get_subject_name(cert.get());
  auto cn = "astraeus-api " + hostname;
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509_set_issuer_name(cert.get(), name);
  auto san = "DNS:localhost,IP:127.0.0.1,IP:::1";
  std::string sans = san;
  if (!hostname.empty() && hostname != "localhost")
    sans += ",DNS:" + hostname;
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert.get(), cert.get(), nullptr, nullptr, 0);
  if (auto* ext = X509V3_EXT_conf_nid(nullptr, &ctx, NID_subject_alt_name, sans.c_str())) {
    X509_add_ext(cert.get(), ext, -1);
    X509_EXTENSION_free(ext);
  }
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) == 0)
    return bad("api certificate: cannot sign the certificate");
  bio_ptr cb{BIO_new(BIO_s_mem())};
  bio_ptr kb{BIO_new(BIO_s_mem())};
  PEM_write_bio_X509(cb.get(), cert.get());
  PEM_write_bio_PrivateKey(kb.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr);
  return std::pair{bio_text(cb.get()), bio_text(kb.get())};
}

/// The fingerprint of the certificate at `path`, checking `key_path` holds
/// its key.
caf::expected<std::string> fingerprint_of(const std::string& path, const std::string& key_path) {
  auto cert_text = read_trimmed_file(path);
  if (!cert_text)
    return bad("api.certificate: " + render_error(cert_text.error()));
  auto key_text = read_trimmed_file(key_path);
  if (!key_text)
    return bad("api.private_key: " + render_error(key_text.error()));
  bio_ptr cb{BIO_new_mem_buf(cert_text->data(), static_cast<int>(cert_text->size()))};
  x509_ptr cert{PEM_read_bio_X509(cb.get(), nullptr, nullptr, nullptr)};
  if (!cert)
    return bad("api.certificate: " + path + " holds no PEM certificate");
  bio_ptr kb{BIO_new_mem_buf(key_text->data(), static_cast<int>(key_text->size()))};
  pkey_ptr key{PEM_read_bio_PrivateKey(kb.get(), nullptr, nullptr, nullptr)};
  if (!key)
    return bad("api.private_key: " + key_path + " holds no PEM private key");
  if (X509_check_private_key(cert.get(), key.get()) != 1)
    return bad("api.private_key: " + key_path + " is not the key of " + path);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  X509_digest(cert.get(), EVP_sha256(), md, &n);
  std::string out;
  char hex[4];
  for (unsigned i = 0; i < n; ++i) {
    std::snprintf(hex, sizeof(hex), i == 0 ? "%02X" : ":%02X", md[i]);
    out += hex;
  }
  return out;
}

/// curl's --pinnedpubkey value of the certificate at `path`; empty when it
/// cannot be read.
std::string curl_pin_of(const std::string& path) {
  auto text = read_trimmed_file(path);
  if (!text)
    return {};
  bio_ptr cb{BIO_new_mem_buf(text->data(), static_cast<int>(text->size()))};
  x509_ptr cert{PEM_read_bio_X509(cb.get(), nullptr, nullptr, nullptr)};
  if (!cert)
    return {};
  EVP_PKEY* key = X509_get0_pubkey(cert.get());
  unsigned char* der = nullptr;
  int n = key == nullptr ? -1 : i2d_PUBKEY(key, &der);
  if (n <= 0)
    return {};
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int md_len = 0;
  EVP_Digest(der, static_cast<size_t>(n), md, &md_len, EVP_sha256(), nullptr);
  OPENSSL_free(der);
  unsigned char b64[2 * EVP_MAX_MD_SIZE];
  int b64_len = EVP_EncodeBlock(b64, md, static_cast<int>(md_len));
  return "sha256//" + std::string{reinterpret_cast<char*>(b64), static_cast<size_t>(b64_len)};
}

} // namespace

caf::expected<tls_certificate> load_or_create_certificate(const std::string& keys_dir,
                                                          const std::string& certificate,
                                                          const std::string& private_key,
                                                          const std::string& hostname) {
  if (certificate.empty() != private_key.empty())
    return bad("api.certificate and api.private_key: set both or neither");
  tls_certificate out;
  if (!certificate.empty()) {
    out.certificate_path = certificate;
    out.private_key_path = private_key;
  } else {
    out.certificate_path = (fs::path{keys_dir} / "api.crt").string();
    out.private_key_path = (fs::path{keys_dir} / "api.key").string();
    std::error_code err;
    if (!fs::exists(out.certificate_path, err) || !fs::exists(out.private_key_path, err)) {
      auto made = make_self_signed(hostname);
      if (!made)
        return made.error();
      if (auto e = write_private_file(out.private_key_path, made->second))
        return e;
      if (auto e = write_private_file(out.certificate_path, made->first))
        return e;
    }
  }
  auto fp = fingerprint_of(out.certificate_path, out.private_key_path);
  if (!fp)
    return fp.error();
  out.fingerprint = std::move(*fp);
  if (certificate.empty())
    out.curl_pin = curl_pin_of(out.certificate_path);
  return out;
}

} // namespace astraeus
