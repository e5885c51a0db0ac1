// CompileInputs: the inputs as a caller has them (files or texts, strings for
// the floor, kind and deny action) to the compiled policy, and the public
// suffix list read only when a wildcard needs it.
#include "userspace/policy/policy_inputs.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace egressd::policy {
namespace {

constexpr char kPsl[] = EGR_TESTDATA "/public_suffix_list.dat";
constexpr char kTask[] = "egress:\n  allow: [192.0.2.1, api.example.com, '*.github.io']\n";

class ScratchDir : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/egr-policy-inputs-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }

  std::string dir_;
};

using PolicyInputsTest = ScratchDir;

// Counts the compiler's questions, to show when it needs the list at all.
class CountingSuffixes : public PublicSuffixes {
 public:
  bool IsPublicSuffix(std::string_view name) const override {
    ++asked;
    return name == "github.io";
  }
  mutable int asked = 0;
};

TEST_F(PolicyInputsTest, InlineTextCompilesLikeTheSameFile) {
  PolicyInputs from_file;
  from_file.task = InputText::File(Write("task.yaml", kTask));
  from_file.public_suffix_path = kPsl;
  PolicyInputs inline_text;
  inline_text.task = InputText::Inline("task.yaml", kTask);
  inline_text.public_suffix_path = kPsl;

  auto a = CompileInputs(from_file);
  auto b = CompileInputs(inline_text);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(a->default_verdict, Verdict::kDeny);
  ASSERT_EQ(a->allowed.size(), 1u);
  EXPECT_EQ(a->allowed[0].cidr.ToString(), "192.0.2.1/32");
  // The fixture lists github.io: the wildcard over it is flagged.
  bool flagged = false;
  for (const std::string& w : a->warnings) flagged |= w.find("public suffix \"github.io\"") != std::string::npos;
  EXPECT_TRUE(flagged);
}

TEST_F(PolicyInputsTest, SyntaxErrorsNameTheInlineTextByItsName) {
  PolicyInputs in;
  in.task = InputText::Inline("request.task", "egress: [\n");
  auto p = CompileInputs(in);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(p.status().message()).find("request.task"), std::string::npos) << p.status();
}

TEST(PolicyInputs, EveryProblemAtOnceUnderTheCallersLabels) {
  PolicyInputs in;
  in.labels.floor = "field floor";
  in.labels.on_deny = "field onDeny";
  in.labels.kind = "field kind";
  in.labels.config = "field config";
  in.labels.task = "field task";
  in.config = InputText::File("/nonexistent/egressd.yaml");
  in.floor = "open";
  in.on_deny = "maybe";
  in.kind = "Agent";
  in.task = InputText::File("/nonexistent/task.yaml");
  in.grants = {"192.0.2.1"};
  in.run_targets = {"10.0.0.0/33"};
  auto p = CompileInputs(in);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(p.status().message(),
            "field floor invalid floor \"open\"; valid: \"connected\", \"airgapped\", \"hosted\"\n"
            "field onDeny invalid deny action \"maybe\"; valid: \"reject\", \"drop\"\n"
            "field floor \"open\": the deployment config sets the floor (airgapped, hostedEdge, "
            "protected); use one of field floor and field config\n"
            "field config \"/nonexistent/egressd.yaml\": cannot be read\n"
            "field task \"/nonexistent/task.yaml\": cannot be read\n"
            "field kind invalid workload kind \"Agent\"; valid: \"agent\", \"task\", \"runtime\"\n"
            "orchestrator grant \"192.0.2.1\": expected ADDRESS:PORTS (a grant names its ports)\n"
            "run --egress \"10.0.0.0/33\": has prefix length 33; expected 0-32 for IPv4");
}

TEST(PolicyInputs, FloorKindAndDenyActionFromStrings) {
  PolicyInputs in;
  in.floor = "airgapped";
  in.on_deny = "drop";
  in.kind = "agent";
  in.grants = {"192.0.2.9:8080,8443"};
  auto p = CompileInputs(in);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->default_verdict, Verdict::kDeny);
  EXPECT_EQ(p->deny_action, DenyAction::kDrop);
  ASSERT_EQ(p->allowed.size(), 1u);
  EXPECT_EQ(p->allowed[0].ports, (std::vector<PortRange>{{8080, 8080}, {8443, 8443}}));
  EXPECT_EQ(p->protected_cidrs.front().source, "floor airgapped");
}

TEST(PolicyInputs, ARuntimeDeclarationMakesARuntimeSandboxUnlessAKindIsGiven) {
  PolicyInputs in;
  in.runtime = InputText::Inline("runtime.yaml", "sandbox: {egress: {allow: [192.0.2.7]}}\n");
  EXPECT_TRUE(CompileInputs(in).ok());
  in.kind = "task";
  auto p = CompileInputs(in);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(std::string(p.status().message()).find("not this task sandbox"), std::string::npos)
      << p.status();
}

TEST(PolicyInputs, TheSuffixListIsAskedOnlyAboutWildcards) {
  CountingSuffixes psl;
  PolicyInputs in;
  in.public_suffixes = &psl;
  in.run_targets = {"192.0.2.1", "api.example.com", "2001:db8::/32"};
  ASSERT_TRUE(CompileInputs(in).ok());
  EXPECT_EQ(psl.asked, 0);

  in.run_targets.push_back("*.github.io");
  auto p = CompileInputs(in);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(psl.asked, 1);
  bool flagged = false;
  for (const std::string& w : p->warnings) flagged |= w.find("public suffix \"github.io\"") != std::string::npos;
  EXPECT_TRUE(flagged);
}

