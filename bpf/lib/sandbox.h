/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* Which sandbox a process or socket belongs to.  A sandbox is a registered
 * cgroup and everything below it, so the lookup walks the ancestors from the
 * root down and keeps the deepest registered one: a sandbox below a contained
 * root is judged by its own policy, and a child cgroup a sandbox creates for
 * itself is still that sandbox. */
#ifndef EGRESSD_BPF_LIB_SANDBOX_H
#define EGRESSD_BPF_LIB_SANDBOX_H

#include "lib/maps.h"

/* Level 0 is the cgroup2 root, which is never a sandbox. */
#define EGR_SANDBOX_WALK(ancestor_of)                                        \
	({                                                                   \
		struct egr_cgroup_val *found_ = NULL;                        \
		for (int lvl_ = 1; lvl_ < EGR_MAX_CGROUP_DEPTH; lvl_++) {    \
			__u64 id_ = ancestor_of(lvl_);                     \
			struct egr_cgroup_val *v_;                           \
			if (!id_)                                            \
				break;                                       \
			v_ = bpf_map_lookup_elem(&egr_cgroups_v1, &id_);     \
			if (v_)                                              \
				found_ = v_;                                 \
		}                                                            \
		found_;                                                      \
	})

/* The calling task's cgroup (sock_addr hooks run in the caller's context). */
static __always_inline struct egr_cgroup_val *egr_sandbox_of_current(void)
{
#define EGR_CURRENT_ANCESTOR(l) bpf_get_current_ancestor_cgroup_id(l)
	return EGR_SANDBOX_WALK(EGR_CURRENT_ANCESTOR);
#undef EGR_CURRENT_ANCESTOR
}

/* The socket's cgroup (the skb backstop may run in softirq context, where
 * "current" is unrelated to the packet). */
static __always_inline struct egr_cgroup_val *egr_sandbox_of_skb(struct __sk_buff *skb)
{
#define EGR_SKB_ANCESTOR(l) bpf_skb_ancestor_cgroup_id(skb, l)
	return EGR_SANDBOX_WALK(EGR_SKB_ANCESTOR);
#undef EGR_SKB_ANCESTOR
}

#endif
