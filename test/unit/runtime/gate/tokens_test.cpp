// Join and API tokens (issue 7; shared/seeds/machines.md "Create one",
// bring-up-a-gpu-cluster.md Troubleshooting): single use, expiry, roles,
// revocation, and nothing but keyed hashes in the store.

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "actor_fixture.hpp"
#include "messages/error.hpp"
#include "runtime/gate/tokens.hpp"
#include "store/store.hpp"

using namespace astraeus;

namespace {

class Tokens : public ::testing::Test {
protected:
  Tokens() {
    auto s = Store::open(dir.path() + "/store");
    EXPECT_TRUE(s);
    store = std::shared_ptr<Store>{std::move(*s)};
    auto key = load_or_create_token_key(dir.path() + "/keys/token.key");
    EXPECT_TRUE(key);
    registry = std::make_unique<token_registry>(store, *key);
  }

  /// Every byte RocksDB wrote, to look for a token in.
  std::string store_bytes() {
    store.reset();
    registry.reset();
    std::string all;
    for (auto& e : std::filesystem::recursive_directory_iterator(dir.path() + "/store")) {
      if (!e.is_regular_file())
        continue;
      std::ifstream in{e.path(), std::ios::binary};
      std::stringstream ss;
      ss << in.rdbuf();
      all += ss.str();
    }
    return all;
  }

  test::temp_dir dir;
  std::shared_ptr<Store> store;
  std::unique_ptr<token_registry> registry;
  int64_t now = 1'800'000'000'000;
};

} // namespace

TEST_F(Tokens, AJoinTokenIsSingleUseAndCarriesItsLabels) {
  auto minted = registry->mint_join({{"pool", "h100"}}, 0, "alice", now);
  ASSERT_TRUE(minted) << render_error(minted.error());
  auto& [token, rec] = *minted;
  EXPECT_EQ(token.rfind("astj_", 0), 0u);
  EXPECT_EQ(rec.expires_unix_ms(), now + 3600 * 1000) << "default TTL 1 h";
  auto used = registry->redeem_join(token, "gpu-01", now + 1000);
  ASSERT_TRUE(used) << render_error(used.error());
  EXPECT_EQ(used->labels().at("pool"), "h100");
  auto again = registry->redeem_join(token, "gpu-02", now + 2000);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error(), ec::enrollment_used);
  auto text = render_error(again.error());
  EXPECT_NE(text.find("ENROLLMENT_USED"), std::string::npos) << text;
  EXPECT_NE(text.find("gpu-01"), std::string::npos) << text;
}

