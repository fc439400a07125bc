"""Shards on the deployed cluster: two --gres=shard:1 jobs on one node run at the same time and
see the same GPU (Slurm sets CUDA_VISIBLE_DEVICES for shards as for a GPU, and
SLURM_SHARDS_ON_NODE to the shards the step holds)."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from deployed import SLURM_CONF, deployed

D = deployed()
HOLD_S = 15  # each job holds its shard this long, so the two must overlap to finish together


def shard_nodes() -> list[str]:
    """First host of each slurm.conf node line offering shards."""
    text = D.rendered(SLURM_CONF) or ""
    hosts = []
    for line in text.splitlines():
        m = re.match(r"NodeName=(\S+) .*Gres=\S*shard:\d+", line)
        if m:
            from hal_provision.hostlist import nodeset

            hosts.append(nodeset(m.group(1))[0])
    return hosts


NODES = shard_nodes()


@pytest.mark.skipif(
    not NODES,
    reason="the deployed model offers no shards (no compute group sets gpu_sharing.shards_per_gpu): nothing to share",
)
@pytest.mark.parametrize("node", NODES)
def test_two_shard_jobs_share_one_gpu_at_once(node):
    probe = (
        f"echo start $(date +%s.%N) gpu=$CUDA_VISIBLE_DEVICES shards=$SLURM_SHARDS_ON_NODE; "
        f"sleep {HOLD_S}; echo end $(date +%s.%N)"
    )
    one = f"srun -w {node} -N1 -n1 --gres=shard:1 --chdir=/tmp bash -c {shlex.quote(probe)}"
    out = D.user_ok(
        f"bash -c {shlex.quote(f'{one} > /tmp/shard-a.$$ & {one} > /tmp/shard-b.$$ & wait; cat /tmp/shard-[ab].$$; rm -f /tmp/shard-[ab].$$')}"
    )
    starts = [float(x) for x in re.findall(r"^start (\S+)", out, re.M)]
    ends = [float(x) for x in re.findall(r"^end (\S+)", out, re.M)]
    gpus = re.findall(r"gpu=(\S*)", out)
    shards = re.findall(r"shards=(\S*)", out)
    assert len(starts) == len(ends) == 2, out
    assert max(starts) < min(ends), f"the second shard job started after the first ended: {out}"
    assert gpus[0] == gpus[1] != "", f"both shard jobs should see one GPU: {out}"
    assert shards == ["1", "1"], out


TABLE = json.loads(D.rendered("etc/swsuite/virtual-partitions.json") or "{}").get("virtual_partitions", {})
SHARD_VPS = sorted(name for name, vp in TABLE.items() if vp["kind"] == "shard" and vp["shards"] == 1)


@pytest.mark.skipif(not SHARD_VPS, reason="the model's wrapper suite has no one-shard virtual partition")
def test_two_swrun_jobs_of_a_shard_partition_share_one_gpu_at_once():
    """What a user types: two `swrun -p <shard partition>` at once; both run together, each
    holding one shard of the same GPU (the wrapper suite's --gres=shard:1)."""
    name = SHARD_VPS[0]
    probe = (
        f"echo start $(date +%s.%N) gpu=$CUDA_VISIBLE_DEVICES shards=$SLURM_SHARDS_ON_NODE; "
        f"sleep {HOLD_S}; echo end $(date +%s.%N)"
    )
    one = f"swrun -p {name} -t 0:05 -- bash -c {shlex.quote(probe)}"
    out = D.user_ok(
        f"cd /tmp && ({one} > shard-a.$$ & {one} > shard-b.$$ & wait); cat shard-[ab].$$; rm -f shard-[ab].$$"
    )
    starts = [float(x) for x in re.findall(r"^start (\S+)", out, re.M)]
    ends = [float(x) for x in re.findall(r"^end (\S+)", out, re.M)]
    assert len(starts) == len(ends) == 2, out
    assert max(starts) < min(ends), f"the second {name} job started after the first ended: {out}"
    gpus = re.findall(r"gpu=(\S*)", out)
    assert gpus[0] == gpus[1] != "" and re.findall(r"shards=(\S*)", out) == ["1", "1"], out
