/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* egr_judge (lib/verdict.h) as a global BPF function.  The verifier checks a
 * global (non-static) function once per program, on its own, instead of once
 * per call site and per state the caller arrives in.  Inlined, the backstop's
 * judge of a packet's destination and of each of up to eight routing-header
 * hops made the cgroup_skb program 561k verified instructions, 20-45 s a
 * load under qemu TCG (and 4.5 s on the 6.18 CI host); through this wrapper
 * it is 82k, and connect6/sendmsg6 go from 57k to 17k.  Decisions stay in
 * the static __always_inline functions of bpf/lib: this adds none.
 *
 * A global function returns a scalar and sees each pointer argument as
 * memory of its type's size that may be NULL, so the decision comes packed
 * (action << 8 | reason) and a NULL argument, which no caller passes (each
 * has refused a missing policy already), is refused as one. */
#ifndef EGRESSD_BPF_LIB_JUDGE_ONCE_H
#define EGRESSD_BPF_LIB_JUDGE_ONCE_H

#include "lib/decision.h"
#include "lib/verdict.h"

static __always_inline int egr_decision_pack(struct egr_decision d)
{
	return (int)((__u32)d.action << 8 | d.reason);
}

static __always_inline struct egr_decision egr_decision_unpack(int packed)
{
	return egr_decide((packed >> 8) & 0xff, packed & 0xff);
}

/* port is in host order and use an enum egr_resolved_use (__u32s only
 * because a global function's scalar arguments arrive as full registers). */
__noinline int egr_judge_once_packed(const struct egr_cgroup_val *sb,
				     const struct egr_policy_val *pol,
				     const struct egr_addr *a, __u32 port, __u32 use)
{
	if (!sb || !pol || !a)
		return egr_decision_pack(egr_decide(EGR_DENY_REJECT, EGR_REASON_NO_POLICY));
	return egr_decision_pack(egr_judge_use(sb, pol, a, (__u16)port, (int)use));
}

/* egr_judge_use, verified once: same arguments, same decision. */
static __always_inline struct egr_decision egr_judge_use_once(const struct egr_cgroup_val *sb,
							      const struct egr_policy_val *pol,
							      const struct egr_addr *a, __u16 port,
							      int use)
{
	return egr_decision_unpack(egr_judge_once_packed(sb, pol, a, port, (__u32)use));
}

/* egr_judge, verified once: a new destination. */
static __always_inline struct egr_decision egr_judge_once(const struct egr_cgroup_val *sb,
							  const struct egr_policy_val *pol,
							  const struct egr_addr *a, __u16 port)
{
	return egr_judge_use_once(sb, pol, a, port, EGR_RES_NEW);
}

#endif
