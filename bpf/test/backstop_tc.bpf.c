/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* Test-only, never embedded in egressctl: the backstop's judgement from a tc
 * program at L2, the shape the pod-egress tc program will take.  The priv
 * backstop vectors run through it and through cgroup_skb/egress and must get
 * the same decisions.  The sandbox comes from the skb's socket here because
 * BPF_PROG_TEST_RUN charges its dummy socket to the caller's cgroup; the real
 * tc program will find it another way (pod traffic has lost its socket). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "lib/decision.h"
#include "lib/sandbox.h"
#include "lib/backstop.h"

#define EGR_ETH_HLEN 14
#define EGR_TC_ACT_OK 0
#define EGR_TC_ACT_SHOT 2

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("tc")
int egr_test_backstop_tc(struct __sk_buff *skb)
{
	struct egr_decision d =
		egr_backstop_judge(skb, EGR_ETH_HLEN, egr_sandbox_of_skb(skb));

	return egr_lets_through(d) ? EGR_TC_ACT_OK : EGR_TC_ACT_SHOT;
}
