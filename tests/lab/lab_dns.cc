#include "lab_dns.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace egressd::lab {

absl::StatusOr<std::unique_ptr<DnsServer>> DnsServer::Start(const DnsServerSpec& spec) {
  RunSpec rs;
  // Nothing but what the test gave: no config file, hosts file, resolv.conf,
  // DHCP or cache; every query logged to stderr.
  rs.argv = {"dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv", "--no-hosts",
             "--no-poll", "--bind-interfaces", "--cache-size=0", "--user=root", "--group=root",
             "--pid-file=", "--log-queries", "--log-facility=-", absl::StrCat("--port=", spec.port)};
  for (const auto& a : spec.listen) rs.argv.push_back("--listen-address=" + a);
  for (const auto& [name, addrs] : spec.records) {
    rs.argv.push_back(absl::StrCat("--host-record=", name, ",", absl::StrJoin(addrs, ",")));
  }
  for (const auto& [alias, target] : spec.cnames) rs.argv.push_back(absl::StrCat("--cname=", alias, ",", target));
  rs.netns = spec.netns;
  rs.timeout = std::chrono::hours(1);
  auto bg = lab::Start(rs);
  if (!bg.ok()) return bg.status();
  std::unique_ptr<DnsServer> s(new DnsServer(spec, std::move(*bg)));
  // dnsmasq binds its sockets before it logs that it started.
  const bool up = Lab::WaitFor([&] { return s->Log().find("started, version") != std::string::npos || !s->bg_.running(); },
                               std::chrono::seconds(10));
  if (!up || !s->bg_.running()) {
    return absl::InternalError(absl::StrCat("dnsmasq on ", absl::StrJoin(spec.listen, ","), " port ", spec.port,
                                            " did not start: ", s->Log()));
  }
  return s;
}

DnsServer::~DnsServer() { bg_.Stop(); }

std::string DnsServer::Log() const { return bg_.err(); }

uint64_t DnsServer::Queries() const {
  uint64_t n = 0;
  for (absl::string_view line : absl::StrSplit(Log(), '\n')) n += line.find(": query[") != absl::string_view::npos;
  return n;
}

uint64_t DnsServer::QueriesFor(const std::string& name) const {
  uint64_t n = 0;
  for (absl::string_view line : absl::StrSplit(Log(), '\n')) {
    size_t q = line.find(": query[");
    if (q == absl::string_view::npos) continue;
    size_t sp = line.find("] ", q);
    if (sp == absl::string_view::npos) continue;
    absl::string_view rest = line.substr(sp + 2);
    n += rest.substr(0, rest.find(' ')) == name;
  }
  return n;
}

}  // namespace egressd::lab
