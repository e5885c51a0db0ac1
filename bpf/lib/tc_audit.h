/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* The audit trail of the tc program (issue 17): the same records as the
 * cgroup programs' (struct egr_event on egr_events_v1, the same budget,
 * folding and loss accounting of lib/audit.h), of kind EGR_EVENT_TC, naming
 * the sandbox by its id (egr_ifsbox_v1's value: user space adds its labels)
 * and the host-side interface by its ifindex (user space its name).  There is
 * no task at tc (softirq, and the sender may be a netstack or a guest): the
 * record has no process and cgroup_id 0.
 *
 * Recorded: every denial and every would-deny (an audit-only sandbox).  A
 * strict sandbox's passes too, since at the veth there is no connect() to
 * record them: a TCP SYN one by one within the budget (like a connect), any
 * other passed packet of a flow opening (UDP, ICMP, ...) folded per
 * destination into the window's summary (like a socket's repeated sends);
 * TCP segments past the SYN belong to a recorded open.  ARP and neighbour
 * discovery are the link's, not recorded.
 *
 * egr_tc_audit() is the one entry: the tc wrapper calls it for every
 * decision, and per-flow state (a flow that cannot be tracked) calls it for
 * what it judged per packet. */
#ifndef EGRESSD_BPF_LIB_TC_AUDIT_H
#define EGRESSD_BPF_LIB_TC_AUDIT_H

#include "lib/maps.h"
#include "lib/decision.h"
#include "lib/audit.h"
#include "lib/judge_once.h"
#include "lib/tc_veth.h"

/* A global function, verified once (as egr_audit_skb_record): the ctx and
 * scalars only, the decision packed action << 8 | reason.  1: on the record
 * (or nothing to record); 0: lost (counted in egr_loss_v1). */
__noinline int egr_audit_tc_record(struct __sk_buff *skb, __u64 sandbox_id, __u32 policy_id,
				   __u32 decision)
{
	struct egr_event_key k = {};
	struct egr_event_task t = {};
	struct egr_match m = {};
	struct egr_addr dst;
	__u32 action = (decision >> 8) & 0xff, reason = decision & 0xff;
	int fold_only = 0;

	if (!skb || reason == EGR_REASON_NOT_SANDBOX || reason == EGR_REASON_NOT_IP ||
	    reason == EGR_REASON_LINK_LOCAL)
		return 1;
	/* A flow the tc flow table could not hold (lib/tc_flow.h) is recorded
	 * whatever the audit mode: it is judged per packet from now on. */
	if (action == EGR_PASS && reason != EGR_REASON_FLOW_UNTRACKED) {
		struct egr_policy_val *pol = bpf_map_lookup_elem(&egr_policy_v1, &policy_id);

		if (!pol || !(pol->flags & EGR_POLICY_STRICT_AUDIT))
			return 1;
	}
	k.sandbox_id = sandbox_id;
	k.kind = EGR_EVENT_TC;
	k.action = action;
	k.reason = reason;
	k.ifindex = skb->ifindex;
	k.epoch = egr_audit_epoch();
	egr_audit_skb_dst(skb, EGR_ETH_HLEN, &k);
	if (action == EGR_PASS && k.family) {
		__u32 l4 = EGR_ETH_HLEN;
		__u8 b0 = 0, flags = 0;

		/* where the TCP header is, from the fixed header (a pass
		 * went through the judge's parse) */
		if (k.family == EGR_AF_INET) {
			bpf_skb_load_bytes(skb, EGR_ETH_HLEN, &b0, 1);
			l4 += (b0 & 0x0f) * 4;
		} else {
			l4 += 40;
		}
		if (k.protocol == IPPROTO_TCP) {
			if (bpf_skb_load_bytes(skb, l4 + 13, &flags, 1) ||
			    (flags & 0x12) != 0x02)
				return 1; /* not an open: part of a recorded one */
		} else {
			fold_only = 1;
		}
	}
	if (action == EGR_PASS_WOULD_DENY)
		egr_count(EGR_STAT_WOULD_DENY);
	if (k.family) {
		__builtin_memcpy(dst.b, k.daddr, 16);
		egr_audit_match(sandbox_id, policy_id, reason, &dst, &m);
	}
	if (fold_only)
		return egr_audit_fold(&k, &t, 0, &m, bpf_ktime_get_boot_ns());
	return egr_audit_record(&k, &t, 0, &m);
}

/* The record of decision d about the packet in skb from the pod behind
 * skb->ifindex, whose sandbox is sb.  1: on the record (or nothing to
 * record); 0: lost, which a strict sandbox's pass must not survive (the
 * caller turns it into a drop, egr_tc_audit_strict). */
static __always_inline int egr_tc_audit(struct __sk_buff *skb, const struct egr_cgroup_val *sb,
					struct egr_decision d)
{
	if (!sb)
		return 1;
	return egr_audit_tc_record(skb, sb->sandbox_id, sb->policy_id,
				   (__u32)egr_decision_pack(d));
}

/* A strict sandbox's pass whose record was lost is refused (as
 * lib/audit_mode.h refuses a connect): dropped, counted. */
static __always_inline struct egr_decision egr_tc_audit_strict(struct egr_decision d)
{
	if (d.action != EGR_PASS) /* only a strict sandbox's passes are recorded */
		return d;
	egr_count(EGR_STAT_STRICT_DENY);
	return egr_decide(EGR_DENY_DROP, EGR_REASON_AUDIT_UNRECORDED);
}

#endif
