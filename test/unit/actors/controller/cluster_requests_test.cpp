// The cluster's request table (actors/controller/cluster_requests.hpp):
// every request body of the proto has exactly one row, with a handler and
// the role users were told it needs.

#include <set>
#include <string>

#include <gtest/gtest.h>

#include <google/protobuf/descriptor.h>

#include "actors/controller/cluster_requests.hpp"

using namespace astraeus;

namespace {

/// A request whose body is the oneof field numbered `number`.
v1::Request request_of(int number) {
  v1::Request req;
  const auto* field = v1::Request::descriptor()->FindFieldByNumber(number);
  req.GetReflection()->MutableMessage(&req, field);
  return req;
}

} // namespace

TEST(ClusterRequestTable, EveryRequestBodyOfTheProtoHasExactlyOneRowAndAHandler) {
  const auto* body = v1::Request::descriptor()->FindOneofByName("body");
  ASSERT_NE(body, nullptr);
  std::set<int> kinds;
  for (int i = 0; i < body->field_count(); ++i) {
    const auto* field = body->field(i);
    auto kind = static_cast<v1::Request::BodyCase>(field->number());
    kinds.insert(field->number());
    const auto* row = find_cluster_request(kind);
    ASSERT_NE(row, nullptr) << "no row in cluster_request_table() for Request."
                            << field->name()
                            << ": add one (actors/controller/cluster_requests.cpp)";
    EXPECT_NE(row->handler, nullptr) << field->name();
    EXPECT_EQ(request_of(field->number()).body_case(), kind) << field->name();
  }
  std::set<int> rows;
  for (const auto& row : cluster_request_table()) {
    EXPECT_TRUE(kinds.count(row.kind)) << "a row for a kind the proto lacks: " << row.kind;
    EXPECT_TRUE(rows.insert(row.kind).second) << "two rows for kind " << row.kind;
  }
  EXPECT_EQ(rows.size(), kinds.size());
}

TEST(ClusterRequestTable, ReadsAndRunsNeedAMemberAndActionsAnAdmin) {
  for (const char* name : {"list_machines", "get_machine", "list_gpus", "xid_policy",
                           "submit_run", "list_runs", "get_run", "delete_run",
                           "list_workspaces", "whoami", "get_logs"}) {
    auto req = request_of(v1::Request::descriptor()->FindFieldByName(name)->number());
    EXPECT_EQ(required_role(req), role::member) << name;
  }
  for (const char* name : {"set_cordon", "set_maintenance", "set_labels", "clear_fault",
                           "create_workspace", "create_join_token", "create_api_token",
                           "revoke_api_token", "list_audit"}) {
    auto req = request_of(v1::Request::descriptor()->FindFieldByName(name)->number());
    EXPECT_EQ(required_role(req), role::admin) << name;
  }
  // A body this build does not know (none set) needs an admin.
  EXPECT_EQ(required_role(v1::Request{}), role::admin);
}

TEST(ClusterRequestTable, AdminActionsAreAuditedUnderTheNamesUsersRead) {
  auto name_of = [](const v1::Request& req) -> std::string {
    const auto* row = find_cluster_request(req.body_case());
    return row != nullptr && row->audit_name != nullptr ? row->audit_name(req) : "";
  };
  v1::Request req;
  req.mutable_set_cordon()->set_cordoned(true);
  EXPECT_EQ(name_of(req), "cordon");
  req.mutable_set_cordon()->set_cordoned(false);
  EXPECT_EQ(name_of(req), "uncordon");
  req.mutable_set_maintenance()->set_maintenance(true);
  EXPECT_EQ(name_of(req), "maintenance on");
  req.mutable_set_maintenance()->set_maintenance(false);
  EXPECT_EQ(name_of(req), "maintenance off");
  req.mutable_set_labels();
  EXPECT_EQ(name_of(req), "label");
  req.mutable_clear_fault();
  EXPECT_EQ(name_of(req), "clear-fault");
  req.mutable_create_workspace();
  EXPECT_EQ(name_of(req), "create workspace");
  req.mutable_create_join_token();
  EXPECT_EQ(name_of(req), "create join token");
  req.mutable_create_api_token();
  EXPECT_EQ(name_of(req), "create API token");
  req.mutable_revoke_api_token();
  EXPECT_EQ(name_of(req), "revoke API token");
  req.mutable_list_machines();
  EXPECT_EQ(name_of(req), "") << "reads are not audited";
}

// Issue 22's seed name for a worker's GPUs is filled where runs are shown
// (the scheduler keeps them once, issue 14); a list drops config contents,
// every answer the packed code.
TEST(ClusterRunDisplay, WorkersShowTheirGpusAsAssignedGpuIdsAndListsDropContents) {
  v1::Run run;
  run.mutable_spec()->set_code_tgz("packed code");
  run.mutable_spec()->add_configs()->add_mounts()->set_content("lr: 0.1");
  auto* w = run.add_workers();
  w->add_gpu_ids("GPU-aaaa");
  w->add_gpu_ids("GPU-bbbb");
  auto shown = run;
  for_display(shown, false);
  ASSERT_EQ(shown.workers(0).assigned_gpu_ids_size(), 2);
  EXPECT_EQ(shown.workers(0).assigned_gpu_ids(1), "GPU-bbbb");
  EXPECT_EQ(shown.spec().code_tgz(), "");
  EXPECT_EQ(shown.spec().configs(0).mounts(0).content(), "lr: 0.1");
  for_display(shown, false);
  EXPECT_EQ(shown.workers(0).assigned_gpu_ids_size(), 2) << "shown twice, still once each";
  for_display(run, true);
  EXPECT_EQ(run.spec().configs(0).mounts(0).content(), "");
  EXPECT_EQ(run.workers(0).assigned_gpu_ids(0), "GPU-aaaa");
}
