// policy check / policy compile: the compiler alone, no kernel and no root,
// for CI pipelines and authors checking a declaration before they upload it.
#include <cstdio>
#include <string>

#include "tools/egressctl/commands.h"
#include "tools/egressctl/policy_flags.h"
#include "userspace/policy/compiled_policy_json.h"
#include "userspace/policy/nft_render.h"

namespace egressd::cli {
namespace {

std::string Count(size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

}  // namespace

int CmdPolicyCheck(const PolicyFlags& flags) {
  auto policy = CompileFlags(flags);
  if (!policy.ok()) return Report(policy.status());
  PrintWarnings(*policy);
  std::printf("ok: default %s; allows %s, %s, %s; %s\n",
              std::string(ToString(policy->default_verdict)).c_str(),
              Count(policy->allowed.size(), "CIDR", "CIDRs").c_str(),
              Count(policy->names.size(), "name", "names").c_str(),
              Count(policy->wildcard_suffixes.size(), "wildcard", "wildcards").c_str(),
              Count(policy->protected_cidrs.size(), "protected CIDR", "protected CIDRs").c_str());
  return kExitOk;
}

int CmdPolicyCompile(const PolicyFlags& flags, const std::string& format) {
  auto policy = CompileFlags(flags);
  if (!policy.ok()) return Report(policy.status());
  PrintWarnings(*policy);
  if (format == "json") {
    nlohmann::json j = policy::ToJson(*policy);
    char hash[17];
    std::snprintf(hash, sizeof(hash), "%016llx", static_cast<unsigned long long>(policy->ContentHash()));
    j["hash"] = hash;
    std::printf("%s\n", j.dump(2).c_str());
  } else if (format == "nft") {
    std::fputs(policy::RenderNft(*policy).c_str(), stdout);
  } else {
    std::fputs(policy->ToText().c_str(), stdout);
  }
  return kExitOk;
}

}  // namespace egressd::cli
