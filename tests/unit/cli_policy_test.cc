// `egressctl policy check|compile` and the policy inputs of `run`, through
// the built binary: exit codes, stdout and stderr exactly as a user sees
// them.  No root needed (nothing here loads BPF).
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "userspace/policy/compiled_policy.h"
#include "userspace/policy/compiler.h"
#include "userspace/policy/floor.h"

namespace {

struct Result {
  int code = -1;
  std::string out, err;
};

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class Cli : public testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/egr-cli-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::string cmd = "rm -rf '" + dir_ + "'";
    ASSERT_EQ(system(cmd.c_str()), 0);
  }

  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }

  // egressctl ARGS with the test's public suffix list and a pin root of its
  // own (which nothing here may create).
  Result Ctl(std::vector<std::string> args, const char* psl = EGR_TESTDATA "/public_suffix_list.dat") {
    const std::string out = dir_ + "/stdout", err = dir_ + "/stderr";
    pid_t pid = fork();
    if (pid == 0) {
      int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      dup2(o, 1);
      dup2(e, 2);
      setenv("EGRESSD_PUBLIC_SUFFIX_LIST", psl, 1);
      setenv("EGRESSD_PIN_ROOT", (dir_ + "/pins").c_str(), 1);
      std::vector<char*> argv = {const_cast<char*>(EGRESSCTL_PATH)};
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, Slurp(out), Slurp(err)};
  }

  std::string dir_;
};

constexpr const char* kTask = R"(egress:
  allow:
    - target.example.com # the host this task assesses
    - '*.githubusercontent.com' # a wildcard suffix
    - 10.20.0.0/16 # a range, for a target with no name
)";

TEST_F(Cli, CheckAcceptsTheSeedsTaskWithItsWarnings) {
  Result r = Ctl({"policy", "check", "--policy", Write("task.yaml", kTask)});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "ok: default deny; allows 1 CIDR, 1 name, 1 wildcard; 7 protected CIDRs\n");
  EXPECT_EQ(r.err,
            "egressctl: warning: task egress.allow[1] \"*.githubusercontent.com\": a wildcard over "
            "the public suffix \"githubusercontent.com\" reaches every site registered under it\n"
            "egressctl: warning: names are resolved only by egressd's DNS proxy: "
            "\"target.example.com\", \"*.githubusercontent.com\" reach nothing from a sandbox "
            "whose DNS it does not serve (egressctl run serves its own; sandbox add needs "
            "--dns-endpoint4/6 and egressctl dns serve); addresses and CIDRs are enforced either way\n");
}

