// The console's page as the API server serves it (runtime/http/console_server.cpp):
// what an address's #do= may do depends on how the console is served.

#include <string>

#include <gtest/gtest.h>
#include <httplib.h>

#include "runtime/http/console_assets.hpp"

using namespace astraeus;

namespace {

std::string page(bool address_actions) {
  httplib::Request req;
  req.method = "GET";
  req.path = "/o/default/machines/gpu-01/gpus/GPU-1";
  httplib::Response res;
  EXPECT_TRUE(http::serve_console(req, res, "default", "default", address_actions));
  EXPECT_EQ(res.status, 200);
  return res.body;
}

} // namespace

// Fourth new-user trial: over TLS a link with #do=clear-fault cleared a GPU's
// fault without the confirmation. Address actions are the browser test's
// (plain HTTP on loopback) only; console.js reads this meta.
TEST(ConsolePage, AddressActionsAreOnlyForPlainHttpOnLoopback) {
  EXPECT_NE(page(false).find(R"(<meta name="astraeus-address-actions" content="off">)"),
            std::string::npos);
  EXPECT_NE(page(true).find(R"(<meta name="astraeus-address-actions" content="on">)"),
            std::string::npos);
  const auto* js = http::find_console_asset("console.js");
  ASSERT_NE(js, nullptr);
  const std::string code{js->data, js->size};
  EXPECT_NE(code.find(R"((ADDRESS_ACTIONS ? params.get("do"))"), std::string::npos)
    << "console.js acts on #do= only with address actions on";
  EXPECT_NE(code.find(R"(rest.delete("do"))"), std::string::npos)
    << "console.js takes #do= out of the address once read";
}
