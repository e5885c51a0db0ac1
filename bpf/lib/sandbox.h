/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* Which sandbox a process or socket belongs to.  A sandbox is a registered
 * cgroup and everything below it, so the lookup walks the ancestors from the
 * root down and keeps the deepest registered one: a sandbox below a contained
 * root is judged by its own policy, and a child cgroup a sandbox creates for
 * itself is still that sandbox. */
#ifndef EGRESSD_BPF_LIB_SANDBOX_H
#define EGRESSD_BPF_LIB_SANDBOX_H

#include "lib/maps.h"
#include <bpf/bpf_core_read.h>

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

/* The calling task's cgroup, for hooks that have no ancestor helper on the
 * oldest supported kernel (cgroup/setsockopt gains it only in 6.4): read
 * from the task's default-hierarchy cgroup (CO-RE, so the layout of the
 * running kernel applies), the same ids bpf_get_current_ancestor_cgroup_id
 * returns. */
static __always_inline __u64 egr_task_ancestor_cgroup_id(struct cgroup *cg, int level, int l)
{
	struct cgroup *anc = NULL;

	if (!cg || l > level)
		return 0;
	if (bpf_core_read(&anc, sizeof(anc), &cg->ancestors[l]) || !anc)
		return 0;
	return BPF_CORE_READ(anc, kn, id);
}

static __always_inline struct egr_cgroup_val *egr_sandbox_of_task(void)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct cgroup *cg = BPF_CORE_READ(task, cgroups, dfl_cgrp);
	int level = cg ? BPF_CORE_READ(cg, level) : 0;

#define EGR_TASK_ANCESTOR(l) egr_task_ancestor_cgroup_id(cg, level, l)
	return EGR_SANDBOX_WALK(EGR_TASK_ANCESTOR);
#undef EGR_TASK_ANCESTOR
}

#endif