TEST_F(Cli, CheckWithNoInputsIsTheEmbeddedDefault) {
  Result r = Ctl({"policy", "check"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "ok: default allow; allows 0 CIDRs, 0 names, 0 wildcards; 7 protected CIDRs\n");
  EXPECT_EQ(r.err, "");
}

TEST_F(Cli, CheckExits2WithEveryProblemAtOnce) {
  const std::string deny = Write("deny.yaml", "egress: {deny: [prod.example.com]}\n");
  Result r = Ctl({"policy", "check", "--policy", deny, "--egress", "*", "--egress", "169.254.0.0/16",
                  "--kind", "Agent", "--grant", "192.0.2.1"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "egressctl: invalid input, nothing was changed:\n"
            "  task \"egress.deny\": unknown key; egress accepts one key, \"allow\" (there is no "
            "deny list: an allow list that omits a host keeps the sandbox off it)\n"
            "  --kind invalid workload kind \"Agent\"; valid: \"agent\", \"task\", \"runtime\"\n"
            "  orchestrator grant \"192.0.2.1\": expected ADDRESS:PORTS (a grant names its ports)\n"
            "  run --egress \"*\": is a bare *, which asks for the default rather than declaring a "
            "scope; name the destinations, or declare nothing to keep the default\n"
            "  run --egress \"169.254.0.0/16\": spans protected 169.254.169.254/32 (floor "
            "connected); declare narrower targets\n");
}

TEST_F(Cli, ConfigErrorsAndTargetErrorsTogether) {
  const std::string cfg = Write("egressd.yaml", "airgapped: true\nplatform: {modelGateway: 'http://litellm:4000'}\n");
  Result r = Ctl({"policy", "check", "--config", cfg, "--floor", "hosted", "--egress", "10.0.0.0/33"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "egressctl: invalid input, nothing was changed:\n"
            "  --floor \"hosted\": the deployment config sets the floor (airgapped, hostedEdge, "
            "protected); use one of --floor and --config\n"
            "  deployment setting platform.modelGateway \"http://litellm:4000\": single-label host "
            "\"litellm\": a rule cannot match it (the sandbox's resolver expands it through its "
            "search domains), so no sandbox of this airgapped deployment could reach this "
            "platform service; use the fully qualified name\n"
            "  run --egress \"10.0.0.0/33\": has prefix length 33; expected 0-32 for IPv4\n");
}

TEST_F(Cli, UnreadableFilesAreNamed) {
  Result r = Ctl({"policy", "check", "--policy", "/nonexistent/task.yaml", "--config", "/nonexistent/egressd.yaml"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "egressctl: invalid input, nothing was changed:\n"
            "  --config \"/nonexistent/egressd.yaml\": cannot be read\n"
            "  --policy \"/nonexistent/task.yaml\": cannot be read\n");
}

TEST_F(Cli, CompileTextIsTheCompiledPolicy) {
  const std::string cfg = Write("egressd.yaml", R"(hostedEdge: false
onDeny: drop
platform:
  api: https://api.platform.example
sandboxExtraEnv: {HF_ENDPOINT: "http://user:pw@198.51.100.9:8080"}
)");
  Result r = Ctl({"policy", "compile", "--config", cfg, "--kind", "agent", "--grant", "192.0.2.9:8080,8443",
                  "--egress", "Staging.Example.com."});
  EXPECT_EQ(r.code, 0) << r.err;
  std::vector<std::string> lines;
  std::stringstream s(r.out);
  for (std::string l; std::getline(s, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 14u) << r.out;
  EXPECT_EQ(lines[0].substr(0, 7), "policy ");
  const std::vector<std::string> tail(lines.begin() + 1, lines.end());
  EXPECT_EQ(tail, (std::vector<std::string>{
                      "default deny", "on_deny drop",
                      "protected 169.254.169.254/32 (floor connected)",
                      "protected 169.254.170.2/32 (floor connected)",
                      "protected 169.254.170.23/32 (floor connected)",
                      "protected fd00:ec2::254/128 (floor connected)",
                      "protected fd00:ec2::23/128 (floor connected)",
                      "protected 100.100.100.200/32 (floor connected)",
                      "protected 168.63.129.16/32 (floor connected)",
                      "allow 192.0.2.9/32 ports 8080,8443 (orchestrator grant)",
                      "allow 198.51.100.9/32 ports all (deployment setting sandboxExtraEnv.HF_ENDPOINT)",
                      "name api.platform.example (deployment setting platform.api)",
                      "name staging.example.com (run --egress)"}));
}

TEST_F(Cli, CompileJsonCarriesSourcesAndTheHash) {
  Result r = Ctl({"policy", "compile", "-o", "json", "--policy", Write("task.yaml", kTask),
                  "--egress", "192.0.2.1", "--on-deny", "drop", "--floor", "airgapped"});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["default"], "deny");
  EXPECT_EQ(j["on_deny"], "drop");
  EXPECT_EQ(j["protected"].size(), 7u);
  EXPECT_EQ(j["protected"][0]["source"], "floor airgapped");
  EXPECT_EQ(j["allowed"], nlohmann::json::parse(R"([
    {"cidr": "10.20.0.0/16", "ports": [], "source": "task"},
    {"cidr": "192.0.2.1/32", "ports": [], "source": "run --egress"}])"));
  EXPECT_EQ(j["names"], nlohmann::json::parse(R"([{"name": "target.example.com", "source": "task"}])"));
  EXPECT_EQ(j["wildcards"],
            nlohmann::json::parse(R"([{"wildcard": "*.githubusercontent.com", "source": "task"}])"));
  EXPECT_EQ(j["hash"].get<std::string>().size(), 16u);

  // The same inputs in another order hash alike.
  Result again = Ctl({"policy", "compile", "-o", "json", "--floor", "airgapped", "--on-deny", "drop",
                      "--egress", "192.0.2.1", "--policy", dir_ + "/task.yaml"});
  EXPECT_EQ(nlohmann::json::parse(again.out)["hash"], j["hash"]);
}

TEST_F(Cli, CompileRejectsAnUnknownFormat) {
  Result r = Ctl({"policy", "compile", "-o", "yaml"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("yaml"), std::string::npos) << r.err;
}

TEST_F(Cli, RuntimeDeclarationImpliesTheRuntimeKind) {
  const std::string rt = Write("runtime.yaml", "sandbox:\n  egress:\n    allow: [198.51.100.0/24]\n");
  Result r = Ctl({"policy", "check", "--runtime", rt});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "ok: default deny; allows 1 CIDR, 0 names, 0 wildcards; 7 protected CIDRs\n");
  r = Ctl({"policy", "check", "--runtime", rt, "--kind", "task"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "egressctl: invalid input, nothing was changed:\n"
            "  runtime \"sandbox.egress\": a runtime's declaration governs only that runtime's own "
            "sandbox, not this task sandbox\n");
}

TEST_F(Cli, HostedFloorFlagIsAOneMachineConfig) {
  Result r = Ctl({"policy", "check", "--floor", "hosted", "--egress", "10.1.2.3"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "egressctl: invalid input, nothing was changed:\n"
            "  run --egress \"10.1.2.3\": denied by the floor (protected 10.0.0.0/8, floor hosted)\n");
  r = Ctl({"policy", "check", "--floor", "hosted"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "ok: default allow; allows 0 CIDRs, 0 names, 0 wildcards; 19 protected CIDRs\n");
}

TEST_F(Cli, MissingPublicSuffixListIsSaidWhenItMatters) {
  Result r = Ctl({"policy", "check", "--egress", "*.github.io"}, "/nonexistent/psl.dat");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.err.find("egressctl: warning: the public suffix list \"/nonexistent/psl.dat\" cannot "
                       "be read (Debian package publicsuffix); wildcards over public suffixes are "
                       "not flagged\n"),
            std::string::npos)
      << r.err;
  r = Ctl({"policy", "check", "--egress", "192.0.2.1"}, "/nonexistent/psl.dat");
  EXPECT_EQ(r.err, "");
}

// Bad input to `run` and `sandbox add` exits 2 before anything is loaded or
// created, so this needs no root either.
TEST_F(Cli, RunAndSandboxAddRefuseBadInputBeforeTouchingAnything) {
  const std::string marker = dir_ + "/ran";
  Result r = Ctl({"run", "--policy", Write("t.yaml", "egress: {allow: [localhost]}"), "--", "touch", marker});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "egressctl: invalid input, nothing was changed:\n"
            "  task egress.allow[0] \"localhost\": is a single-label name: a rule cannot match it "
            "(the sandbox's resolver expands it through its search domains); use the fully "
            "qualified name\n");
  r = Ctl({"sandbox", "add", "--cgroup", dir_, "--egress", "0.0.0.0/0"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("run --egress \"0.0.0.0/0\": spans protected"), std::string::npos) << r.err;
  struct stat st {};
  EXPECT_NE(stat(marker.c_str(), &st), 0) << "the command ran";
  EXPECT_NE(stat((dir_ + "/pins").c_str(), &st), 0) << "a pin root was created";
}

TEST_F(Cli, ExistingSubcommandsKeepTheirFlags) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"run", "--help"}, {"sandbox", "add", "--help"}}) {
    Result r = Ctl(args);
    EXPECT_EQ(r.code, 0);
    for (const char* flag : {"--egress", "--floor", "--on-deny"}) {
      EXPECT_NE(r.out.find(flag), std::string::npos) << flag << " in " << r.out;
    }
  }
}

// The help lists each flag's values from the same table the parser reads:
// every listed value is accepted, in the table's order.
TEST_F(Cli, HelpListsExactlyTheValuesTheParsersAccept) {
  Result help = Ctl({"policy", "check", "--help"});
  ASSERT_EQ(help.code, 0);
  const auto line_of = [&](const std::string& flag) {
    const size_t at = help.out.find("  " + flag + " ");
    return at == std::string::npos ? std::string() : help.out.substr(at, help.out.find('\n', at) - at);
  };
  EXPECT_NE(line_of("--floor").find("connected (default) | airgapped | hosted"), std::string::npos)
      << help.out;
  EXPECT_NE(line_of("--on-deny").find("reject (default: EPERM at once) | drop (silent)"), std::string::npos)
      << help.out;
  EXPECT_NE(line_of("--kind").find("agent | task (default) | runtime (default with --runtime)"),
            std::string::npos)
      << help.out;
  for (const auto& row : egressd::policy::kFloorNames.rows) {
    EXPECT_EQ(Ctl({"policy", "check", "--floor", std::string(row.name)}).code, 0) << row.name;
  }
  for (const auto& row : egressd::policy::kDenyActionNames.rows) {
    EXPECT_EQ(Ctl({"policy", "check", "--on-deny", std::string(row.name)}).code, 0) << row.name;
  }
  for (const auto& row : egressd::policy::kWorkloadKindNames.rows) {
    EXPECT_EQ(Ctl({"policy", "check", "--kind", std::string(row.name)}).code, 0) << row.name;
  }
}

// egressctl audit suggest against a deployment config: what it proposes
// passes `policy check` with that config, and the config's own protected
// range is never proposed.
TEST_F(Cli, AuditSuggestPassesPolicyCheckWithTheSameConfig) {
  const std::string config = Write("egressd.yaml", "airgapped: false\nprotected: [203.0.113.0/24]\n");
  auto deny = [](const std::string& ip) {
    return nlohmann::json{{"type", "connect"}, {"verdict", "deny"}, {"reason", "default-deny"}, {"count", 1},
                          {"sandbox", {{"id", 5}}}, {"IP", {{"destination", ip}}},
                          {"l4", {{"TCP", {{"destination_port", 443}}}}}}
        .dump();
  };
  auto name = [](const std::string& q) {
    return nlohmann::json{{"type", "dns"}, {"verdict", "deny"}, {"reason", "name-not-in-scope"},
                          {"sandbox", {{"id", 5}}}, {"dns", {{"query", q + "."}, {"qtypes", {"A"}}, {"rcode", 3}}}}
        .dump();
  };
  const std::string stream = Write("trail.jsonl", deny("203.0.113.5") + "\n" + deny("192.0.2.9") + "\n" +
                                                      name("a.corp.example.com") + "\n" +
                                                      name("b.corp.example.com") + "\n" + name("x.github.io") + "\n");
  Result r = Ctl({"audit", "suggest", "--input", stream, "--config", config});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("    - '*.corp.example.com'\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("    - '192.0.2.9'\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("    - 'x.github.io'\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("- '203.0.113.5'"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("#   203.0.113.5 443/TCP (1 time): the deployment's floor protects 203.0.113.0/24"),
            std::string::npos)
      << r.out;
  Result check = Ctl({"policy", "check", "--config", config, "--policy", Write("suggested.yaml", r.out)});
  EXPECT_EQ(check.code, 0) << check.err << "\n" << r.out;
  EXPECT_EQ(check.err.find("public suffix"), std::string::npos) << check.err;

  Result missing = Ctl({"audit", "suggest", "--input", dir_ + "/missing.jsonl"});
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("missing.jsonl"), std::string::npos) << missing.err;
  Result with_policy = Ctl({"audit", "suggest", "--input", stream, "--policy", config});
  EXPECT_EQ(with_policy.code, 2) << with_policy.err;
  Result bad_sandbox = Ctl({"audit", "suggest", "--input", stream, "--sandbox", "web"});
  EXPECT_EQ(bad_sandbox.code, 2);
  EXPECT_NE(bad_sandbox.err.find("\"web\""), std::string::npos) << bad_sandbox.err;
}

}  // namespace
