/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* The two audit modes an operator may give a sandbox at registration
 * (egr_policy_val.flags, maps/egressd_abi.h; docs/audit.md).
 *
 * Audit-only: a denial the policy itself makes (nothing it allows matched:
 * default-deny) is let through and recorded as would-deny.  Everything that
 * protects the node or keeps the sandbox's judgement whole stays denied:
 * protected ranges (checked before the policy), contained roots, a dangling
 * policy, DNS queries that bypass or name the endpoint, socket families and
 * unix peers (LSM), multicast and broadcast options, loopback leaving on a
 * link, a routing-header hop the policy does not allow (and any packet with a
 * routing header whose destination the policy does not allow), malformed
 * packets and TCP opens no connect() recorded.
 *
 * Strict: what a strict sandbox's connect() or send lets through is on the
 * record.  An occurrence whose event could be neither put on the ring nor
 * folded (it is counted as lost) is refused instead.  The backstop's records
 * are of what it refuses, so strict has nothing to add there. */
#ifndef EGRESSD_BPF_LIB_AUDIT_MODE_H
#define EGRESSD_BPF_LIB_AUDIT_MODE_H

#include "lib/maps.h"
#include "lib/decision.h"

static __always_inline struct egr_decision egr_audit_only(const struct egr_policy_val *pol,
							  struct egr_decision d)
{
	if (pol && (pol->flags & EGR_POLICY_AUDIT_ONLY) && d.reason == EGR_REASON_DEFAULT &&
	    (d.action == EGR_DENY_REJECT || d.action == EGR_DENY_DROP))
		d.action = EGR_PASS_WOULD_DENY;
	return d;
}

/* Called only when the occurrence was lost (rare): the policy is looked up
 * again rather than carried through every judgement. */
static __always_inline struct egr_decision egr_audit_strict(struct bpf_sock_addr *ctx,
							    const struct egr_cgroup_val *sb,
							    struct egr_decision d, int is_connect)
{
	struct egr_policy_val *pol;
	struct egr_sock_val *st;

	if (!sb || !egr_lets_through(d))
		return d;
	pol = bpf_map_lookup_elem(&egr_policy_v1, &sb->policy_id);
	if (!pol || !(pol->flags & EGR_POLICY_STRICT_AUDIT))
		return d;
	/* The judge noted an allowed connection on the socket; it is not one
	 * (a send keeps whatever connection the socket has). */
	if (is_connect && ctx->sk) {
		st = bpf_sk_storage_get(&egr_sock_v2, ctx->sk, 0, 0);
		if (st)
			st->flags &= ~EGR_SOCK_CONNECTED;
	}
	egr_count(EGR_STAT_STRICT_DENY); /* also a connect/sendmsg deny */
	return egr_decide(EGR_DENY_REJECT, EGR_REASON_AUDIT_UNRECORDED);
}

#endif
