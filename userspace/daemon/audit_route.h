// GET /v1/audit (docs/api.md): the audit trail's JSON lines as
// application/x-ndjson, from the spools the trail's holder writes
// (userspace/audit/spool.h: all.jsonl, or the sandbox's own), filtered by
// audit::Matches, the same code as `egressctl audit`.  Without follow: the
// lines of the spool's current file up to the request, then the end.  With
// follow=1 the response stays open (chunked) and each new line goes out once
// it is written (the audit host's kick after every drain and window).
//
// Never blocking the loop, bounded: a stream has one chunk in flight; it
// reads its spool only when that chunk is written, so the spool on disk is
// the buffer, not the daemon's memory.  A reader so slow that the spool
// rotated past it (more than its 4 files behind) gets a final `loss` line
// saying so and is cut.  DNS and the API never wait for a reader.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "userspace/common/node.h"
#include "userspace/daemon/audit_host.h"
#include "userspace/daemon/http_server.h"

namespace egressd::daemon {

class AuditRoute {
 public:
  // `sandbox_id_of`: an API id's cgroup id (nullopt: none registered).
  using IdOf = std::function<std::optional<uint64_t>(const std::string& api_id)>;
  AuditRoute(Paths paths, AuditHost& host, IdOf sandbox_id_of);
  ~AuditRoute();

  // `target`: "/v1/audit?follow=1&sandbox=..." (query parameters: follow,
  // sandbox (cgroup id or API id), verdict, type, since).  400 naming a bad
  // or unknown parameter.
  Response Get(const std::string& target);
  size_t streams() const;

  struct Follower;

 private:
  void Kick();

  Paths paths_;
  IdOf sandbox_id_of_;
  std::shared_ptr<std::vector<std::shared_ptr<Follower>>> followers_;
};

// "a%20b" -> "a b" ('+' as a space); nullopt on a bad escape.
std::optional<std::string> PercentDecode(const std::string& s);

}  // namespace egressd::daemon
