// Gate addresses as astra's --addr, ASTRAEUS_ADDR and the agent's
// --controller take them (runtime/gate/gate_client.hpp): one, a list, and
// the mistakes a user trial made (a ';' or a blank between two addresses,
// a port that is not a number), each named rather than sent to the
// resolver as a host.

#include <gtest/gtest.h>

#include "messages/error.hpp"
#include "runtime/gate/gate_client.hpp"

using namespace astraeus;

TEST(GateAddress, HostPortHostAloneAndBracketedIpv6) {
  auto a = parse_gate_address("10.0.0.1:7451");
  ASSERT_TRUE(a) << render_error(a.error());
  EXPECT_EQ(a->host, "10.0.0.1");
  EXPECT_EQ(a->port, 7451);
  auto b = parse_gate_address("ctl-2");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->port, 7450);
  auto c = parse_gate_address("[::1]:7452");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->host, "::1");
  EXPECT_EQ(to_string(*c), "[::1]:7452");
  auto list = parse_gate_addresses("10.0.0.1:7450, 10.0.0.2:7450,10.0.0.3");
  ASSERT_TRUE(list) << render_error(list.error());
  EXPECT_EQ(list->size(), 3u);
}

TEST(GateAddress, TwoAddressesRunTogetherAreNamedAsMalformed) {
  for (const char* text : {"127.0.0.1:25450;127.0.0.1:25451", "127.0.0.1:25450 127.0.0.1:25451",
                           "::1:7450"}) {
    auto a = parse_gate_addresses(text);
    ASSERT_FALSE(a) << text;
    EXPECT_EQ(a.error().code(), static_cast<uint8_t>(ec::invalid_request));
    auto says = render_error(a.error());
    EXPECT_NE(says.find("is not a host name or an IPv4 address"), std::string::npos) << says;
    EXPECT_NE(says.find("separate several addresses with commas"), std::string::npos) << says;
  }
  auto port = parse_gate_address("127.0.0.1:abc");
  ASSERT_FALSE(port);
  EXPECT_NE(render_error(port.error()).find("port 'abc' is not a number from 1 to 65535"),
            std::string::npos);
}
