/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* What bpf/lib decides, independent of the program type that asked.  Every
 * decision function returns a struct egr_decision; each SEC() entry point
 * maps it to its own return codes (sock_addr, cgroup_skb, and later tc), so
 * one judgement serves every hook and the reason is at hand for the audit
 * trail. */
#ifndef EGRESSD_BPF_LIB_DECISION_H
#define EGRESSD_BPF_LIB_DECISION_H

#include "lib/maps.h"

enum egr_action {
	EGR_PASS = 0,
	EGR_DENY_REJECT, /* refuse so the caller learns it (EPERM) */
	EGR_DENY_DROP,   /* refuse silently: the caller sees a timeout */
	/* a denial of an audit-only sandbox's policy, let through and recorded
	 * as would-deny (lib/audit_mode.h); only egr_audit_only() makes it */
	EGR_PASS_WOULD_DENY,
};

/* enum egr_reason is in maps/egressd_abi.h: the audit record carries it. */


struct egr_decision {
	__u8 action; /* enum egr_action */
	__u8 reason; /* enum egr_reason */
};

static __always_inline struct egr_decision egr_decide(enum egr_action action,
						      enum egr_reason reason)
{
	struct egr_decision d = { .action = action, .reason = reason };

	return d;
}

/* A denial in the form the policy asks for; a missing policy rejects. */
static __always_inline struct egr_decision egr_deny(const struct egr_policy_val *pol,
						    enum egr_reason reason)
{
	return egr_decide(pol && pol->deny_action == EGR_ACTION_DROP ? EGR_DENY_DROP
								     : EGR_DENY_REJECT,
			  reason);
}

/* A pass of the policy's (what the judges compose: a would-deny is made only
 * after them, by the entry point's judge). */
static __always_inline int egr_passes(struct egr_decision d)
{
	return d.action == EGR_PASS;
}

/* Lets the caller through: a pass, or an audit-only sandbox's would-deny. */
static __always_inline int egr_lets_through(struct egr_decision d)
{
	return d.action == EGR_PASS || d.action == EGR_PASS_WOULD_DENY;
}

/* Counts a decision under the entry point's own pass/deny counters.  What
 * egressd did not judge (not a sandbox, not IP) is not counted; a contained
 * cgroup's refusal has its own counter whatever the hook. */
static __always_inline void egr_count_decision(struct egr_decision d, __u32 pass_stat,
					       __u32 deny_stat)
{
	__u32 stat;

	if (d.reason == EGR_REASON_NOT_SANDBOX || d.reason == EGR_REASON_NOT_IP)
		return;
	if (d.reason == EGR_REASON_CONTAINED)
		stat = EGR_STAT_CONTAINED_DENY;
	else /* a would-deny is a pass (its own counter is the recorder's) */
		stat = egr_lets_through(d) ? pass_stat : deny_stat;
	egr_count(stat); /* one lookup site, not one per counter */
}

/* Counts a refusal only, for hooks that count no passes (the LSM programs,
 * setsockopt): what egressd did not judge, and every pass, cost nothing. */
static __always_inline void egr_count_refusal(struct egr_decision d, __u32 deny_stat)
{
	if (egr_passes(d) || d.reason == EGR_REASON_NOT_SANDBOX || d.reason == EGR_REASON_NOT_IP)
		return;
	egr_count(d.reason == EGR_REASON_CONTAINED ? EGR_STAT_CONTAINED_DENY : deny_stat);
}

#endif
