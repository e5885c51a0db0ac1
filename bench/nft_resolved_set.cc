#include "nft_resolved_set.h"

#include <nftables/libnftables.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "userspace/policy/nft_render.h"

namespace egressd::bench {

absl::StatusOr<std::unique_ptr<NftResolvedSet>> NftResolvedSet::Open(const std::string& table) {
  nft_ctx* ctx = nft_ctx_new(NFT_CTX_DEFAULT);
  if (ctx == nullptr) return absl::InternalError("libnftables: nft_ctx_new failed");
  // nft's messages go to buffers, not to our stdout/stderr.
  if (nft_ctx_buffer_output(ctx) != 0 || nft_ctx_buffer_error(ctx) != 0) {
    nft_ctx_free(ctx);
    return absl::InternalError("libnftables: cannot buffer its output");
  }
  return std::unique_ptr<NftResolvedSet>(new NftResolvedSet(ctx, table));
}

NftResolvedSet::~NftResolvedSet() { nft_ctx_free(ctx_); }

void NftResolvedSet::Add(const net::IpAddr& addr, uint64_t timeout_s) {
  (addr.is_v4() ? v4_ : v6_).push_back(absl::StrCat(addr.ToString(), " timeout ", timeout_s ? timeout_s : 1, "s"));
}

absl::Status NftResolvedSet::Commit() {
  std::string cmd;
  for (auto [set, elems] : {std::pair{policy::kNftResolved4Set, &v4_}, std::pair{policy::kNftResolved6Set, &v6_}}) {
    if (elems->empty()) continue;
    absl::StrAppend(&cmd, "add element inet ", table_, " ", set, " { ", absl::StrJoin(*elems, ", "), " }\n");
    elems->clear();
  }
  if (cmd.empty()) return absl::OkStatus();
  return Run(cmd);
}

absl::Status NftResolvedSet::Run(const std::string& commands) {
  if (nft_run_cmd_from_buffer(ctx_, commands.c_str()) != 0) {
    const char* err = nft_ctx_get_error_buffer(ctx_);
    return absl::InternalError(absl::StrCat("nft transaction on table inet ", table_, ": ",
                                            absl::StripAsciiWhitespace(err ? err : "(no message)")));
  }
  return absl::OkStatus();
}

absl::Status NftLearnedSink::Learn(uint64_t /*sandbox: the pod's netns is the sandbox*/, const net::IpAddr& addr,
                                   uint64_t expires_boot_ns, uint32_t /*name_id*/) {
  const uint64_t now = dns::BootTimeNs();
  const uint64_t left = expires_boot_ns > now ? expires_boot_ns - now : 0;
  set_.Add(addr, (left + 999'999'999) / 1'000'000'000);
  return absl::OkStatus();
}

std::string WithDnsRedirect(const std::string& ruleset, const std::string& mark, uint16_t port,
                            const std::string& table) {
  const std::string m = absl::StrCat("0x", mark);
  return absl::StrCat(ruleset, "insert rule inet ", table, " output meta mark ", m, " accept\n",
                      "table inet ", kNftRedirectTable, " {}\ndelete table inet ", kNftRedirectTable, "\n",
                      "table inet ", kNftRedirectTable, " {\n",
                      // The forwarder's own flows are never tracked, either
                      // way: c-ares opens a new upstream socket after an idle
                      // moment, and its source port may be that of a client
                      // flow whose conntrack entry is still redirected (the
                      // forwarder then asked itself) or whose entry clashes
                      // with the answers' (the kernel dropped them).  Only the
                      // forwarder's upstream answers come from port 53 on a
                      // pod interface: every client query is redirected.
                      "  chain raw_output {\n    type filter hook output priority raw; policy accept;\n",
                      "    meta mark ", m, " notrack\n  }\n",
                      "  chain raw_prerouting {\n    type filter hook prerouting priority raw; policy accept;\n",
                      "    iifname != \"lo\" udp sport 53 notrack\n",
                      "    iifname != \"lo\" tcp sport 53 notrack\n  }\n",
                      "  chain output {\n",
                      "    type nat hook output priority -100; policy accept;\n",
                      "    meta mark ", m, " return\n",
                      "    udp dport 53 redirect to :", port, "\n",
                      "    tcp dport 53 redirect to :", port, "\n  }\n}\n");
}

}  // namespace egressd::bench
