// The daemon's API without a kernel: the PUT body's parsing and validation
// (every problem at once, each naming its field; unknown fields refused; no
// field for the floor), the compiler's messages under the API's field names,
// and the transport (Beast on a unix socket) with its peer check, whose
// verdict comes from the caller's real cgroup.
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "userspace/daemon/client.h"
#include "userspace/daemon/http_server.h"
#include "userspace/daemon/peer.h"
#include "userspace/daemon/sandbox_request.h"
#include "userspace/policy/policy_inputs.h"

namespace egressd::daemon {
namespace {

TEST(SandboxRequest, ParsesEveryField) {
  auto r = ParseSandboxRequest(R"({
    "cgroup": "/sys/fs/cgroup/pods/a", "labels": {"pod": "agent-7", "namespace": "evals"},
    "task": "egress:\n  allow: [api.example.com]\n", "runtime": {"sandbox": {"egress": {"allow": ["192.0.2.1"]}}},
    "kind": "agent", "egress": ["198.51.100.0/24"], "grants": ["192.0.2.5:80"], "compose": true,
    "on_deny": "drop", "audit_only": true, "strict_audit": true,
    "dns_endpoint4": "10.244.0.1", "dns_endpoint6": "fd00:244::1", "require_socket_containment": true})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->cgroup, "/sys/fs/cgroup/pods/a");
  EXPECT_EQ(r->labels.at("pod"), "agent-7");
  ASSERT_TRUE(r->task);
  EXPECT_TRUE(absl::StrContains(*r->task, "api.example.com"));
  ASSERT_TRUE(r->runtime);  // an object is sent on as JSON text (JSON is YAML)
  EXPECT_TRUE(absl::StrContains(*r->runtime, "192.0.2.1"));
  EXPECT_EQ(r->kind, "agent");
  EXPECT_EQ(r->egress, std::vector<std::string>{"198.51.100.0/24"});
  EXPECT_EQ(r->grants, std::vector<std::string>{"192.0.2.5:80"});
  EXPECT_TRUE(r->compose && r->audit_only && r->strict_audit && r->require_socket_containment);
  EXPECT_EQ(r->on_deny, "drop");
  EXPECT_EQ(r->dns_endpoint6, "fd00:244::1");
  // And back: what egressctl sandbox apply sends parses to the same request.
  auto again = ParseSandboxRequest(ToJson(*r).dump());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(ToJson(*again), ToJson(*r));
}

TEST(SandboxRequest, EveryProblemAtOnceEachNamingItsField) {
  auto r = ParseSandboxRequest(R"({"cgroup": "relative/x", "labels": {"Pod": "x", "egressd/id": "y", "n": 3},
    "egress": ["a.example", 7], "audit_only": "yes", "floor": "airgapped", "config": "x.yaml", "task": 5})");
  ASSERT_FALSE(r.ok());
  ASSERT_TRUE(absl::IsInvalidArgument(r.status()));
  const std::string m(r.status().message());
  for (const char* want : {"field cgroup", "must be an absolute path", "field labels.Pod", "field labels.egressd/id",
                           "field labels.n: must be a string", "field egress[1]: must be a string",
                           "field audit_only: must be true or false", "field floor: is not a field",
                           "field config: is not a field", "field task: must be a YAML text or a JSON object"}) {
    EXPECT_TRUE(absl::StrContains(m, want)) << "missing \"" << want << "\" in:\n" << m;
  }
}

// issue 17: the interface a sandbox is judged at too, by name or by netns.
TEST(SandboxRequest, InterfaceFieldsParseAndAreExclusive) {
  auto r = ParseSandboxRequest(R"({"cgroup": "/sys/fs/cgroup/pods/a", "interface": "veth1234"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->interface, "veth1234");
  auto again = ParseSandboxRequest(ToJson(*r).dump());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->interface, "veth1234");
  auto n = ParseSandboxRequest(R"({"cgroup": "/sys/fs/cgroup/pods/a", "interface_netns": "/var/run/netns/p"})");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->interface_netns, "/var/run/netns/p");
  auto both = ParseSandboxRequest(
      R"({"cgroup": "/sys/fs/cgroup/pods/a", "interface": "veth1", "interface_netns": "/var/run/netns/p"})");
  ASSERT_FALSE(both.ok());
  EXPECT_TRUE(absl::StrContains(both.status().message(), "field interface_netns")) << both.status();
  auto bad = ParseSandboxRequest(R"({"cgroup": "/sys/fs/cgroup/pods/a", "interface": 7})");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "field interface: must be a string")) << bad.status();
}

