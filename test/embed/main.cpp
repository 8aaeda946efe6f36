// Starts the controller's actors inside this program's own actor system,
// registers a machine with a typed message, and lists it.
#include <cstdio>
#include <filesystem>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/controller/controller.hpp"
#include "messages/error.hpp"
#include "runtime/process/system_setup.hpp"
#include "runtime/gate/tokens.hpp"
#include "runtime/process/wall_clock.hpp"

int main(int argc, char** argv) {
  if (argc < 2)
    return 2;
  caf::actor_system_config cfg;
  astraeus::configure_actor_system(cfg);
  caf::actor_system sys{cfg};
  astraeus::ControllerConfig cc;
  cc.data_dir = argv[1];
  cc.listen_port = 0;
  auto ctl = astraeus::start_controller(sys, cc);
  if (!ctl) {
    std::fprintf(stderr, "%s\n", astraeus::render_error(ctl.error()).c_str());
    return 1;
  }
  caf::scoped_actor self{sys};
  // A machine joins with a join token and the Ed25519 key its channel
  // proved (here: made up, as an embedder's own transport would fill it).
  auto join = ctl->tokens->mint_join({{"pool", "embedded"}}, 600, "embedder",
                                     astraeus::unix_ms_now());
  if (!join) {
    std::fprintf(stderr, "%s\n", astraeus::render_error(join.error()).c_str());
    return 1;
  }
  astraeus::v1::Hello hello;
  hello.set_protocol_version(2);
  hello.set_role(astraeus::v1::AGENT);
  hello.set_machine_name("embedded-01");
  hello.set_machine_id("0123456789abcdef0123456789abcdef");
  hello.set_identity_key(std::string(32, '\x01'));
  hello.set_join_token(join->first);
  int rc = 1;
  self->request(ctl->cluster, caf::infinite, astraeus::atom::enrol_v, hello, uint64_t{1})
    .receive([&](astraeus::machine_actor&) { rc = 0; },
             [&](caf::error& err) {
               std::fprintf(stderr, "%s\n", astraeus::render_error(err).c_str());
             });
  astraeus::v1::Request req;
  req.mutable_list_machines();
  // Requests carry their caller; the embedder vouches for it.
  req.mutable_caller()->set_name("embedder");
  req.mutable_caller()->set_role("owner");
  self->request(ctl->cluster, caf::infinite, req)
    .receive(
      [&](astraeus::v1::Response& resp) {
        if (resp.machines().machines_size() != 1)
          rc = 1;
        else
          std::printf("embedded controller lists %s (%s)\n",
                      resp.machines().machines(0).name().c_str(),
                      astraeus::v1::Machine::State_Name(
                        resp.machines().machines(0).state()).c_str());
      },
      [&](caf::error&) { rc = 1; });
  astraeus::stop_controller(sys, *ctl);
  return rc;
}
