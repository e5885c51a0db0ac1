// Fault injection for tests: named points in the control plane where a test
// makes egressd fail (as the kernel or the system would) or die, to prove
// what an operator then sees and what the next start repairs.
//
//   EGRESSD_FAULT=attach:egr_sendmsg4        InjectedError("attach:egr_sendmsg4") returns EIO
//   EGRESSD_FAULT=attach:egr_sendmsg4=EPERM  ... with that errno
//   EGRESSD_CRASH_AT=register:after-record   CrashPoint("register:after-record") SIGKILLs the process
//   EGRESSD_CRASH_AT=run:registered=SIGTERM  ... sends it SIGTERM instead (a signal that can be
//                                            blocked or handled: the test proves it is)
//
// Several points may be listed, comma-separated.  Unset (every production
// run) each check is one getenv of a variable that is absent.
#pragma once

#include <string_view>

namespace egressd {

// 0 when the point is not armed, else the errno to fail with (EIO unless the
// variable names one: EPERM, EINVAL, ENOSPC, E2BIG, EBUSY, ENOENT, EIO).
int InjectedError(std::string_view point);

// SIGKILLs the calling process when EGRESSD_CRASH_AT names this point (or
// sends the signal named after '=': SIGTERM, SIGINT, SIGHUP): the test then
// sees exactly the state a crash, or an operator's signal, there leaves.
void CrashPoint(std::string_view point);

}  // namespace egressd
