// The run-spec fields as shared/seeds/inside-a-worker.md spells them
// (issue 16): task_template.user, cpu_cores, memory_bytes, per_gpu,
// node_fraction, volumes, configs, security_context.ipc_mode, args without
// a command, and the fields refused as "not supported yet".

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "messages/error.hpp"
#include "runtime/workers/run_spec.hpp"

using namespace astraeus;

namespace {

const std::string base = "name: r\nimage: busybox\n";

/// What becomes of `text`: its parse error, else its validation error, else
/// "valid".
std::string outcome(const std::string& text) {
  auto spec = parse_run_spec(text, "t.yaml");
  if (!spec)
    return render_error(spec.error());
  auto err = validate_run_spec(*spec);
  return err ? render_error(err) : "valid";
}

/// A spec's fields after `base`, and what becomes of them.
struct expectation {
  std::string fields;
  std::string outcome;
};

void expect_outcomes(const std::vector<expectation>& cases) {
  for (const auto& c : cases)
    EXPECT_EQ(outcome(base + c.fields), c.outcome) << c.fields;
}

v1::RunSpec parsed(const std::string& text) {
  auto spec = parse_run_spec(text, "t.yaml");
  EXPECT_TRUE(spec) << render_error(spec.error());
  return spec ? *spec : v1::RunSpec{};
}

} // namespace

TEST(RunSpecSeed, UserLimitsAndFractionMapOntoTheSameFields) {
  auto s = parsed(base + "task_template: {user: \"1000:100\"}\ncpu_cores: 2.5\n"
                         "memory_bytes: 268435456\n");
  EXPECT_EQ(s.user(), "1000:100");
  EXPECT_DOUBLE_EQ(s.cpus_per_worker(), 2.5);
  EXPECT_EQ(s.memory_bytes_per_worker(), 256u << 20);
  EXPECT_EQ(parsed(base + "memory_bytes: 16GiB\n").memory_bytes_per_worker(), 16ull << 30);
  // per_gpu.memory_bytes x GPUs, whatever the order of the fields.
  EXPECT_EQ(parsed(base + "per_gpu: {memory_bytes: 64GiB}\ngpus: 8\n").memory_bytes_per_worker(),
            512ull << 30);
  EXPECT_EQ(parsed(base + "node_fraction: 0.5\n").node_fraction(), 0.5);
  expect_outcomes({
      {"node_fraction: 1\n",
       "valid"},
      {"task_template: {user: nobody}\n",
       "valid"},
      {"task_template: {user: \"0:0\"}\n",
       "valid"},
  });
}

TEST(RunSpecSeed, BadLimitsAreRefusedNamingTheField) {
  expect_outcomes({
      {"cpus: 1\ncpu_cores: 2\n",
       "t.yaml:4: cpu_cores: give either cpus or cpu_cores, not both"},
      {"memory: 1G\nmemory_bytes: 1G\n",
       "t.yaml:4: memory_bytes: give either memory or memory_bytes, not both"},
      {"memory_bytes: 1G\nper_gpu: {memory_bytes: 1G}\ngpus: 1\n",
       "t.yaml:4: per_gpu.memory_bytes: give either memory_bytes or "
         "per_gpu.memory_bytes, not both"},
      {"memory_bytes: -5\n",
       "t.yaml:3: memory_bytes: a memory size cannot be negative, got \"-5\""},
      {"cpu_cores: -1\n",
       "t.yaml:3: cpu_cores: a number of cores cannot be negative, got \"-1\""},
      {"cpu_cores: four\n",
       "t.yaml:3: cpu_cores: expected a number, got \"four\""},
      {"per_gpu: {memory_bytes: 1G}\n",
       "t.yaml:3: per_gpu.memory_bytes: needs gpus (the memory is per GPU; without "
         "GPUs use memory_bytes)"},
      {"task_template: {user: [a]}\n",
       "t.yaml:3: task_template.user: expected a string, got a list"},
      {"task_template: {image: x}\n",
       "t.yaml:3: task_template.image: unknown field (known fields: user)"},
      {"node_fraction: 1.5\n",
       "node_fraction: must be more than 0 and at most 1, got 1.5"},
      {"node_fraction: -0.5\n",
       "node_fraction: must be more than 0 and at most 1, got -0.5"},
      {"node_fraction: 0.5\ncpus: 2\n",
       "node_fraction: a node_fraction worker has no CPU or memory limit; leave out "
         "cpus and memory"},
      {"task_template: {user: \"a b\"}\n",
       "task_template.user: \"a b\" is not a user (use a name, a uid or uid:gid)"},
      {"task_template: {user: \"1000:\"}\n",
       "task_template.user: \"1000:\" is not a user (use a name, a uid or uid:gid)"},
  });
}

