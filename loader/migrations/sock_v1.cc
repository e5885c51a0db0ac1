// egr_sock_v1 -> egr_sock_v2 (retired by fe2353d "ABI v2": the resolver a
// redirected query asked).  Socket storage lives on each socket and cannot
// be enumerated or read from user space without the socket, so nothing is
// carried: a socket connected under the old programs has no v2 record, which
// the backstop reads as it reads any unrecorded socket (a TCP socket passes as
// inbound-or-accepted, a connected UDP socket's sends are judged by the
// policy like an unconnected socket's: never more than the policy allows).
// The old map is unpinned after the swap and freed with its last socket.
#include <linux/bpf.h>

#include "loader/migration.h"
#include "maps/egressd_abi.h"

namespace egressd {

const Migration kMigrateSockV1 = {
    "egr_sock_v1", EGR_MAP_SOCK,
    {"egr_sock_v1", BPF_MAP_TYPE_SK_STORAGE, sizeof(int), 40, 0, BPF_F_NO_PREALLOC},
    nullptr, nullptr,
    "per-socket records: not enumerable from user space, sockets read as unrecorded"};

}  // namespace egressd
