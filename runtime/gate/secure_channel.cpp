#include "runtime/gate/secure_channel.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <system_error>

#include <sodium.h>

#include "messages/error.hpp"
#include "runtime/gate/frame_codec.hpp"
#include "runtime/process/private_file.hpp"

namespace astraeus {

namespace fs = std::filesystem;

namespace {

static_assert(crypto_sign_PUBLICKEYBYTES == 32);
static_assert(crypto_sign_SECRETKEYBYTES == 64);
static_assert(crypto_sign_SEEDBYTES == 32);
static_assert(crypto_kx_PUBLICKEYBYTES == 32);
static_assert(crypto_kx_SESSIONKEYBYTES == 32);
static_assert(crypto_aead_chacha20poly1305_ietf_KEYBYTES == 32);
static_assert(crypto_aead_chacha20poly1305_ietf_ABYTES
              == sealed_channel::overhead);

/// libsodium must be initialised once; sodium_init is idempotent and
/// thread-safe.
void ensure_sodium() {
  static const int rc = sodium_init();
  (void) rc;
}

const char transcript_label[] = "astraeus gate channel v2";
const char server_label[] = "astraeus gate: server signs";
const char client_label[] = "astraeus gate: client signs";

std::string bytes_of(const uint8_t* p, size_t n) {
  return std::string{reinterpret_cast<const char*>(p), n};
}

/// BLAKE2b-256 over the handshake: label, version, both ephemeral keys and
/// the server's identity.
std::array<uint8_t, 32> transcript_hash(uint32_t version,
                                        const std::string& client_eph,
                                        const std::string& server_eph,
                                        const public_key& server_id) {
  std::array<uint8_t, 32> out{};
  crypto_generichash_state st;
  crypto_generichash_init(&st, nullptr, 0, out.size());
  crypto_generichash_update(&st,
                            reinterpret_cast<const uint8_t*>(transcript_label),
                            sizeof(transcript_label) - 1);
  uint8_t v[4] = {static_cast<uint8_t>(version >> 24),
                  static_cast<uint8_t>(version >> 16),
                  static_cast<uint8_t>(version >> 8),
                  static_cast<uint8_t>(version)};
  crypto_generichash_update(&st, v, sizeof(v));
  crypto_generichash_update(&st,
                            reinterpret_cast<const uint8_t*>(client_eph.data()),
                            client_eph.size());
  crypto_generichash_update(&st,
                            reinterpret_cast<const uint8_t*>(server_eph.data()),
                            server_eph.size());
  crypto_generichash_update(&st, server_id.data(), server_id.size());
  crypto_generichash_final(&st, out.data(), out.size());
  return out;
}

/// What each side signs: a label naming the signer, the transcript, and for
/// the client its own key (so a signature speaks for exactly one identity).
std::string to_be_signed(const char* label, const std::array<uint8_t, 32>& th,
                         const uint8_t* extra = nullptr, size_t extra_len = 0) {
  std::string out{label};
  out += bytes_of(th.data(), th.size());
  if (extra != nullptr)
    out += bytes_of(extra, extra_len);
  return out;
}

std::string signature(const identity_keypair& id, const std::string& msg) {
  std::array<uint8_t, crypto_sign_BYTES> sig{};
  crypto_sign_detached(sig.data(), nullptr,
                       reinterpret_cast<const uint8_t*>(msg.data()), msg.size(),
                       id.secret_bytes.data());
  return bytes_of(sig.data(), sig.size());
}

bool verify(const std::string& sig, const std::string& msg,
            const std::string& key) {
  if (sig.size() != crypto_sign_BYTES || key.size() != crypto_sign_PUBLICKEYBYTES)
    return false;
  return crypto_sign_verify_detached(
           reinterpret_cast<const uint8_t*>(sig.data()),
           reinterpret_cast<const uint8_t*>(msg.data()), msg.size(),
           reinterpret_cast<const uint8_t*>(key.data()))
         == 0;
}

caf::error handshake_error(std::string what) {
  return caf::make_error(ec::handshake_failed, std::move(what));
}

/// Parses a clear handshake record.
caf::expected<v1::Frame> parse_clear(const char* data, size_t size) {
  return decode_frame_body(data, size);
}

/// Decodes exactly `out.size()` bytes of hex (surrounding blanks ignored);
/// false on anything else.
template <size_t N>
bool from_hex(std::string_view hex, std::array<uint8_t, N>& out) {
  while (!hex.empty() && std::isspace(static_cast<unsigned char>(hex.front())))
    hex.remove_prefix(1);
  while (!hex.empty() && std::isspace(static_cast<unsigned char>(hex.back())))
    hex.remove_suffix(1);
  size_t len = 0;
  const char* end = nullptr;
  return hex.size() == 2 * N
         && sodium_hex2bin(out.data(), out.size(), hex.data(), hex.size(), nullptr,
                           &len, &end)
              == 0
         && len == N && end == hex.data() + hex.size();
}

} // namespace

// -- keys ---------------------------------------------------------------------

identity_keypair identity_keypair::generate() {
  ensure_sodium();
  identity_keypair out;
  crypto_sign_keypair(out.public_bytes.data(), out.secret_bytes.data());
  return out;
}

std::string identity_keypair::public_hex() const {
  return to_hex(public_bytes);
}

identity_keypair::~identity_keypair() {
  sodium_memzero(secret_bytes.data(), secret_bytes.size());
}

std::string to_hex(std::string_view bytes) {
  std::string out(bytes.size() * 2 + 1, '\0');
  sodium_bin2hex(out.data(), out.size(),
                 reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  out.pop_back();
  return out;
}

std::string to_hex(const public_key& key) {
  return to_hex(std::string_view{reinterpret_cast<const char*>(key.data()),
                                 key.size()});
}

std::string fingerprint(const public_key& key) {
  return to_hex(key).substr(0, 16);
}

caf::expected<public_key> parse_public_key(std::string_view hex,
                                           std::string_view what) {
  public_key out{};
  if (!from_hex(hex, out))
    return caf::make_error(ec::invalid_config,
                           std::string{what}
                             + ": not a public key (64 hex digits, as `astra "
                               "tokens create` prints it)");
  return out;
}

caf::expected<identity_keypair> load_or_create_keypair(const std::string& path) {
  ensure_sodium();
  std::error_code err;
  std::array<uint8_t, crypto_sign_SEEDBYTES> seed{};
  identity_keypair out;
  auto found = fs::exists(path, err);
  if (err)
    return caf::make_error(ec::store_failure,
                           "cannot read " + path + ": " + err.message());
  if (found) {
    auto text = read_trimmed_file(path);
    if (!text)
      return text.error();
    auto ok = from_hex(*text, seed);
    sodium_memzero(text->data(), text->size());
    if (!ok)
      return caf::make_error(ec::invalid_config,
                             path + " does not hold an Ed25519 key (64 hex "
                                    "digits); restore it from a backup, or "
                                    "remove it to make a new identity");
  } else {
    randombytes_buf(seed.data(), seed.size());
    auto text = to_hex(std::string_view{reinterpret_cast<const char*>(seed.data()),
                                        seed.size()});
    auto written = write_private_file(path, text);
    sodium_memzero(text.data(), text.size());
    if (written)
      return written;
  }
  crypto_sign_seed_keypair(out.public_bytes.data(), out.secret_bytes.data(),
                           seed.data());
  sodium_memzero(seed.data(), seed.size());
  return out;
}

// -- sealed records -------------------------------------------------------------

sealed_channel::sealed_channel(const std::array<uint8_t, 32>& rx,
                               const std::array<uint8_t, 32>& tx)
  : rx_(rx), tx_(tx) {
}

sealed_channel::~sealed_channel() {
  sodium_memzero(rx_.data(), rx_.size());
  sodium_memzero(tx_.data(), tx_.size());
}

namespace {

std::array<uint8_t, crypto_aead_chacha20poly1305_ietf_NPUBBYTES>
nonce_of(uint64_t n) {
  std::array<uint8_t, crypto_aead_chacha20poly1305_ietf_NPUBBYTES> out{};
  for (size_t i = 0; i < 8; ++i)
    out[4 + i] = static_cast<uint8_t>(n >> (8 * i));
  return out;
}

} // namespace

std::string sealed_channel::seal(std::string_view plaintext) {
  std::string out(plaintext.size() + overhead, '\0');
  auto nonce = nonce_of(sent_++);
  unsigned long long len = 0;
  crypto_aead_chacha20poly1305_ietf_encrypt(
    reinterpret_cast<uint8_t*>(out.data()), &len,
    reinterpret_cast<const uint8_t*>(plaintext.data()), plaintext.size(),
    nullptr, 0, nullptr, nonce.data(), tx_.data());
  out.resize(static_cast<size_t>(len));
  return out;
}

caf::expected<std::string> sealed_channel::open(const char* data, size_t size) {
  auto number = received_;
  if (failed_)
    return caf::make_error(ec::channel_broken,
                           "the channel already failed; no further frame is "
                           "read");
  if (size < overhead) {
    failed_ = true;
    return caf::make_error(ec::channel_broken,
                           "sealed frame " + std::to_string(number) + " is "
                             + std::to_string(size)
                             + " bytes, shorter than its tag");
  }
  std::string out(size - overhead, '\0');
  auto nonce = nonce_of(received_);
  unsigned long long len = 0;
  if (crypto_aead_chacha20poly1305_ietf_decrypt(
        reinterpret_cast<uint8_t*>(out.data()), &len, nullptr,
        reinterpret_cast<const uint8_t*>(data), size, nullptr, 0, nonce.data(),
        rx_.data())
      != 0) {
    failed_ = true;
    return caf::make_error(ec::channel_broken,
                           "sealed frame " + std::to_string(number)
                             + " did not open: tampered, replayed, reordered, "
                               "or a frame before it was dropped");
  }
  ++received_;
  out.resize(static_cast<size_t>(len));
  return out;
}

std::string sealed_channel::seal_frame(const v1::Frame& frame) {
  auto body = frame.SerializeAsString();
  auto sealed = seal(body);
  sodium_memzero(body.data(), body.size());
  return frame_length_prefix(static_cast<uint32_t>(sealed.size())) + sealed;
}

caf::expected<v1::Frame> sealed_channel::open_frame(const char* data,
                                                    size_t size) {
  auto plain = open(data, size);
  if (!plain)
    return plain.error();
  auto frame = decode_frame_body(plain->data(), plain->size());
  sodium_memzero(plain->data(), plain->size());
  return frame;
}

// -- the gate's side ------------------------------------------------------------

channel_server::channel_server(std::shared_ptr<const identity_keypair> identity)
  : identity_(std::move(identity)) {
  ensure_sodium();
}

std::string channel_server::encode(const v1::Frame& frame) {
  if (established())
    return channel_.seal_frame(frame);
  return encode_frame(frame);
}

caf::expected<channel_step> channel_server::on_record(const char* data,
                                                      size_t size) {
  auto fail = [this](caf::error err) -> caf::expected<channel_step> {
    state_ = state::failed;
    return err;
  };
  channel_step step;
  switch (state_) {
    case state::awaiting_hello: {
      auto frame = parse_clear(data, size);
      if (!frame)
        return fail(frame.error());
      if (frame->has_hello())
        return fail(caf::make_error(
          ec::incompatible_protocol,
          "protocol version " + std::to_string(frame->hello().protocol_version())
            + " is not supported: this controller (" ASTRAEUS_VERSION
              ") speaks version "
            + std::to_string(channel_protocol_version)
            + " (the secure channel); install the controller's version of the "
              "agent and astra"));
      if (!frame->has_channel_hello())
        return fail(caf::make_error(ec::protocol_violation,
                                    "sent a " + std::string{frame_kind(*frame)}
                                      + " frame before the secure handshake"));
      const auto& hello = frame->channel_hello();
      if (hello.protocol_version() != channel_protocol_version)
        return fail(caf::make_error(
          ec::incompatible_protocol,
          "protocol version " + std::to_string(hello.protocol_version())
            + " is not supported: this controller (" ASTRAEUS_VERSION
              ") speaks version "
            + std::to_string(channel_protocol_version)
            + "; install the controller's version of the agent and astra"));
      if (hello.ephemeral_key().size() != crypto_kx_PUBLICKEYBYTES)
        return fail(handshake_error("channel hello: the ephemeral key is "
                                    + std::to_string(hello.ephemeral_key().size())
                                    + " bytes, not 32"));
      std::array<uint8_t, crypto_kx_PUBLICKEYBYTES> pk{};
      std::array<uint8_t, crypto_kx_SECRETKEYBYTES> sk{};
      crypto_kx_keypair(pk.data(), sk.data());
      std::array<uint8_t, 32> rx{}, tx{};
      auto rc = crypto_kx_server_session_keys(
        rx.data(), tx.data(), pk.data(), sk.data(),
        reinterpret_cast<const uint8_t*>(hello.ephemeral_key().data()));
      sodium_memzero(sk.data(), sk.size());
      if (rc != 0)
        return fail(handshake_error("channel hello: the ephemeral key is not "
                                    "a usable X25519 key"));
      channel_ = sealed_channel{rx, tx};
      sodium_memzero(rx.data(), rx.size());
      sodium_memzero(tx.data(), tx.size());
      auto server_eph = bytes_of(pk.data(), pk.size());
      transcript_ = transcript_hash(channel_protocol_version,
                                    hello.ephemeral_key(), server_eph,
                                    identity_->public_bytes);
      v1::Frame out;
      auto* accept = out.mutable_channel_accept();
      accept->set_protocol_version(channel_protocol_version);
      accept->set_ephemeral_key(server_eph);
      accept->set_identity_key(bytes_of(identity_->public_bytes.data(), 32));
      accept->set_signature(
        signature(*identity_, to_be_signed(server_label, transcript_)));
      step.reply = encode_frame(out);
      state_ = state::awaiting_auth;
      return step;
    }
    case state::awaiting_auth: {
      auto frame = channel_.open_frame(data, size);
      if (!frame)
        return fail(frame.error());
      if (!frame->has_channel_auth())
        return fail(caf::make_error(ec::protocol_violation,
                                    "sent a " + std::string{frame_kind(*frame)}
                                      + " frame before its channel auth"));
      const auto& auth = frame->channel_auth();
      if (auth.identity_key().size() != crypto_sign_PUBLICKEYBYTES)
        return fail(handshake_error("channel auth: the identity key is "
                                    + std::to_string(auth.identity_key().size())
                                    + " bytes, not 32"));
      auto msg = to_be_signed(
        client_label, transcript_,
        reinterpret_cast<const uint8_t*>(auth.identity_key().data()),
        auth.identity_key().size());
      if (!verify(auth.signature(), msg, auth.identity_key()))
        return fail(handshake_error(
          "channel auth: the signature does not verify for key "
          + to_hex(auth.identity_key()).substr(0, 16)
          + " in this session (replayed from another session, or forged)"));
      std::copy(auth.identity_key().begin(), auth.identity_key().end(),
                peer_.begin());
      state_ = state::established;
      step.established = true;
      return step;
    }
    case state::established: {
      auto frame = channel_.open_frame(data, size);
      if (!frame)
        return fail(frame.error());
      step.frame = std::move(*frame);
      return step;
    }
    case state::failed:
      break;
  }
  return caf::make_error(ec::channel_broken, "the channel already failed");
}

// -- the connecting side ------------------------------------------------------

channel_client::channel_client(std::shared_ptr<const identity_keypair> identity,
                               std::optional<public_key> pinned)
  : identity_(std::move(identity)), pinned_(pinned) {
  ensure_sodium();
}

channel_client::~channel_client() {
  sodium_memzero(eph_sk_.data(), eph_sk_.size());
}

std::string channel_client::start() {
  crypto_kx_keypair(eph_pk_.data(), eph_sk_.data());
  started_ = true;
  v1::Frame out;
  out.mutable_channel_hello()->set_protocol_version(channel_protocol_version);
  out.mutable_channel_hello()->set_ephemeral_key(bytes_of(eph_pk_.data(), 32));
  return encode_frame(out);
}

std::string channel_client::encode(const v1::Frame& frame) {
  return channel_.seal_frame(frame);
}

caf::expected<channel_step> channel_client::on_record(const char* data,
                                                      size_t size) {
  channel_step step;
  if (established_) {
    auto frame = channel_.open_frame(data, size);
    if (!frame)
      return frame.error();
    step.frame = std::move(*frame);
    return step;
  }
  if (!started_)
    return caf::make_error(ec::protocol_violation,
                           "the gate spoke before the channel hello");
  auto frame = parse_clear(data, size);
  if (!frame)
    return frame.error();
  if (frame->has_refusal()) {
    // The gate refuses in the clear before the handshake (e.g. a version
    // it does not speak, too many connections).
    step.frame = std::move(*frame);
    return step;
  }
  if (!frame->has_channel_accept())
    return caf::make_error(ec::incompatible_protocol,
                           "the gate answered the channel hello with a "
                             + std::string{frame_kind(*frame)}
                             + " frame: is it a controller older than "
                               "version 2 of the protocol?");
  const auto& accept = frame->channel_accept();
  if (accept.protocol_version() != channel_protocol_version)
    return caf::make_error(ec::incompatible_protocol,
                           "the gate speaks protocol version "
                             + std::to_string(accept.protocol_version())
                             + ", this build "
                             + std::to_string(channel_protocol_version));
  if (accept.ephemeral_key().size() != crypto_kx_PUBLICKEYBYTES
      || accept.identity_key().size() != crypto_sign_PUBLICKEYBYTES)
    return handshake_error("the gate's channel accept carries keys of the "
                           "wrong size");
  std::copy(accept.identity_key().begin(), accept.identity_key().end(),
            server_.begin());
  if (pinned_ && sodium_memcmp(pinned_->data(), server_.data(), 32) != 0)
    return handshake_error("the controller's key " + fingerprint(server_)
                           + "... is not the pinned key "
                           + fingerprint(*pinned_)
                           + "...: refusing to talk to an impostor (check "
                             "--controller-key or controller.public_key)");
  auto th = transcript_hash(channel_protocol_version,
                            bytes_of(eph_pk_.data(), 32),
                            accept.ephemeral_key(), server_);
  if (!verify(accept.signature(), to_be_signed(server_label, th),
              accept.identity_key()))
    return handshake_error("the controller's signature of the handshake does "
                           "not verify");
  std::array<uint8_t, 32> rx{}, tx{};
  auto rc = crypto_kx_client_session_keys(
    rx.data(), tx.data(), eph_pk_.data(), eph_sk_.data(),
    reinterpret_cast<const uint8_t*>(accept.ephemeral_key().data()));
  sodium_memzero(eph_sk_.data(), eph_sk_.size());
  if (rc != 0)
    return handshake_error("the gate's ephemeral key is not a usable X25519 "
                           "key");
  channel_ = sealed_channel{rx, tx};
  sodium_memzero(rx.data(), rx.size());
  sodium_memzero(tx.data(), tx.size());
  v1::Frame out;
  auto* auth = out.mutable_channel_auth();
  auth->set_identity_key(bytes_of(identity_->public_bytes.data(), 32));
  auth->set_signature(
    signature(*identity_, to_be_signed(client_label, th,
                                       identity_->public_bytes.data(), 32)));
  step.reply = channel_.seal_frame(out);
  step.established = true;
  established_ = true;
  return step;
}

} // namespace astraeus