TEST(RunSpecSeed, FieldsNotSupportedYetAreSaidSo) {
  for (auto field : {"datavolume_refs", "secret_refs", "identity", "model", "interactive",
                     "external_accesses", "tools"})
    EXPECT_EQ(outcome(base + field + ": [x]\n"),
              "t.yaml:3: not supported yet: " + std::string{field}
                + " (see the README's list of run-spec fields)");
  expect_outcomes({
      {"network: {egress: [{to: 0.0.0.0/0}]}\n",
       "t.yaml:3: not supported yet: network.egress (see the README's list of "
         "run-spec fields)"},
      {"network: {mode: host}\n",
       "t.yaml:3: network.mode: unknown field (it has no fields Astraeus runs yet)"},
      // gpus.md: "A sandboxed worker (isolation: sandbox, gVisor) cannot
      // have GPUs": not an unknown field.
      {"isolation: sandbox\n",
       "t.yaml:3: not supported yet: isolation (a gVisor sandbox; a sandboxed worker could "
       "not have GPUs)"},
      {"task_template: {isolation: sandbox}\n",
       "t.yaml:3: not supported yet: task_template.isolation (a gVisor sandbox; a sandboxed "
       "worker could not have GPUs)"},
  });
}

TEST(RunSpecSeed, VolumesAndConfigsAreRead) {
  auto s = parsed(base +
                  "volumes:\n"
                  "  - {name: scratch, type: EmptyDir, mount_path: /scratch}\n"
                  "  - {name: data, type: Bind, host_path: /srv/data, mount_path: /data}\n"
                  "  - {name: out, type: Bind, host_path: /srv/out, mount_path: /out, "
                  "mode: ReadWrite}\n"
                  "configs:\n"
                  "  - name: app\n"
                  "    mounts: [{mount_path: /etc/app.yaml, content: \"lr: 0.1\\n\"}]\n"
                  "security_context: {ipc_mode: host}\n");
  ASSERT_EQ(s.volumes_size(), 3);
  EXPECT_EQ(s.volumes(0).type(), "EmptyDir");
  EXPECT_EQ(s.volumes(0).mount_path(), "/scratch");
  EXPECT_EQ(s.volumes(1).host_path(), "/srv/data");
  EXPECT_FALSE(s.volumes(1).read_write());
  EXPECT_TRUE(s.volumes(2).read_write());
  ASSERT_EQ(s.configs_size(), 1);
  EXPECT_EQ(s.configs(0).mounts(0).content(), "lr: 0.1\n");
  EXPECT_EQ(s.ipc_mode(), "host");
  EXPECT_FALSE(validate_run_spec(s));
  // The YAML writer gives the same spec back.
  auto back = parse_run_spec(to_yaml(s), "to_yaml");
  ASSERT_TRUE(back) << render_error(back.error()) << to_yaml(s);
  EXPECT_EQ(back->SerializeAsString(), s.SerializeAsString()) << to_yaml(s);
}

TEST(RunSpecSeed, BadVolumesAreRefusedBeforeAnythingIsStored) {
  const std::string vol = "volumes:\n  - ";
  expect_outcomes({
      {vol + "{name: a, type: Tmp, mount_path: /a}\n",
       "t.yaml:4: volumes[0].type: \"Tmp\" is not a volume type (use EmptyDir or Bind)"},
      {vol + "{name: a, type: Bind, mount_path: /a}\n",
       "t.yaml:4: volumes[0].host_path: missing (the machine's path to mount)"},
      {vol + "{name: a, type: EmptyDir}\n",
       "t.yaml:4: volumes[0].mount_path: missing (where the worker sees it)"},
      {vol + "{name: a, type: Bind, host_path: /x, mount_path: /a, "
                              "mode: rw}\n",
       "t.yaml:4: volumes[0].mode: \"rw\" is not a mode (use ReadOnly or ReadWrite)"},
      {vol + "{name: a, type: EmptyDir, host_path: /x, mount_path: /a}\n",
       "t.yaml:4: volumes[0].host_path: only a Bind volume has one"},
      {"volumes: {name: a}\n",
       "t.yaml:3: volumes: expected a list of volumes ({name, type, "
         "mount_path, host_path, mode}), got a map"},
      {vol + "{name: a, type: EmptyDir, mount_path: scratch}\n",
       "volumes[0].mount_path: \"scratch\" is not an absolute path"},
      {vol + "{name: a, type: EmptyDir, mount_path: /a/../proc}\n",
       "volumes[0].mount_path: \"/a/../proc\" has a '..' part"},
      {vol + "{name: a, type: EmptyDir, mount_path: /}\n",
       "volumes[0].mount_path: cannot mount over /"},
      {vol + "{name: a, type: EmptyDir, mount_path: /dev/shm}\n",
       "volumes[0].mount_path: \"/dev/shm\" is under /dev, which the worker's "
         "runtime owns"},
      {vol + "{name: a, type: EmptyDir, mount_path: /a}\n"
                                   "  - {name: b, type: EmptyDir, mount_path: /a/}\n",
       "volumes[1].mount_path: \"/a/\" is mounted twice"},
      {vol + "{name: a, type: EmptyDir, mount_path: /a}\n"
                                   "  - {name: a, type: EmptyDir, mount_path: /b}\n",
       "volumes: two volumes are named 'a'"},
      {vol + "{name: a, type: Bind, host_path: data, mount_path: /a}\n",
       "volumes[0].host_path: \"data\" is not an absolute path of the machine "
         "(without '..')"},
      {vol + "{name: a, type: Bind, host_path: /srv/../etc, "
                                   "mount_path: /a}\n",
       "volumes[0].host_path: \"/srv/../etc\" is not an absolute path of the machine "
         "(without '..')"},
  // Whether workspace vision is granted /srv is the controller's check
  // (apply_workspace: it holds the workspace's grants).
      {vol + "{name: a, type: Bind, host_path: /srv, mount_path: /a}\n"
                                   "workspace: vision\n",
       "valid"},
      {vol + "{name: a, type: Bind, host_path: /srv, mount_path: /a}\n"
                                   "workspace: default\n",
       "valid"},
      {vol + "{name: a, type: EmptyDir, mount_path: /a}\n"
                                   "workspace: vision\n",
       "valid"},
  });
}

