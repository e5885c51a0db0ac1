// The libbpf log bridge never cuts a message: the verifier's whole log comes
// as one message, and the reason for a rejection is at its end.
#include "loader/libbpf_log.h"

#include <gtest/gtest.h>

#include <cstdarg>
#include <string>

namespace egressd {
namespace {

std::string Format(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string s = FormatLibbpfMessage(fmt, args);
  va_end(args);
  return s;
}

TEST(LibbpfLog, AVerifierSizedMessageKeepsItsLastLine) {
  // 64 KiB of log before the reason, as a rejected program's log looks.
  std::string body;
  for (int i = 0; body.size() < 64 * 1024; ++i) body += "; insn " + std::to_string(i) + ": r1 = *(u64 *)(r10 -8)\n";
  const std::string reason = "R1 invalid mem access 'scalar'\nprocessed 4242 insns";
  std::string out = Format("libbpf: prog 'egr_skb_egress': BPF program load failed: %s%s", body.c_str(),
                           reason.c_str());
  ASSERT_GT(out.size(), 64u * 1024);
  EXPECT_EQ(out.substr(out.size() - reason.size()), reason);
}

TEST(LibbpfLog, ShortMessagesAreExact) {
  EXPECT_EQ(Format("map '%s': created (%d)", "egr_cgroups_v1", 7), "map 'egr_cgroups_v1': created (7)");
  EXPECT_EQ(Format("%s", ""), "");
}

}  // namespace
}  // namespace egressd