TEST(PolicyInputs, AnUnreadableSuffixListIsAWarningOnlyWhenAWildcardNeedsIt) {
  PolicyInputs in;
  in.public_suffix_path = "/nonexistent/psl.dat";
  in.run_targets = {"192.0.2.1"};
  auto p = CompileInputs(in);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->warnings.empty());

  in.run_targets = {"*.example.com"};
  p = CompileInputs(in);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->warnings.size(), 2u);  // this, and that names need egressd's DNS proxy
  EXPECT_EQ(p->warnings[1],
            "the public suffix list \"/nonexistent/psl.dat\" cannot be read (Debian package "
            "publicsuffix); wildcards over public suffixes are not flagged");
}

// A sandbox whose DNS egressd serves (egressctl run, a DNS endpoint) has its
// names enforced: no warning that they reach nothing.
TEST(CompileInputs, NamesWarningOnlyWhereNoProxyServesTheSandbox) {
  PolicyInputs in;
  in.public_suffix_path = "/nonexistent/psl.dat";
  in.run_targets = {"api.example.com"};
  auto p = CompileInputs(in);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->warnings.size(), 1u);
  EXPECT_NE(p->warnings[0].find("\"api.example.com\" reaches nothing from a sandbox whose DNS it does not serve"),
            std::string::npos)
      << p->warnings[0];
  in.dns_served = true;
  p = CompileInputs(in);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->warnings.empty()) << p->warnings[0];
}

using LazySuffixListTest = ScratchDir;

TEST_F(LazySuffixListTest, ReadsTheFileOnTheFirstQuestionAndNeverAgain) {
  const std::string path = Write("psl.dat", "io\n");
  LazyPublicSuffixList psl(path);
  EXPECT_FALSE(psl.was_read());
  // Rewritten before the first question: the answer is the new text, so
  // constructing the list did not read it.
  Write("psl.dat", "io\ngithub.io\n");
  EXPECT_TRUE(psl.IsPublicSuffix("github.io"));
  EXPECT_TRUE(psl.was_read());
  EXPECT_FALSE(psl.unreadable());
  // Removed after it: answered from what was read.
  std::filesystem::remove(path);
  EXPECT_TRUE(psl.IsPublicSuffix("github.io"));
  EXPECT_FALSE(psl.IsPublicSuffix("example.io"));
  EXPECT_FALSE(psl.unreadable());
}

TEST(LazySuffixList, UnreadableAnswersNoAndSaysSo) {
  LazyPublicSuffixList psl("/nonexistent/psl.dat");
  EXPECT_FALSE(psl.unreadable());  // not asked yet
  EXPECT_FALSE(psl.IsPublicSuffix("github.io"));
  EXPECT_TRUE(psl.unreadable());
}

}  // namespace

// Audit-only is the operator's, and only where the deployment allows it: the
// floor deployment never does, a config must say audit: {allowAuditOnly:
// true}.  Strict needs no permission (it only denies more).
TEST(PolicyInputs, AuditOnlyOnlyWhereTheDeploymentAllowsIt) {
  PolicyInputs in;
  in.labels.audit_only = "--audit-only";
  in.run_targets = {"192.0.2.7"};
  in.audit.audit_only = true;
  auto refused = CompileInputs(in);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("--audit-only: the deployment config does not allow audit-only"),
            std::string::npos)
      << refused.status();
  in.config = InputText::Inline("egressd.yaml", "airgapped: false\n");
  refused = CompileInputs(in);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("audit: {allowAuditOnly: true} in config \"egressd.yaml\""),
            std::string::npos)
      << refused.status();
  in.config = InputText::Inline("egressd.yaml", "audit:\n  allowAuditOnly: false\n");
  EXPECT_FALSE(CompileInputs(in).ok());
  in.config = InputText::Inline("egressd.yaml", "audit:\n  allowAuditOnly: true\n");
  auto allowed = CompileInputs(in);
  ASSERT_TRUE(allowed.ok()) << allowed.status();
  EXPECT_TRUE(allowed->audit.audit_only);
  EXPECT_FALSE(allowed->audit.strict);
  // Allowing it makes no sandbox audit-only by itself.
  in.audit = {};
  auto plain = CompileInputs(in);
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->audit.audit_only);
  in.config.reset();
  in.audit.strict = true;
  auto strict = CompileInputs(in);
  ASSERT_TRUE(strict.ok()) << strict.status();
  EXPECT_TRUE(strict->audit.strict);
}

TEST(PolicyInputs, TheAuditBlockIsCheckedLikeTheRest) {
  PolicyInputs in;
  in.config = InputText::Inline("egressd.yaml", "audit:\n  allowAuditOnly: yes\n  everyone: true\n");
  auto p = CompileInputs(in);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("audit.allowAuditOnly"), std::string::npos) << p.status();
  EXPECT_NE(p.status().message().find("everyone"), std::string::npos) << p.status();
  // A declaration cannot ask for it.
  in.config.reset();
  in.task = InputText::Inline("task.yaml", "auditOnly: true\negress:\n  allow: []\n");
  EXPECT_FALSE(CompileInputs(in).ok());
}

}  // namespace egressd::policy
