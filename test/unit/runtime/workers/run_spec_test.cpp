#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <google/protobuf/util/message_differencer.h>
#include <sys/resource.h>

#include "messages/error.hpp"
#include "runtime/workers/run_spec.hpp"

using namespace astraeus;

namespace {

using group_list = std::vector<std::pair<std::string, uint32_t>>;

std::string fixture_text(const std::string& name) {
  std::ifstream in{std::string{ASTRAEUS_FIXTURES} + "/runs/" + name};
  EXPECT_TRUE(in) << "missing fixture " << name;
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

caf::expected<v1::RunSpec> parse_fixture(const std::string& name) {
  return parse_run_spec(fixture_text(name), name);
}

/// The error text of parsing `text`, or "parsed" when it parses.
std::string parse_error(const std::string& text) {
  auto spec = parse_run_spec(text, "t.yaml");
  if (spec)
    return "parsed";
  EXPECT_EQ(spec.error(), ec::invalid_request);
  return render_error(spec.error());
}

/// The error text of validating `text` (which must parse), or "valid".
std::string validation_error(const std::string& text) {
  auto spec = parse_run_spec(text, "t.yaml");
  if (!spec)
    return "did not parse: " + render_error(spec.error());
  auto err = validate_run_spec(*spec);
  if (!err)
    return "valid";
  EXPECT_EQ(err, ec::invalid_request);
  return render_error(err);
}

const std::string base = "name: r\nimage: busybox\n";

std::vector<std::string> strings(const google::protobuf::RepeatedPtrField<
                                 std::string>& xs) {
  return {xs.begin(), xs.end()};
}

bool same(const v1::RunSpec& a, const v1::RunSpec& b) {
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

} // namespace

// -- fixtures -----------------------------------------------------------------

TEST(RunSpec, WhoamiFixtureIsTheSeedsBusyboxRun) {
  auto spec = parse_fixture("whoami.yaml");
  ASSERT_TRUE(spec) << render_error(spec.error());
  EXPECT_EQ(validate_run_spec(*spec), caf::none);
  EXPECT_EQ(spec->name(), "whoami");
  EXPECT_EQ(spec->image(), "busybox");
  EXPECT_EQ(strings(spec->command()),
            (std::vector<std::string>{
              "sh", "-c",
              "env | grep -E \"^(ASTRAEUS|SLURM|RANK|WORLD|MASTER)\" | sort; "
              "id; df -h /dev/shm"}));
  EXPECT_EQ(spec->cpus_per_worker(), 1.0);
  EXPECT_EQ(spec->memory_bytes_per_worker(), 256ull << 20);
  EXPECT_EQ(spec->gpus_per_worker(), 0u);
  EXPECT_EQ(spec->workers(), 1u); // neither workers nor task_groups: 1
  EXPECT_TRUE(spec->task_groups().empty());
  EXPECT_EQ(spec->time_limit_seconds(), 0u);
  EXPECT_EQ(run_world_size(*spec), 1u);
  EXPECT_EQ(run_groups_in_rank_order(*spec), (group_list{{"default", 1}}));
}

TEST(RunSpec, LlmTrainFixtureHasALeaderGroupAndTrainers) {
  auto spec = parse_fixture("llm-train.json");
  ASSERT_TRUE(spec) << render_error(spec.error());
  EXPECT_EQ(validate_run_spec(*spec), caf::none);
  EXPECT_EQ(spec->name(), "llm-train");
  EXPECT_EQ(spec->workspace(), "vision");
  EXPECT_EQ(spec->image(), "ghcr.io/acme/llm-train:2.3");
  // args are appended to command.
  EXPECT_EQ(strings(spec->command()),
            (std::vector<std::string>{"torchrun", "--nnodes", "5",
                                      "--nproc-per-node", "8", "train.py",
                                      "--config", "configs/70b.yaml"}));
  EXPECT_EQ(spec->env().size(), 2u);
  EXPECT_EQ(spec->env().at("NCCL_DEBUG"), "INFO");
  EXPECT_EQ(spec->env().at("OMP_NUM_THREADS"), "8");
  EXPECT_EQ(spec->gpus_per_worker(), 8u);
  EXPECT_EQ(spec->cpus_per_worker(), 96.0);
  EXPECT_EQ(spec->memory_bytes_per_worker(), 1536ull << 30);
  EXPECT_EQ(spec->workers(), 0u); // task_groups give the size
  ASSERT_EQ(spec->task_groups_size(), 2);
  EXPECT_EQ(spec->task_groups(0).name(), "launcher");
  EXPECT_EQ(spec->task_groups(0).size(), 1u);
  EXPECT_TRUE(spec->task_groups(0).leader());
  EXPECT_EQ(spec->task_groups(1).name(), "trainers");
  EXPECT_EQ(spec->task_groups(1).size(), 4u);
  EXPECT_FALSE(spec->task_groups(1).leader());
  EXPECT_EQ(spec->pool(), "h100");
  EXPECT_EQ(spec->labels().at("topology.astraeus.io/site"), "east");
  EXPECT_TRUE(spec->healthy_only());
  EXPECT_EQ(spec->time_limit_seconds(), 7200u); // time_limit: "2h"
  EXPECT_EQ(spec->array_size(), 0u);
  EXPECT_EQ(run_world_size(*spec), 5u);
  EXPECT_EQ(run_groups_in_rank_order(*spec),
            (group_list{{"launcher", 1}, {"trainers", 4}}));
}

TEST(RunSpec, ArrayFixture) {
  auto spec = parse_fixture("array.yaml");
  ASSERT_TRUE(spec) << render_error(spec.error());
  EXPECT_EQ(validate_run_spec(*spec), caf::none);
  EXPECT_EQ(spec->name(), "sweep");
  EXPECT_EQ(spec->array_size(), 10u);
  EXPECT_EQ(strings(spec->command()),
            (std::vector<std::string>{"python", "sweep.py", "--trials", "4"}));
  EXPECT_EQ(spec->gpus_per_worker(), 1u);
  EXPECT_EQ(spec->cpus_per_worker(), 7.5);
  EXPECT_EQ(spec->memory_bytes_per_worker(), 64ull << 30);
  EXPECT_EQ(spec->time_limit_seconds(), 3600u);
  EXPECT_EQ(run_world_size(*spec), 1u);
}

TEST(RunSpec, BrokenFixturesNameTheField) {
  auto error_of = [](const std::string& name) {
    auto spec = parse_fixture(name);
    if (spec)
      return std::string{"parsed"};
    EXPECT_EQ(spec.error(), ec::invalid_request);
    return render_error(spec.error());
  };
  EXPECT_EQ(error_of("bad-unknown-field.yaml"),
            "bad-unknown-field.yaml:9: task_groups[1].sizee: unknown field "
            "(did you mean size?)");
  EXPECT_EQ(error_of("bad-memory.yaml"),
            "bad-memory.yaml:3: memory: \"256X\" is not a memory size (use "
            "256M, 16G, 16GiB, 1.5G or a number of bytes)");
  EXPECT_EQ(error_of("bad-wrong-type.json"),
            "bad-wrong-type.json:4: gpus: expected a whole number, got the "
            "string \"8\"");
  EXPECT_EQ(error_of("bad-syntax.yaml"),
            "bad-syntax.yaml:4:1: syntax error: end of sequence flow not "
            "found");
  // JSON with text after its closing brace is refused, not half-read.
  auto trailing = parse_run_spec(R"({"name": "a", "command": ["true"]} garbage)", "t.json");
  ASSERT_FALSE(trailing);
  EXPECT_NE(render_error(trailing.error()).find("t.json: not valid JSON: "), std::string::npos)
    << render_error(trailing.error());
  // A number past a double's range is an error too, not an exception.
  auto huge = parse_run_spec(R"({"name": "a", "gpus": 1e400})", "t.json");
  ASSERT_FALSE(huge);
  EXPECT_NE(render_error(huge.error()).find("t.json: not valid JSON: "), std::string::npos)
    << render_error(huge.error());
  // Two leaders parse (the message allows it) but do not validate.
  auto two = parse_fixture("bad-two-leaders.yaml");
  ASSERT_TRUE(two) << render_error(two.error());
  EXPECT_EQ(render_error(validate_run_spec(*two)),
            "task_groups: only one group can be the leader; 'launcher' and "
            "'trainers' are both marked leader");
}

// -- parsing ----------------------------------------------------------------

TEST(RunSpec, CommandStringRunsUnderShAndListRunsAsIs) {
  auto a = parse_run_spec(base + "command: python train.py\n", "t.yaml");
  ASSERT_TRUE(a) << render_error(a.error());
  EXPECT_EQ(strings(a->command()),
            (std::vector<std::string>{"sh", "-c", "python train.py"}));
  auto b = parse_run_spec(base + "command: [python, train.py]\n"
                                 "args: [--lr, '0.1']\n",
                          "t.yaml");
  ASSERT_TRUE(b) << render_error(b.error());
  EXPECT_EQ(strings(b->command()),
            (std::vector<std::string>{"python", "train.py", "--lr", "0.1"}));
  // Without command, args go to the image's ENTRYPOINT in place of its CMD.
  auto c = parse_run_spec(base + "args: [--lr]\n", "t.yaml");
  ASSERT_TRUE(c) << render_error(c.error());
  EXPECT_TRUE(c->command().empty());
  EXPECT_EQ(strings(c->args()), (std::vector<std::string>{"--lr"}));
}

TEST(RunSpec, OutputsTurnsOnTheOutputsFile) {
  // Seed, "Features you turn on": ASTRAEUS_OUTPUTS with `outputs`.
  auto yaml = parse_run_spec(base + "outputs: true\n", "t.yaml");
  ASSERT_TRUE(yaml) << render_error(yaml.error());
  EXPECT_TRUE(yaml->outputs());
  auto json = parse_run_spec(R"({"name": "r", "image": "busybox", "outputs": true})", "t.json");
  ASSERT_TRUE(json) << render_error(json.error());
  EXPECT_TRUE(json->outputs());
  EXPECT_NE(to_yaml(*json).find("outputs: true\n"), std::string::npos) << to_yaml(*json);
  EXPECT_FALSE(parse_run_spec(base, "t.yaml")->outputs()) << "off unless asked for";
  EXPECT_EQ(parse_error(base + "outputs: \"yes\"\n"),
            "t.yaml:3: outputs: expected true or false, got the string \"yes\"");
}

TEST(RunSpec, CpuBurstAndUlimitsFromTheSecurityContext) {
  auto spec = parse_run_spec(base + "cpus: 4\ncpu_burst: true\nsecurity_context:\n"
                                    "  ulimits:\n"
                                    "    - {name: stack, soft: 67108864, hard: 67108864}\n"
                                    "    - {name: nofile, soft: -1, hard: -1}\n"
                                    "    - {name: core, soft: 0}\n",
                             "t.yaml");
  ASSERT_TRUE(spec) << render_error(spec.error());
  EXPECT_EQ(validate_run_spec(*spec), caf::none);
  EXPECT_TRUE(spec->cpu_burst());
  ASSERT_EQ(spec->ulimits_size(), 3);
  EXPECT_EQ(spec->ulimits(0).name(), "stack");
  EXPECT_EQ(spec->ulimits(0).soft(), 67108864);
  EXPECT_EQ(spec->ulimits(1).hard(), -1) << "-1 is unlimited";
  EXPECT_EQ(spec->ulimits(2).hard(), 0) << "hard defaults to soft";
  auto back = parse_run_spec(to_yaml(*spec), "to_yaml");
  ASSERT_TRUE(back) << render_error(back.error()) << to_yaml(*spec);
  EXPECT_EQ(back->SerializeAsString(), spec->SerializeAsString()) << to_yaml(*spec);
  EXPECT_EQ(rlimit_resource("stack"), RLIMIT_STACK);
  EXPECT_EQ(rlimit_resource("STACK"), std::nullopt);
}

TEST(RunSpec, BadUlimitsNameTheEntry) {
  const std::string sc = base + "security_context:\n  ulimits:\n";
  EXPECT_EQ(validation_error(sc + "    - {name: nofile, soft: 1024}\n"
                                  "    - {name: stak, soft: 1}\n"),
            "security_context.ulimits[1].name: \"stak\" is not a resource limit (use "
            "one of as, core, cpu, data, fsize, locks, memlock, msgqueue, nice, nofile, "
            "nproc, rss, rtprio, rttime, sigpending, stack)");
  EXPECT_EQ(validation_error(sc + "    - {name: stack, soft: 2, hard: 1}\n"),
            "security_context.ulimits[0]: soft 2 is above hard 1");
  EXPECT_EQ(validation_error(sc + "    - {name: stack, soft: 1}\n"
                                  "    - {name: stack, soft: 2}\n"),
            "security_context.ulimits[1].name: stack is limited twice");
  EXPECT_EQ(parse_error(sc + "    - {name: stack, soft: -2}\n"),
            "t.yaml:5: security_context.ulimits[0].soft: expected a whole number or -1 "
            "(unlimited), got \"-2\"");
  EXPECT_EQ(parse_error(sc + "    - {name: stack}\n"),
            "t.yaml:5: security_context.ulimits[0].soft: missing (a whole number, or -1 "
            "for unlimited)");
  EXPECT_EQ(parse_error(base + "security_context: {ipc_modes: host}\n"),
            "t.yaml:3: security_context.ipc_modes: unknown field (did you mean ipc_mode?)");
}

TEST(RunSpec, TypesAreStrict) {
  EXPECT_EQ(parse_error(base + "workers: two\n"),
            "t.yaml:3: workers: expected a whole number, got \"two\"");
  EXPECT_EQ(parse_error(base + "workers: -1\n"),
            "t.yaml:3: workers: expected a whole number, got \"-1\"");
  EXPECT_EQ(parse_error(base + "workers: 1.5\n"),
            "t.yaml:3: workers: expected a whole number, got \"1.5\"");
  EXPECT_EQ(parse_error(base + "gpus: 4294967296\n"),
            "t.yaml:3: gpus: \"4294967296\" is too large (at most "
            "4294967295)");
  EXPECT_EQ(parse_error(base + "cpus: many\n"),
            "t.yaml:3: cpus: expected a number, got \"many\"");
  EXPECT_EQ(parse_error(base + "cpus: 0x10\n"),
            "t.yaml:3: cpus: expected a number, got \"0x10\"");
  EXPECT_EQ(parse_error(base + "gpu_requests: {healthy_only: \"true\"}\n"),
            "t.yaml:3: gpu_requests.healthy_only: expected true or false, got "
            "the string \"true\"");
  EXPECT_EQ(parse_error(base + "env: [A, B]\n"),
            "t.yaml:3: env: expected a map of strings, got a list");
  EXPECT_EQ(parse_error(base + "env: {A: {b: c}}\n"),
            "t.yaml:3: env.A: expected a string, got a map");
  EXPECT_EQ(parse_error(base + "labels: {a: }\n"),
            "t.yaml:3: labels.a: expected a string, got nothing");
  EXPECT_EQ(parse_error(base + "command: [sh, ~]\n"),
            "t.yaml:3: command[1]: expected a string, got nothing");
  EXPECT_EQ(parse_error(base + "task_groups: {name: a}\n"),
            "t.yaml:3: task_groups: expected a list of groups ({name, size, "
            "leader}), got a map");
  EXPECT_EQ(parse_error(base + "task_groups: [{name: a}]\n"),
            "t.yaml:3: task_groups[0].size: missing (how many workers the "
            "group has)");
  EXPECT_EQ(parse_error(base + "array: 10\n"),
            "t.yaml:3: array: expected a map, got \"10\"");
  EXPECT_EQ(parse_error("- a\n- b\n"),
            "t.yaml:1: expected a map of fields at the top level, got a list");
  EXPECT_EQ(parse_error("# nothing\n"), "t.yaml: the spec is empty");
  EXPECT_EQ(parse_error(std::string(max_run_spec_bytes + 1, ' ')),
            "t.yaml: the spec is larger than 1 MiB");
  // Text fields take any scalar as written.
  auto spec = parse_run_spec(base + "env: {OMP_NUM_THREADS: 8, ON: true}\n",
                             "t.yaml");
  ASSERT_TRUE(spec) << render_error(spec.error());
  EXPECT_EQ(spec->env().at("OMP_NUM_THREADS"), "8");
  EXPECT_EQ(spec->env().at("ON"), "true");
}

TEST(RunSpec, UnknownAndRepeatedFieldsAreErrors) {
  EXPECT_EQ(parse_error(base + "gpu: 8\n"),
            "t.yaml:3: gpu: unknown field (did you mean gpus?)");
  EXPECT_EQ(parse_error(base + "array: {count: 3}\n"),
            "t.yaml:3: array.count: unknown field (known fields: size)");
  EXPECT_EQ(parse_error(base + "gpu_requests: {healthy: true}\n"),
            "t.yaml:3: gpu_requests.healthy: unknown field (did you mean "
            "healthy_only?)");
  EXPECT_EQ(parse_error(base + "gpus: 1\ngpus: 2\n"),
            "t.yaml:4: gpus: given twice");
  EXPECT_EQ(parse_error(base + "env: {A: x, A: y}\n"),
            "t.yaml:3: env.A: given twice");
  EXPECT_EQ(parse_error(base + "time_limit: 2h\ntime_limit_seconds: 60\n"),
            "t.yaml:4: time_limit_seconds: give either time_limit or "
            "time_limit_seconds, not both");
}

TEST(RunSpec, NullMeansNotGiven) {
  auto spec = parse_run_spec("{\"name\": \"r\", \"image\": \"busybox\", "
                             "\"pool\": null, \"gpus\": null}",
                             "t.json");
  ASSERT_TRUE(spec) << render_error(spec.error());
  EXPECT_EQ(spec->pool(), "");
  EXPECT_EQ(spec->gpus_per_worker(), 0u);
}

TEST(RunSpec, TimeLimits) {
  auto seconds = [](const std::string& field) -> int64_t {
    auto spec = parse_run_spec(base + field + "\n", "t.yaml");
    if (!spec) {
      ADD_FAILURE() << render_error(spec.error());
      return -1;
    }
    return static_cast<int64_t>(spec->time_limit_seconds());
  };
  EXPECT_EQ(seconds("time_limit: 2h"), 7200);
  EXPECT_EQ(seconds("time_limit: 90m"), 5400);
  EXPECT_EQ(seconds("time_limit: 1h30m"), 5400);
  EXPECT_EQ(seconds("time_limit: 1d"), 86400);
  EXPECT_EQ(seconds("time_limit: 45s"), 45);
  EXPECT_EQ(seconds("time_limit: 600"), 600);
  EXPECT_EQ(seconds("time_limit_seconds: 7200"), 7200);
  EXPECT_EQ(parse_error(base + "time_limit: 2 hours\n"),
            "t.yaml:3: time_limit: \"2 hours\" is not a duration (use 2h, "
            "90m, 1h30m, 1d, 45s or a number of seconds)");
  EXPECT_EQ(parse_error(base + "time_limit_seconds: 2h\n"),
            "t.yaml:3: time_limit_seconds: expected a whole number, got "
            "\"2h\"");
  EXPECT_EQ(validation_error(base + "time_limit: 31d\n"),
            "time_limit_seconds: at most 30 days (2592000 s), got 2678400");
  EXPECT_EQ(validation_error(base + "time_limit: 30d\n"), "valid");
}

// -- memory sizes -------------------------------------------------------------

TEST(RunSpec, MemorySizes) {
  auto bytes = [](std::string_view text) -> uint64_t {
    auto x = parse_memory_size(text);
    if (!x) {
      ADD_FAILURE() << text << ": " << render_error(x.error());
      return 0;
    }
    return *x;
  };
  EXPECT_EQ(bytes("256M"), 256ull << 20); // Docker/Slurm: M is MiB
  EXPECT_EQ(bytes("256m"), 256ull << 20);
  EXPECT_EQ(bytes("16G"), 16ull << 30);
  EXPECT_EQ(bytes("16GiB"), 16ull << 30);
  EXPECT_EQ(bytes("16Gi"), 16ull << 30);
  EXPECT_EQ(bytes("512MiB"), 512ull << 20);
  EXPECT_EQ(bytes("1.5G"), 3ull << 29);
  EXPECT_EQ(bytes("0.5K"), 512u);
  EXPECT_EQ(bytes(".5M"), 512u << 10);
  EXPECT_EQ(bytes("0.3K"), 307u); // rounded down to a whole byte
  EXPECT_EQ(bytes("2T"), 2ull << 40);
  EXPECT_EQ(bytes("4k"), 4096u);
  EXPECT_EQ(bytes("100MB"), 100000000u); // powers of 1000, as in the config
  EXPECT_EQ(bytes("1GB"), 1000000000u);
  EXPECT_EQ(bytes("1073741824"), 1ull << 30);
  EXPECT_EQ(bytes("100B"), 100u);
  EXPECT_EQ(bytes(" 8 GiB "), 8ull << 30);
  EXPECT_EQ(bytes("0"), 0u);
  EXPECT_EQ(bytes("18446744073709551615"), 18446744073709551615ull);
  EXPECT_EQ(bytes("16777215.99999T"), (16777215ull << 40) + 1099500632659ull);

  auto error_of = [](std::string_view text) {
    auto x = parse_memory_size(text);
    if (x)
      return std::string{"parsed"};
    EXPECT_EQ(x.error(), ec::invalid_request);
    return render_error(x.error());
  };
  EXPECT_EQ(error_of("12X"), "\"12X\" is not a memory size (use 256M, 16G, "
                             "16GiB, 1.5G or a number of bytes)");
  EXPECT_EQ(error_of(""), "\"\" is not a memory size (use 256M, 16G, 16GiB, "
                          "1.5G or a number of bytes)");
  EXPECT_EQ(error_of("G"), "\"G\" is not a memory size (use 256M, 16G, 16GiB, "
                           "1.5G or a number of bytes)");
  EXPECT_EQ(error_of("-1G"), "\"-1G\" is not a memory size (use 256M, 16G, "
                             "16GiB, 1.5G or a number of bytes)");
  EXPECT_EQ(error_of("1.2.3G"), "\"1.2.3G\" is not a memory size (use 256M, "
                                "16G, 16GiB, 1.5G or a number of bytes)");
  EXPECT_EQ(error_of("1.5"), "\"1.5\" is not a memory size: a number of "
                             "bytes must be whole");
  EXPECT_EQ(error_of("16777216T"),
            "\"16777216T\" is too large for a memory size");
  EXPECT_EQ(error_of("18446744073709551616"),
            "\"18446744073709551616\" is too large for a memory size");
  EXPECT_EQ(error_of("99999999999999999999999999T"),
            "\"99999999999999999999999999T\" is too large for a memory size");
  // In a spec: a bare number is bytes, and lists are refused.
  auto spec = parse_run_spec(base + "memory: 1073741824\n", "t.yaml");
  ASSERT_TRUE(spec) << render_error(spec.error());
  EXPECT_EQ(spec->memory_bytes_per_worker(), 1ull << 30);
  EXPECT_EQ(parse_error(base + "memory: [1G]\n"),
            "t.yaml:3: memory: expected a memory size (256M, 16GiB) or a "
            "number of bytes, got a list");
}

// -- shape ----------------------------------------------------------------

TEST(RunSpec, WorldSizeAndRankOrderPutTheLeaderGroupFirst) {
  auto spec = parse_run_spec(base + "task_groups:\n"
                                    "  - {name: trainers, size: 4}\n"
                                    "  - {name: evaluators, size: 2}\n"
                                    "  - {name: launcher, size: 1, leader: true}\n",
                             "t.yaml");
  ASSERT_TRUE(spec) << render_error(spec.error());
  EXPECT_EQ(validate_run_spec(*spec), caf::none);
  EXPECT_EQ(run_world_size(*spec), 7u);
  EXPECT_EQ(run_groups_in_rank_order(*spec),
            (group_list{{"launcher", 1}, {"trainers", 4}, {"evaluators", 2}}));
  // No group marked: the first one leads.
  spec->mutable_task_groups(2)->set_leader(false);
  EXPECT_EQ(validate_run_spec(*spec), caf::none);
  EXPECT_EQ(run_groups_in_rank_order(*spec),
            (group_list{{"trainers", 4}, {"evaluators", 2}, {"launcher", 1}}));
  // A plain worker count is one "default" group.
  auto plain = parse_run_spec(base + "workers: 3\n", "t.yaml");
  ASSERT_TRUE(plain) << render_error(plain.error());
  EXPECT_EQ(run_world_size(*plain), 3u);
  EXPECT_EQ(run_groups_in_rank_order(*plain), (group_list{{"default", 3}}));
  // workers: 1 beside task_groups is allowed and ignored.
  auto one = parse_run_spec(base + "workers: 1\n"
                                   "task_groups: [{name: a, size: 2}]\n",
                            "t.yaml");
  ASSERT_TRUE(one) << render_error(one.error());
  EXPECT_EQ(validate_run_spec(*one), caf::none);
  EXPECT_EQ(run_world_size(*one), 2u);
  // Sizes saturate instead of wrapping.
  v1::RunSpec big;
  for (auto name : {"a", "b"}) {
    auto g = big.add_task_groups();
    g->set_name(name);
    g->set_size(4000000000u);
  }
  EXPECT_EQ(run_world_size(big), 4294967295u);
}

// -- validation -------------------------------------------------------------

TEST(RunSpec, ValidationErrorsNameTheField) {
  EXPECT_EQ(validation_error(base), "valid");
  EXPECT_EQ(validation_error("image: busybox\n"), "name: a run needs a name");
  EXPECT_EQ(validation_error("name: My_Run\nimage: busybox\n"),
            "name: \"My_Run\" is not a valid run name (use 1-63 letters, "
            "digits and '-', starting with a letter or digit)");
  EXPECT_EQ(validation_error("name: -run\nimage: busybox\n"),
            "name: \"-run\" is not a valid run name (use 1-63 letters, "
            "digits and '-', starting with a letter or digit)");
  EXPECT_EQ(validation_error("name: " + std::string(63, 'a')
                             + "\nimage: busybox\n"),
            "valid");
  EXPECT_EQ(validation_error("name: " + std::string(64, 'a')
                             + "\nimage: busybox\n"),
            "name: \"" + std::string(57, 'a')
              + "\"... is not a valid run name (use 1-63 letters, digits "
                "and '-', starting with a letter or digit)");
  EXPECT_EQ(validation_error("name: Run-1\nimage: busybox\n"), "valid");
  EXPECT_EQ(validation_error("name: r\n"),
            "image: a run needs an image or a command");
  EXPECT_EQ(validation_error("name: r\nimage: ..\n"),
            "image: \"..\" has a '..' component: name an image of the machine's images "
            "folder, or give its absolute path");
  EXPECT_EQ(validation_error("name: r\nimage: a/../../x\n").rfind("image: ", 0), 0u);
  EXPECT_EQ(validation_error("name: r\nimage: ghcr.io/acme/llm..x:2.3\n"), "valid");
  EXPECT_EQ(validation_error("name: r\ncommand: [/bin/true]\n"), "valid");
  EXPECT_EQ(validation_error(base + "command: ['', x]\n"),
            "command[0]: the program to run is empty");
  EXPECT_EQ(validation_error(base + "workers: 0\n"),
            "workers: a run needs at least 1 worker");
  EXPECT_EQ(validation_error(base + "workers: 2\n"
                                    "task_groups: [{name: a, size: 3}]\n"),
            "workers: give either workers or task_groups, not both (the "
            "groups have 3 workers in all)");
  EXPECT_EQ(validation_error(base + "task_groups:\n"
                                    "  - {name: trainer, size: 1}\n"
                                    "  - {name: trainer, size: 2}\n"),
            "task_groups: two groups are named 'trainer'");
  EXPECT_EQ(validation_error(base + "task_groups: [{name: a, size: 0}]\n"),
            "task_groups[0].size: group 'a' needs at least 1 worker");
  EXPECT_EQ(validation_error(base + "task_groups: [{size: 1}]\n"),
            "task_groups[0].name: a group needs a name");
  EXPECT_EQ(validation_error(base + "task_groups: [{name: a, size: 1}, "
                                    "{name: b.c, size: 1}]\n"),
            "task_groups[1].name: \"b.c\" is not a valid group name (use "
            "1-63 letters, digits and '-', starting with a letter or digit)");
  EXPECT_EQ(validation_error(base + "task_groups: [{name: a, size: "
                                    "4000000000}, {name: b, size: "
                                    "4000000000}]\n"),
            "task_groups: 8000000000 workers in all is too many (at most "
            "4294967295)");
  // A run's size is capped before anything is stored or placed.
  EXPECT_EQ(validation_error(base + "workers: 16384\n"), "valid");
  EXPECT_EQ(validation_error(base + "workers: 100000000\n"),
            "workers: 100000000 workers is too many for one run (at most 16384)");
  EXPECT_EQ(validation_error(base + "task_groups: [{name: a, size: 10000}, "
                                    "{name: b, size: 10000}]\n"),
            "task_groups: 20000 workers is too many for one run (at most 16384)");
  EXPECT_EQ(validation_error(base + "workers: 11\narray: {size: 10000}\n"),
            "array.size: 10000 copies of 11 worker(s) is 110000 workers, too many "
            "(at most 100000 in all)");
  EXPECT_EQ(validation_error(base + "gpus: 64\n"), "valid");
  EXPECT_EQ(validation_error(base + "gpus: 65\n"),
            "gpus: at most 64 GPUs per worker, got 65");
  EXPECT_EQ(validation_error(base + "cpus: -1\n"),
            "cpus: must be a number of cores, 0 or more, got -1");
  EXPECT_EQ(validation_error(base + "array: {size: 10000}\n"), "valid");
  EXPECT_EQ(validation_error(base + "array: {size: 10001}\n"),
            "array.size: at most 10000 copies of a run, got 10001");
  EXPECT_EQ(validation_error(base + "time_limit_seconds: 2592001\n"),
            "time_limit_seconds: at most 30 days (2592000 s), got 2592001");
  EXPECT_EQ(validation_error(base + "env: {\"A=B\": x}\n"),
            "env: \"A=B\" is not a variable name (it holds '=' or a NUL)");
  EXPECT_EQ(validation_error(base + "env: {\"\": x}\n"),
            "env: a variable needs a name");
  EXPECT_EQ(validation_error(base + "env: {\"BAD KEY\": x}\n"),
            "env: \"BAD KEY\" is not a variable name (use letters, digits, '_', '-' and '.', "
            "not starting with a digit)");
  EXPECT_EQ(validation_error(base + "env: {\"1X\": x}\n").rfind("env: \"1X\" is not", 0), 0u);
  EXPECT_EQ(validation_error(base + "env: {NCCL_IB_HCA: \"=mlx5_0\", my.key-2: x}\n"), "valid");
  EXPECT_EQ(validation_error(base + "labels: {\"\": x}\n"),
            "labels: a label needs a key");
  EXPECT_EQ(validation_error(base + "pool: h100\nlabels: {pool: a100}\n"),
            "labels.pool: 'a100' contradicts pool 'h100' (set pool only)");
  EXPECT_EQ(validation_error(base + "pool: h100\nlabels: {pool: h100}\n"),
            "valid");
  v1::RunSpec nan_cpus;
  nan_cpus.set_name("r");
  nan_cpus.set_image("busybox");
  nan_cpus.set_workers(1);
  nan_cpus.set_cpus_per_worker(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(render_error(validate_run_spec(nan_cpus)),
            "cpus: must be a number of cores, 0 or more, got nan");
}

// -- round trip -------------------------------------------------------------

TEST(RunSpec, RoundTripsThroughYaml) {
  for (auto name : {"whoami.yaml", "llm-train.json", "array.yaml"}) {
    SCOPED_TRACE(name);
    auto spec = parse_fixture(name);
    ASSERT_TRUE(spec) << render_error(spec.error());
    auto text = to_yaml(*spec);
    auto back = parse_run_spec(text, "to_yaml");
    ASSERT_TRUE(back) << render_error(back.error()) << "\n" << text;
    EXPECT_TRUE(same(*spec, *back)) << text << "\n---\n"
                                    << spec->DebugString() << "\n---\n"
                                    << back->DebugString();
    EXPECT_EQ(to_yaml(*back), text);
  }
  // Awkward text survives: YAML keywords, numbers, quotes, newlines.
  v1::RunSpec odd;
  odd.set_name("odd-1");
  odd.set_image("registry:5000/x:1.0");
  for (auto arg : {"null", "~", "true", "8", "", "a: b", "- x", "#x",
                   "two\nlines", " lead", "0x10", "'q'", "\"dq\"", "é",
                   "[1, 2]", "{a: b}", "*alias", "&anchor", "!tag", "|",
                   ">", "%", "@", "`"})
    odd.add_command(arg);
  (*odd.mutable_env())["EMPTY"] = "";
  (*odd.mutable_env())["NUM"] = "007";
  (*odd.mutable_env())["NUL"] = "null";
  (*odd.mutable_labels())["topology.astraeus.io/rack"] = "r 1";
  odd.set_gpus_per_worker(3);
  odd.set_cpus_per_worker(0.1);
  odd.set_memory_bytes_per_worker((3ull << 30) + 1);
  odd.set_workers(2);
  odd.set_array_size(7);
  odd.set_pool("true");
  odd.set_healthy_only(true);
  odd.set_time_limit_seconds(2592000);
  odd.set_workspace("ws");
  odd.set_outputs(true);
  ASSERT_EQ(validate_run_spec(odd), caf::none);
  auto text = to_yaml(odd);
  auto back = parse_run_spec(text, "to_yaml");
  ASSERT_TRUE(back) << render_error(back.error()) << "\n" << text;
  EXPECT_TRUE(same(odd, *back)) << text << "\n---\n" << back->DebugString();
}

TEST(RunSpec, ToYamlIsReadable) {
  auto spec = parse_fixture("llm-train.json");
  ASSERT_TRUE(spec) << render_error(spec.error());
  EXPECT_EQ(to_yaml(*spec),
            "name: llm-train\n"
            "workspace: vision\n"
            "image: ghcr.io/acme/llm-train:2.3\n"
            "command:\n"
            "  - torchrun\n"
            "  - --nnodes\n"
            "  - 5\n"
            "  - --nproc-per-node\n"
            "  - 8\n"
            "  - train.py\n"
            "  - --config\n"
            "  - configs/70b.yaml\n"
            "env:\n"
            "  NCCL_DEBUG: INFO\n"
            "  OMP_NUM_THREADS: 8\n"
            "gpus: 8\n"
            "cpus: 96\n"
            "memory: 1536GiB\n"
            "task_groups:\n"
            "  - {name: launcher, size: 1, leader: true}\n"
            "  - {name: trainers, size: 4}\n"
            "pool: h100\n"
            "labels:\n"
            "  topology.astraeus.io/site: east\n"
            "gpu_requests:\n"
            "  healthy_only: true\n"
            "time_limit_seconds: 7200\n");
}

// issue 22: `rdma: true` asks for the machine's RDMA devices, in YAML and
// JSON, and survives the round trip.
TEST(RunSpec, RdmaIsABooleanInYamlAndJson) {
  auto spec = parse_run_spec(base + "gpus: 8\nrdma: true\n", "t.yaml");
  ASSERT_TRUE(spec) << render_error(spec.error());
  EXPECT_TRUE(spec->rdma());
  auto back = parse_run_spec(to_yaml(*spec), "to_yaml");
  ASSERT_TRUE(back) << render_error(back.error());
  EXPECT_TRUE(back->rdma());
  auto json = parse_run_spec(R"({"name": "t", "image": "busybox", "command": ["true"],
                                 "rdma": true})",
                             "t.json");
  ASSERT_TRUE(json) << render_error(json.error());
  EXPECT_TRUE(json->rdma());
  auto bad = parse_run_spec(base + "rdma: maybe\n", "t.yaml");
  EXPECT_FALSE(bad);
}

// A new-user trial: `astra slurm sbatch job.sbatch` without --image was
// accepted and then failed at start ("configs ... need the runc runtime"):
// without an image the machine runs a host process. Refused at submit.
TEST(RunSpec, ConfigsVolumesOrAUserWithoutAnImageAreRefusedAtSubmit) {
  v1::RunSpec spec;
  spec.set_name("job");
  spec.set_workers(1);
  spec.add_command("/bin/sh");
  spec.add_command("/astra/job.sbatch");
  auto* c = spec.add_configs();
  c->set_name("script");
  auto* m = c->add_mounts();
  m->set_mount_path("/astra/job.sbatch");
  m->set_content("#!/bin/sh\necho hi\n");
  EXPECT_EQ(render_error(validate_run_spec(spec)),
            "image: task_template.user, volumes, configs and ipc_mode need the runc runtime, "
            "which runs an image; give one (--image busybox works on any machine)");
  spec.set_image("busybox");
  EXPECT_EQ(validate_run_spec(spec), caf::none);
}

// A sixth new-user trial: `astra slurm sbatch` on a machine whose workers run
// as host processes failed with "task_template.user, volumes, configs and
// ipc_mode need the runc runtime", none of which the user had set: the
// script is a config. The agent now names the fields the run has.
TEST(RunSpec, TheFieldsOnlyRuncGivesAreNamedAsTheRunHasThem) {
  v1::RunSpec spec;
  EXPECT_EQ(runc_only_fields(spec), "");
  spec.add_configs()->set_name("sbatch");
  EXPECT_EQ(runc_only_fields(spec), "configs (sbatch: the batch script of astra slurm sbatch)");
  spec.add_volumes()->set_name("data");
  spec.add_volumes()->set_name("ckpt");
  spec.set_user("1000");
  EXPECT_EQ(runc_only_fields(spec),
            "task_template.user, volumes (data, ckpt) and configs (sbatch: the batch script "
            "of astra slurm sbatch)");
}