// Issue 17: an interface alone names a sandbox too; a runtime that sends
// from its own stack needs one.
TEST(SandboxRequest, InterfaceAloneAndTheRuntimeHint) {
  auto only = ParseSandboxRequest(R"({"interface": "veth1", "sandbox_runtime": "gvisor"})");
  ASSERT_TRUE(only.ok()) << only.status();
  EXPECT_TRUE(only->interface_only());
  EXPECT_EQ(ToJson(*only)["sandbox_runtime"], "gvisor");
  auto ns = ParseSandboxRequest(R"({"interface_netns": "/var/run/netns/p"})");
  ASSERT_TRUE(ns.ok()) << ns.status();
  EXPECT_TRUE(ns->interface_only());
  auto both = ParseSandboxRequest(R"({"cgroup": "/sys/fs/cgroup/pods/a", "interface": "veth1"})");
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_FALSE(both->interface_only());
  for (const char* own : {"gvisor", "runsc", "kata", "firecracker"}) {
    auto r = ParseSandboxRequest(absl::StrCat(R"({"cgroup": "/sys/fs/cgroup/pods/a", "sandbox_runtime": ")", own,
                                              R"("})"));
    ASSERT_FALSE(r.ok()) << own;
    EXPECT_TRUE(absl::StrContains(r.status().message(), absl::StrCat("field sandbox_runtime: \"", own, "\"")))
        << r.status();
    EXPECT_TRUE(absl::StrContains(r.status().message(), "field interface or interface_netns")) << r.status();
  }
  for (const char* kernel : {"runc", "crun"}) {
    EXPECT_TRUE(ParseSandboxRequest(absl::StrCat(R"({"cgroup": "/sys/fs/cgroup/pods/a", "sandbox_runtime": ")",
                                                 kernel, R"("})"))
                    .ok())
        << kernel;
  }
  auto unknown = ParseSandboxRequest(R"({"interface": "veth1", "sandbox_runtime": "docker"})");
  ASSERT_FALSE(unknown.ok());
  EXPECT_TRUE(absl::StrContains(unknown.status().message(), "field sandbox_runtime: \"docker\" is not a runtime"))
      << unknown.status();
}