TEST(RunSpecSeed, BadConfigsAndIpcModesAreRefused) {
  expect_outcomes({
      {"configs: [{name: a, mounts: [{mount_path: /a}]}]\n",
       "t.yaml:3: configs[0].mounts[0].content: missing (the file's text)"},
      {"configs: [{name: a, mounts: [{mount_path: /proc/x, "
                                    "content: x}]}]\n",
       "configs[0].mounts[0].mount_path: \"/proc/x\" is under /proc, which the "
         "worker's runtime owns"},
      {"volumes: [{name: a, type: EmptyDir, mount_path: /a}]\n"
                                    "configs: [{mounts: [{mount_path: /a, content: x}]}]\n",
       "configs[0].mounts[0].mount_path: \"/a\" is mounted twice"},
      {"security_context: {ipc_mode: private}\n",
       "security_context.ipc_mode: \"private\" is not an IPC mode (use host, or leave "
         "it out)"},
      {"security_context: {ipc_mode: host}\nworkspace: vision\n", "valid"},
  });
  v1::RunSpec big = parsed(base);
  big.add_configs()->add_mounts()->set_mount_path("/etc/big");
  big.mutable_configs(0)->mutable_mounts(0)->set_content(std::string(max_run_config_bytes + 1, 'x'));
  EXPECT_EQ(render_error(validate_run_spec(big)),
         "configs[0].mounts[0].content: the configs' files hold more than 256 KiB in all "
         "(262145 bytes so far)");
  // The code and the configs together fit the one message a run travels in.
  big.mutable_configs(0)->mutable_mounts(0)->set_content(std::string(max_run_config_bytes, 'x'));
  big.set_code_tgz(std::string(max_run_code_bytes, 'x'));
  EXPECT_FALSE(validate_run_spec(big));
  big.mutable_env()->insert({"PAD", std::string(200 << 10, 'x')});
  auto err = render_error(validate_run_spec(big));
  EXPECT_NE(err.find("more than the 896 KiB one run may be"), std::string::npos) << err;
}

TEST(RunSpecSeed, CodeIsCappedAndOwnsWorkspace) {
  v1::RunSpec s = parsed(base);
  s.set_code_tgz(std::string(max_run_code_bytes + 1, 'x'));
  EXPECT_EQ(render_error(validate_run_spec(s)),
         "code: the packed code is 524289 bytes, more than the 512 KiB a run may carry");
  s.set_code_tgz("x");
  EXPECT_FALSE(validate_run_spec(s));
  s.add_volumes()->set_name("w");
  s.mutable_volumes(0)->set_type("EmptyDir");
  s.mutable_volumes(0)->set_mount_path("/workspace/data");
  EXPECT_EQ(render_error(validate_run_spec(s)),
         "volumes[0].mount_path: \"/workspace/data\" is under /workspace, where the "
         "run's code (--code) is");
}

TEST(RunSpecSeed, ArgsWithoutCommandNeedAnImage) {
  v1::RunSpec s;
  s.set_name("r");
  s.set_workers(1);
  s.add_command("true");
  s.clear_command();
  s.add_args("--x");
  s.add_command("sh");
  EXPECT_EQ(render_error(validate_run_spec(s)),
         "args: without command, args go to the image's ENTRYPOINT, and the run has no "
         "image");
}
