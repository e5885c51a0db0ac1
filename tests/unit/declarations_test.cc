// Reading the YAML inputs: declarations and the deployment config are
// strict, so a misspelt key never silently means something weaker.
#include "userspace/policy/declarations.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "userspace/policy/deployment_config.h"

namespace egressd::policy {
namespace {

std::vector<std::string> Lines(const absl::Status& s) {
  return absl::StrSplit(s.message(), '\n');
}

struct DeclVector {
  const char* rule;
  bool runtime;  // parse as runtime.yaml instead of task.yaml
  std::string yaml;
  // "absent", or the targets with where they were: "egress.allow[0]=x".
  std::vector<std::string> want;
  std::vector<std::string> want_errors;
};

const DeclVector kDecls[] = {
    {"task_allow_list_read_in_order", false,
     "egress:\n  allow:\n    - target.example.com # the host\n    - '*.githubusercontent.com'\n"
     "    - 10.20.0.0/16\n",
     {"egress.allow[0]=target.example.com", "egress.allow[1]=*.githubusercontent.com",
      "egress.allow[2]=10.20.0.0/16"},
     {}},
    {"egress_absent_is_no_declaration", false, "", {"absent"}, {}},
    {"egress_absent_from_comment_only_file", false, "# nothing here\n", {"absent"}, {}},
    {"empty_allow_is_a_declaration", false, "egress: {allow: []}", {}, {}},
    {"deny_list_rejected_there_is_none", false, "egress: {deny: [prod.example.com]}", {},
     {"task \"egress.deny\": unknown key; egress accepts one key, \"allow\" (there is no deny "
      "list: an allow list that omits a host keeps the sandbox off it)"}},
    {"deny_beside_allow_rejected", false, "egress: {allow: [a.example], deny: [b.example]}", {},
     {"task \"egress.deny\": unknown key; egress accepts one key, \"allow\" (there is no deny "
      "list: an allow list that omits a host keeps the sandbox off it)"}},
    {"misspelt_allow_never_means_empty_allow", false, "egress: {alow: [a.example]}", {},
     {"task \"egress.alow\": unknown key; egress accepts one key, \"allow\" (there is no deny "
      "list: an allow list that omits a host keeps the sandbox off it)"}},
    {"misspelt_egress_never_means_absent", false, "egres: {allow: [a.example]}", {},
     {"task \"egres\": unknown key; a task declaration has one key, \"egress\""}},
    {"egress_without_allow_rejected", false, "egress: {}", {},
     {"task \"egress\": has no \"allow\" list; write \"allow: []\" to declare nothing beyond "
      "the platform's services"}},
    {"null_egress_rejected", false, "egress:\n", {},
     {"task \"egress\": is empty; write \"allow: []\" to declare nothing beyond the "
      "platform's services"}},
    {"null_allow_rejected", false, "egress:\n  allow:\n", {},
     {"task \"egress.allow\": is empty (null); write \"allow: []\" to declare nothing beyond "
      "the platform's services"}},
    {"allow_must_be_a_list", false, "egress: {allow: a.example}", {},
     {"task \"egress.allow\": must be a list"}},
    {"allow_items_must_be_strings", false, "egress: {allow: [a.example, [b], {c: d}, ~]}", {},
     {"task \"egress.allow[1]\": must be a string", "task \"egress.allow[2]\": must be a string",
      "task \"egress.allow[3]\": is empty"}},
    {"duplicate_key_rejected", false, "egress: {allow: [a.example], allow: []}", {},
     {"task \"egress.allow\": duplicate key"}},
    {"top_level_must_be_a_mapping", false, "- a.example\n", {},
     {"task \"task.yaml\": must be a mapping with the one key \"egress\""}},
    {"second_document_rejected", false, "egress: {allow: []}\n---\negress: {allow: [x.example]}\n",
     {}, {"task \"task.yaml\": has more than one YAML document; expected one"}},
    {"yaml_syntax_error_names_file_and_place", false, "egress: {allow: [a.example\n", {},
     {"task \"task.yaml\": invalid YAML at line 2, column 1: did not find expected ',' or ']' "
      "while parsing a flow sequence"}},
    {"yaml_alias_to_an_unknown_anchor_rejected", false, "egress: {allow: [*nope]}", {},
     {"task \"task.yaml\": invalid YAML at line 1, column 18: alias to an unknown anchor"}},
    {"yaml_aliases_resolve", false, "egress: {allow: [&t a.example, *t]}",
     {"egress.allow[0]=a.example", "egress.allow[1]=a.example"}, {}},
    {"yaml_self_referencing_alias_rejected", false, "egress: &e {allow: *e}", {},
     {"task \"task.yaml\": invalid YAML at line 1, column 20: alias to an unknown anchor"}},
    {"yaml_control_characters_rejected", false, "egress: {allow: [\"a\x01\"]}", {},
     {"task \"task.yaml\": invalid YAML at byte 19: control characters are not allowed "
      "(\\x01)"}},
    {"yaml_deep_nesting_rejected", false, "egress: {allow: " + std::string(70, '[') + std::string(70, ']') + "}", {},
     {"task \"task.yaml\": invalid YAML at line 1, column 79: nested deeper than 64 levels"}},
    {"runtime_declaration_read", true, "sandbox:\n  egress:\n    allow: [api.example.com]\n",
     {"sandbox.egress.allow[0]=api.example.com"}, {}},
    {"runtime_without_egress_is_no_declaration", true, "sandbox: {}\n", {"absent"}, {}},
    {"runtime_deny_rejected", true, "sandbox: {egress: {deny: [x.example]}}", {},
     {"runtime \"sandbox.egress.deny\": unknown key; egress accepts one key, \"allow\" (there is "
      "no deny list: an allow list that omits a host keeps the sandbox off it)"}},
    {"runtime_misspelt_egress_rejected", true, "sandbox: {egres: {allow: []}}", {},
     {"runtime \"sandbox.egres\": unknown key; sandbox has one key here, \"egress\""}},
    {"runtime_task_form_rejected", true, "egress: {allow: []}", {},
     {"runtime \"egress\": unknown key; a runtime declaration has one key, \"sandbox\""}},
};

class Declarations : public testing::TestWithParam<DeclVector> {};

TEST_P(Declarations, Parse) {
  const DeclVector& v = GetParam();
  auto got = v.runtime ? ParseRuntimeDeclaration(v.yaml, "runtime.yaml")
                       : ParseTaskDeclaration(v.yaml, "task.yaml");
  if (!v.want_errors.empty()) {
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(Lines(got.status()), v.want_errors);
    return;
  }
  ASSERT_TRUE(got.ok()) << got.status();
  std::vector<std::string> have;
  if (!got->has_value()) {
    have.push_back("absent");
  } else {
    for (const DeclaredTarget& t : (*got)->allow) have.push_back(t.where + "=" + t.text);
  }
  EXPECT_EQ(have, v.want);
}

INSTANTIATE_TEST_SUITE_P(Rules, Declarations, testing::ValuesIn(kDecls),
                         [](const testing::TestParamInfo<DeclVector>& info) {
                           return std::string(info.param.rule);
                         });

TEST(DeploymentConfig, EmptyConfigIsTheEmbeddedDefault) {
  auto d = ParseDeploymentConfig("", "egressd.yaml", nullptr);
  ASSERT_TRUE(d.ok()) << d.status();
  const DeploymentConfig def = DefaultDeployment();
  EXPECT_FALSE(d->airgapped);
  EXPECT_EQ(d->deny_action, DenyAction::kReject);
  EXPECT_EQ(d->protected_cidrs, def.protected_cidrs);
  EXPECT_TRUE(d->always.cidrs.empty() && d->always.names.empty() && d->always.wildcards.empty());
}

TEST(DeploymentConfig, UnknownKeysAndWrongTypesAllReportedAtOnce) {
  auto d = ParseDeploymentConfig(R"(
airgaped: true
hostedEdge: yes
onDeny: silently
protected: 10.0.0.0/8
platform:
  modelgateway: https://gw.example.com
  api: {url: https://api.example.com}
sandboxExtraEnv: [UV_INDEX_URL=https://m.example]
egressExtraAllow:
  - [a.example]
)",
                                 "egressd.yaml", nullptr);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(Lines(d.status()),
            (std::vector<std::string>{
                "deployment setting \"airgaped\": unknown key; valid: \"airgapped\", "
                "\"hostedEdge\", \"protected\", \"onDeny\", \"platform\", \"sealedInstalls\", "
                "\"egressExtraAllow\", \"sandboxExtraEnv\", \"dns\", \"audit\", \"limits\", \"flows\", \"containedRoots\", \"metrics\", \"runtimeClasses\"",
                "deployment setting \"hostedEdge\": must be true or false, not \"yes\"",
                "deployment setting \"protected\": must be a list",
                "deployment setting \"platform.modelgateway\": unknown key; valid: \"api\", "
                "\"modelGateway\", \"objectStorage\", \"packageIndices\", \"containerRegistry\"",
                "deployment setting \"platform.api\": must be a string or a list of strings",
                "deployment setting \"sandboxExtraEnv\": must be a mapping of variable names to "
                "values",
                "deployment setting \"egressExtraAllow[0]\": must be a string",
                "deployment setting \"onDeny\": invalid deny action \"silently\"; valid: "
                "\"reject\", \"drop\"",
            }));
}

// Issue 17: runtimeClasses maps a Kubernetes RuntimeClass to the runtime behind it.
TEST(DeploymentConfig, RuntimeClassesMapClassNamesToKnownRuntimes) {
  auto d = ParseDeploymentConfig("runtimeClasses:\n  gvisor: runsc\n  kata-qemu: kata\n  standard: runc\n",
                                 "egressd.yaml", nullptr);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->runtime_classes,
            (std::map<std::string, std::string>{{"gvisor", "runsc"}, {"kata-qemu", "kata"}, {"standard", "runc"}}));
  EXPECT_TRUE(ParseDeploymentConfig("", "egressd.yaml", nullptr)->runtime_classes.empty());
  auto bad = ParseDeploymentConfig("runtimeClasses:\n  gvisor: docker\n  Kata_QEMU: kata\n  fc: [firecracker]\n",
                                   "egressd.yaml", nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(Lines(bad.status()),
            (std::vector<std::string>{
                "deployment setting \"runtimeClasses.fc\": must be a string",
                "deployment setting runtimeClasses.gvisor \"docker\": not a runtime egressd knows: runc, crun (the "
                "node's sockets), gvisor (or runsc), kata, firecracker (their own stack)",
                "deployment setting runtimeClasses.Kata_QEMU \"kata\": \"Kata_QEMU\" is not a RuntimeClass name "
                "(lower-case letters, digits, '-' and '.', starting and ending with a letter or digit)",
            }));
  auto not_map = ParseDeploymentConfig("runtimeClasses: [gvisor]\n", "egressd.yaml", nullptr);
  ASSERT_FALSE(not_map.ok());
  EXPECT_TRUE(absl::StrContains(not_map.status().message(), "runtimeClasses")) << not_map.status();
}

TEST(DeploymentConfig, ProtectedTakesAddressesAndCidrsOnly) {
  auto d = ParseDeploymentConfig("protected: [203.0.113.0/24, db.example.com, 10.1.2.3/8]",
                                 "egressd.yaml", nullptr);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(Lines(d.status()),
            (std::vector<std::string>{
                "deployment setting protected[1] \"db.example.com\": protected takes addresses "
                "and CIDRs (the kernel judges addresses, never names)",
                "deployment setting protected[2] \"10.1.2.3/8\": has host bits set; the network "
                "is \"10.0.0.0/8\""}));
}

}  // namespace
}  // namespace egressd::policy