TEST_F(Tokens, AnExpiredJoinTokenSaysSo) {
  auto minted = registry->mint_join({}, 60, "alice", now);
  ASSERT_TRUE(minted);
  auto late = registry->redeem_join(minted->first, "gpu-01", now + 60'000);
  ASSERT_FALSE(late);
  EXPECT_EQ(late.error(), ec::enrollment_expired);
  EXPECT_NE(render_error(late.error()).find("expired"), std::string::npos);
}

TEST_F(Tokens, UnknownAndMalformedTokensAreRefused) {
  EXPECT_EQ(registry->redeem_join("astj_" + std::string(64, '0'), "m", now).error(),
            ec::enrollment_required);
  EXPECT_EQ(registry->redeem_join("", "m", now).error(), ec::enrollment_required);
  EXPECT_EQ(registry->authenticate("", now).error(), ec::unauthenticated);
  EXPECT_EQ(registry->authenticate("asta_nope", now).error(), ec::unauthenticated);
  // A join token is no API token and the other way round.
  auto join = registry->mint_join({}, 0, "x", now);
  ASSERT_TRUE(join);
  EXPECT_EQ(registry->authenticate(join->first, now).error(), ec::unauthenticated);
  auto api = registry->mint_api("bob", role::member, 0, "x", now);
  ASSERT_TRUE(api);
  EXPECT_EQ(registry->redeem_join(api->first, "m", now).error(),
            ec::enrollment_required);
}

TEST_F(Tokens, ApiTokensNameTheirPrincipalUntilExpiredOrRevoked) {
  auto admin = registry->mint_api("alice", role::admin, 3600, "owner", now);
  ASSERT_TRUE(admin);
  auto who = registry->authenticate(admin->first, now + 1);
  ASSERT_TRUE(who) << render_error(who.error());
  EXPECT_EQ(who->name(), "alice");
  EXPECT_EQ(who->role(), "admin");
  EXPECT_TRUE(has_role(*who, role::member));
  EXPECT_TRUE(has_role(*who, role::admin));
  EXPECT_FALSE(has_role(*who, role::owner));
  auto expired = registry->authenticate(admin->first, now + 3600 * 1000);
  ASSERT_FALSE(expired);
  EXPECT_NE(render_error(expired.error()).find("expired"), std::string::npos);

  auto member = registry->mint_api("bob", role::member, 0, "owner", now);
  ASSERT_TRUE(member);
  ASSERT_TRUE(registry->authenticate(member->first, now + 1));
  auto revoked = registry->revoke_api(member->second.id(), now + 1);
  ASSERT_TRUE(revoked) << render_error(revoked.error());
  auto after = registry->authenticate(member->first, now + 2);
  ASSERT_FALSE(after);
  EXPECT_NE(render_error(after.error()).find("revoked"), std::string::npos);
  EXPECT_EQ(registry->revoke_api("nope", now).error(), ec::invalid_request);
}

// Trial: revoking the only owner token locked every admin out for good.
TEST_F(Tokens, TheLastWorkingOwnerTokenCannotBeRevoked) {
  auto first = registry->mint_api("owner", role::owner, 0, "controller", now);
  ASSERT_TRUE(first);
  auto admin = registry->mint_api("alice", role::admin, 0, "owner", now);
  ASSERT_TRUE(admin);
  auto refused = registry->revoke_api(first->second.id(), now + 1);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error(), ec::failed_precondition);
  EXPECT_EQ(render_error(refused.error()),
            "refused: " + first->second.id()
              + " is the cluster's last owner token; create another owner token first "
                "(astra api-tokens create --role owner)");
  ASSERT_TRUE(registry->authenticate(first->first, now + 2)) << "still works";
  // An owner token that has expired is no way in: it does not count.
  auto brief = registry->mint_api("brief", role::owner, 10, "owner", now);
  ASSERT_TRUE(brief);
  EXPECT_EQ(*registry->count_working_owners(now + 1), 2u);
  EXPECT_EQ(*registry->count_working_owners(now + 10'000), 1u);
  EXPECT_FALSE(registry->revoke_api(first->second.id(), now + 10'000));
  EXPECT_TRUE(registry->revoke_api(brief->second.id(), now + 10'000)) << "expired: no way in";
  // With a second owner the first may go; then the second is the last.
  auto second = registry->mint_api("owner2", role::owner, 0, "owner", now);
  ASSERT_TRUE(second);
  ASSERT_TRUE(registry->revoke_api(first->second.id(), now + 3));
  EXPECT_EQ(registry->revoke_api(second->second.id(), now + 4).error(),
            ec::failed_precondition);
  EXPECT_TRUE(registry->revoke_api(admin->second.id(), now + 5)) << "admins are not owners";
}

TEST_F(Tokens, TheStoreHoldsOnlyKeyedHashes) {
  auto join = registry->mint_join({{"pool", "a100"}}, 0, "alice", now);
  auto api = registry->mint_api("bob", role::member, 0, "alice", now);
  ASSERT_TRUE(join && api);
  auto hashed_elsewhere = registry->hash_hex(join->first);
  auto bytes = store_bytes();
  ASSERT_FALSE(bytes.empty());
  EXPECT_EQ(bytes.find(join->first), std::string::npos);
  EXPECT_EQ(bytes.find(join->first.substr(5)), std::string::npos);
  EXPECT_EQ(bytes.find(api->first.substr(5)), std::string::npos);
  EXPECT_NE(bytes.find(hashed_elsewhere), std::string::npos)
    << "stored under its keyed hash";
}

TEST_F(Tokens, TheHashDependsOnTheControllersKey) {
  auto other_key = load_or_create_token_key(dir.path() + "/keys/other.key");
  ASSERT_TRUE(other_key);
  token_registry other{store, *other_key};
  EXPECT_NE(other.hash_hex("astj_x"), registry->hash_hex("astj_x"));
  // And the key survives a restart.
  auto again = load_or_create_token_key(dir.path() + "/keys/token.key");
  ASSERT_TRUE(again);
  token_registry same{store, *again};
  EXPECT_EQ(same.hash_hex("astj_x"), registry->hash_hex("astj_x"));
}

TEST_F(Tokens, BadTtlsAndLabelsAreRefused) {
  EXPECT_EQ(registry->mint_join({}, 31ull * 24 * 3600, "a", now).error(),
            ec::invalid_request);
  EXPECT_EQ(registry->mint_join({{"po ol", "x"}}, 0, "a", now).error(),
            ec::invalid_request);
  EXPECT_EQ(registry->mint_api("", role::admin, 0, "a", now).error(),
            ec::invalid_request);
  // Topology labels, as `astra label` takes them (issue 13 item 7).
  EXPECT_TRUE(registry->mint_join({{"topology.astraeus.io/rack", "r12"}}, 0, "a", now));
  EXPECT_FALSE(parse_role("root"));
  EXPECT_EQ(parse_role("Admin"), role::admin);
}

// issue 13 (cli): `astra tokens list|revoke`, `astra api-tokens list`.
TEST_F(Tokens, JoinTokensAreListedWithoutHashesAndARevokedOneAdmitsNobody) {
  auto a = registry->mint_join({{"pool", "h100"}}, 0, "alice", now);
  auto b = registry->mint_join({}, 0, "alice", now + 1);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(registry->redeem_join(a->first, "gpu-01", now + 2));
  auto list = registry->list_join();
  ASSERT_TRUE(list);
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].id(), a->second.id()) << "oldest first";
  EXPECT_EQ((*list)[0].used_by(), "gpu-01");
  EXPECT_TRUE((*list)[0].hash().empty()) << "no hash leaves the registry";
  auto used = registry->revoke_join(a->second.id());
  ASSERT_FALSE(used);
  EXPECT_EQ(render_error(used.error()),
            "join token " + a->second.id() + " was used by machine gpu-01; a used token "
            "admits nobody else (remove the machine with `astra machine remove gpu-01`)");
  auto revoked = registry->revoke_join(b->second.id());
  ASSERT_TRUE(revoked) << render_error(revoked.error());
  EXPECT_TRUE(revoked->revoked());
  auto refused = registry->redeem_join(b->first, "gpu-02", now + 3);
  ASSERT_FALSE(refused);
  EXPECT_EQ(render_error(refused.error()),
            "join token " + b->second.id() +
              " was revoked; mint a new one with `astra tokens create`");
  EXPECT_EQ(render_error(registry->revoke_join("nope").error()),
            "no join token has id 'nope' (see `astra tokens list`)");
  ASSERT_TRUE(registry->mint_api("bob", role::member, 0, "alice", now));
  auto api = registry->list_api();
  ASSERT_TRUE(api);
  ASSERT_EQ(api->size(), 1u);
  EXPECT_EQ((*api)[0].name(), "bob");
  EXPECT_TRUE((*api)[0].hash().empty());
}