// Issue 17: the pod's RuntimeClass, through the deployment's runtimeClasses.
TEST(SandboxRequest, RuntimeClassResolvesThroughTheDeploymentsMap) {
  const std::map<std::string, std::string> classes = {{"gvisor", "gvisor"}, {"kata-qemu", "kata"}, {"standard", "runc"}};
  auto parse = [](const std::string& body) {
    auto r = ParseSandboxRequest(body);
    EXPECT_TRUE(r.ok()) << body << ": " << r.status();
    return r.ok() ? *r : SandboxRequest{};
  };
  // No runtime_class: nothing changes.
  SandboxRequest none = parse(R"({"cgroup": "/sys/fs/cgroup/pods/a"})");
  EXPECT_TRUE(ResolveRuntimeClass(none, classes).ok());
  EXPECT_EQ(none.sandbox_runtime, "");
  // A node-sockets class by cgroup: the runtime is set, the registration stands.
  SandboxRequest std_class = parse(R"({"cgroup": "/sys/fs/cgroup/pods/a", "runtime_class": "standard"})");
  EXPECT_TRUE(ResolveRuntimeClass(std_class, classes).ok());
  EXPECT_EQ(std_class.sandbox_runtime, "runc");
  EXPECT_EQ(ToJson(std_class)["runtime_class"], "standard");
  // An own-stack class by cgroup only is refused, naming the class, its runtime and the fix.
  SandboxRequest kata = parse(R"({"cgroup": "/sys/fs/cgroup/pods/a", "runtime_class": "kata-qemu"})");
  absl::Status s = ResolveRuntimeClass(kata, classes);
  ASSERT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "field runtime_class \"kata-qemu\" is runtime \"kata\": a guest kernel"))
      << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "field interface or interface_netns")) << s;
  // The same class with its interface is enforced at the veth.
  SandboxRequest kata_veth = parse(R"({"interface": "veth1", "runtime_class": "kata-qemu"})");
  EXPECT_TRUE(ResolveRuntimeClass(kata_veth, classes).ok());
  EXPECT_EQ(kata_veth.sandbox_runtime, "kata");
  // A class the deployment does not map: refused, listing what it maps.
  SandboxRequest unmapped = parse(R"({"cgroup": "/sys/fs/cgroup/pods/a", "runtime_class": "nvidia"})");
  s = ResolveRuntimeClass(unmapped, classes);
  ASSERT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "field runtime_class \"nvidia\": the deployment's runtimeClasses do "
                                             "not name it (they name \"gvisor\", \"kata-qemu\", \"standard\")"))
      << s;
  SandboxRequest no_map = parse(R"({"cgroup": "/sys/fs/cgroup/pods/a", "runtime_class": "gvisor"})");
  s = ResolveRuntimeClass(no_map, {});
  EXPECT_TRUE(absl::StrContains(s.message(), "(they name none)")) << s;
  EXPECT_EQ(no_map.sandbox_runtime, "") << "a refused class sets nothing";
  // A sandbox_runtime that contradicts the class.
  SandboxRequest both = parse(R"({"interface": "veth1", "runtime_class": "gvisor", "sandbox_runtime": "runc"})");
  s = ResolveRuntimeClass(both, classes);
  EXPECT_TRUE(absl::StrContains(s.message(), "is runtime \"gvisor\" in the deployment's runtimeClasses, but field "
                                             "sandbox_runtime says \"runc\""))
      << s;
  // A wrong type is a parse error naming the field.
  auto typed = ParseSandboxRequest(R"({"cgroup": "/sys/fs/cgroup/pods/a", "runtime_class": 3})");
  ASSERT_FALSE(typed.ok());
  EXPECT_TRUE(absl::StrContains(typed.status().message(), "field runtime_class: must be a string")) << typed.status();
}

TEST(SandboxRequest, BodyMustBeAJsonObjectWithACgroup) {
  EXPECT_TRUE(absl::StrContains(ParseSandboxRequest("not json").status().message(), "not JSON"));
  EXPECT_TRUE(absl::StrContains(ParseSandboxRequest("[1]").status().message(), "JSON object"));
  EXPECT_TRUE(absl::StrContains(ParseSandboxRequest("{}").status().message(), "field cgroup: is required"));
}

TEST(SandboxRequest, Ids) {
  for (const char* ok : {"agent-7", "0c6f1f7e-2b1a-4c1e-9a7e-1b2c3d4e5f60", "a.b_c"}) {
    EXPECT_TRUE(CheckSandboxId(ok).ok()) << ok;
  }
  for (const std::string& bad : std::vector<std::string>{"", "-x", "a/b", "a b", "..", std::string(64, 'a')}) {
    EXPECT_TRUE(absl::IsInvalidArgument(CheckSandboxId(bad))) << bad;
  }
}

TEST(SandboxRequest, CompilerMessagesNameTheApiFields) {
  auto r = ParseSandboxRequest(R"({"cgroup": "/x", "egress": ["169.254.169.254", "not a target!"],
                                   "kind": "bogus", "audit_only": true})");
  ASSERT_TRUE(r.ok()) << r.status();
  auto p = policy::CompileInputs(ToPolicyInputs(*r, std::nullopt, false));
  ASSERT_FALSE(p.ok());
  const std::string m(p.status().message());
  // The embedded default deployment allows no audit-only sandbox and keeps
  // its floor: no request lowers it.
  EXPECT_TRUE(absl::StrContains(m, "kind")) << m;
  EXPECT_TRUE(absl::StrContains(m, "not a target!")) << m;
  EXPECT_TRUE(absl::StrContains(m, "audit_only")) << m;
  // (Run targets' messages still say "--egress": userspace/policy has no
  // label for them yet.)
}

