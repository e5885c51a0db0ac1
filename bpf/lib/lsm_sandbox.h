/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* Which sandbox a task or a socket belongs to, for the LSM hooks: the
 * registered cgroup (a sandbox or a contained root) deepest above it, named by
 * its cgroup id so two callers can be compared.  Same rule as lib/sandbox.h;
 * the socket side walks the cgroup's ancestors[] with CO-RE reads because no
 * helper gives an LSM program a socket's ancestor ids. */
#ifndef EGRESSD_BPF_LIB_LSM_SANDBOX_H
#define EGRESSD_BPF_LIB_LSM_SANDBOX_H

#include <bpf/bpf_core_read.h>
#include "lib/maps.h"

/* 0 when the task is in no registered cgroup. */
static __always_inline __u64 egr_lsm_sandbox_of_current(void)
{
	__u64 found = 0;

	for (int lvl = 1; lvl < EGR_MAX_CGROUP_DEPTH; lvl++) {
		__u64 id = bpf_get_current_ancestor_cgroup_id(lvl);

		if (!id)
			break;
		if (bpf_map_lookup_elem(&egr_cgroups_v1, &id))
			found = id;
	}
	return found;
}

/* The cgroup a socket was created in (cgroup v2 sock_cgroup_data). */
static __always_inline __u64 egr_lsm_sandbox_of_sock(struct sock *sk)
{
	struct cgroup *cg = BPF_CORE_READ(sk, sk_cgrp_data.cgroup);
	__u64 found = 0;
	int level;

	if (!cg)
		return 0;
	level = BPF_CORE_READ(cg, level);
	for (int lvl = 1; lvl < EGR_MAX_CGROUP_DEPTH; lvl++) {
		struct cgroup *anc = NULL;
		__u64 id;

		if (lvl > level)
			break;
		bpf_core_read(&anc, sizeof(anc), &cg->ancestors[lvl]);
		if (!anc)
			break;
		id = BPF_CORE_READ(anc, kn, id);
		if (bpf_map_lookup_elem(&egr_cgroups_v1, &id))
			found = id;
	}
	return found;
}

#endif
