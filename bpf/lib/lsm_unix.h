/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* Abstract unix sockets (BPF LSM unix_stream_connect / unix_may_send).  An
 * abstract name lives in the network namespace, not the filesystem, so a
 * private /run does not hide the node's (or another sandbox's) abstract
 * listeners from a sandbox in the node netns.  A sandbox may reach an
 * abstract peer only when the peer socket was created in the same sandbox.
 * Pathname sockets are left to the filesystem view (the private /run of
 * `egressctl run`); unnamed ones (socketpair) are the caller's own. */
#ifndef EGRESSD_BPF_LIB_LSM_UNIX_H
#define EGRESSD_BPF_LIB_LSM_UNIX_H

#include "lib/decision.h"
#include "lib/lsm_sandbox.h"

/* Bound to an abstract name: sun_path starts with NUL.  Autobind names are
 * abstract too. */
static __always_inline int egr_unix_is_abstract(struct sock *sk)
{
	struct unix_sock *u = (struct unix_sock *)sk;
	struct unix_address *addr = BPF_CORE_READ(u, addr);
	char first = 1;
	int len;

	if (!addr)
		return 0;
	len = BPF_CORE_READ(addr, len);
	/* sizeof(sa_family_t): an address no longer than that is unnamed. */
	if (len <= 2)
		return 0;
	bpf_core_read(&first, 1, &addr->name[0].sun_path[0]);
	return first == 0;
}

static __always_inline struct egr_decision egr_unix_peer_judge(struct sock *peer)
{
	__u64 mine = egr_lsm_sandbox_of_current();

	if (!mine)
		return egr_decide(EGR_PASS, EGR_REASON_NOT_SANDBOX);
	if (!peer || !egr_unix_is_abstract(peer))
		return egr_decide(EGR_PASS, EGR_REASON_ALLOWED);
	if (egr_lsm_sandbox_of_sock(peer) == mine)
		return egr_decide(EGR_PASS, EGR_REASON_ALLOWED);
	return egr_decide(EGR_DENY_REJECT, EGR_REASON_FOREIGN_PEER);
}

#endif