TEST(SandboxRequest, FloorStaysUnderAnyRequest) {
  auto r = ParseSandboxRequest(R"({"cgroup": "/x", "egress": ["169.254.169.254"]})");
  ASSERT_TRUE(r.ok());
  auto p = policy::CompileInputs(ToPolicyInputs(*r, std::nullopt, false));
  // Either refused, or compiled with the metadata address still protected.
  if (p.ok()) {
    bool protected_imds = false;
    for (const auto& c : p->protected_cidrs) protected_imds |= c.cidr.ToString() == "169.254.169.254/32";
    EXPECT_TRUE(protected_imds);
  }
}

TEST(Peer, Cgroup2Path) {
  EXPECT_EQ(Cgroup2PathOf("12:pids:/x\n0::/egl-1/pod\n"), "/egl-1/pod");
  EXPECT_EQ(Cgroup2PathOf("1:name=systemd:/\n"), "");
}

std::string OwnCgroup() {
  std::ifstream in("/proc/self/cgroup");
  std::stringstream ss;
  ss << in.rdbuf();
  return Cgroup2PathOf(ss.str());
}

// The transport and the peer check with a live caller (this process): served
// when its cgroup is no sandbox, 403 with a JSON error naming its cgroup
// when it is, whatever its uid.
TEST(HttpServer, ServesAndRefusesByTheCallersCgroup) {
  char dir[] = "/tmp/egr-api-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string sock = std::string(dir) + "/api.sock";
  bool sandboxed = false;
  std::string seen_cgroup;
  boost::asio::io_context io;
  HttpServer server(
      io, [](const Request& r, const Peer& p) { return Response{200, {{"target", r.target}, {"pid", p.pid}}}; },
      [&](const std::string& cg) {
        seen_cgroup = cg;
        return sandboxed;
      });
  ASSERT_TRUE(server.Listen(sock).ok());
  struct stat st {};
  ASSERT_EQ(stat(sock.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::thread loop([&] { io.run(); });

  auto served = Call(sock, "GET", "/v1/status");
  ASSERT_TRUE(served.ok()) << served.status();
  EXPECT_EQ(served->status, 200);
  EXPECT_EQ(served->body.value("target", ""), "/v1/status");
  EXPECT_EQ(served->body.value("pid", 0), getpid());
  EXPECT_EQ(seen_cgroup, OwnCgroup());

  sandboxed = true;
  auto refused = Call(sock, "PUT", "/v1/sandboxes/x", "{}");
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_EQ(refused->status, 403);
  ASSERT_TRUE(refused->body.contains("error")) << refused->body.dump();
  EXPECT_EQ(refused->body["error"].value("code", ""), "forbidden");
  EXPECT_TRUE(absl::StrContains(refused->body["error"].value("message", ""), OwnCgroup()));
  EXPECT_EQ(server.refused(), 1u);

  io.stop();
  loop.join();
  unlink(sock.c_str());
  rmdir(dir);
}

TEST(HttpServer, NobodyListening) {
  auto r = Call("/nonexistent/egressd.sock", "GET", "/healthz");
  EXPECT_TRUE(absl::IsUnavailable(r.status())) << r.status();
}

TEST(HttpServer, StatusesFromErrors) {
  EXPECT_EQ(FromStatus(absl::InvalidArgumentError("a\nb")).status, 400);
  EXPECT_EQ(FromStatus(absl::InvalidArgumentError("a\nb")).body["error"]["reasons"].size(), 2u);
  EXPECT_EQ(FromStatus(absl::FailedPreconditionError("no lsm")).status, 409);
  EXPECT_EQ(FromStatus(absl::UnavailableError("x")).status, 503);
  EXPECT_EQ(FromStatus(absl::InternalError("x")).status, 500);
}

}  // namespace
}  // namespace egressd::daemon
