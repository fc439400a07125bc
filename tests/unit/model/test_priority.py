"""Job priority: slurm.priority's defaults, the type in force, and the Priority* lines of
slurm.conf under priority/multifactor and priority/basic, with the partitions' PriorityTier.

The checks on it are rows of test_checks.py; tests/acceptance/test_slurmctld.py has slurmctld
load what is rendered here."""

from __future__ import annotations

from pathlib import Path

import pytest

from hal_provision.model import Cluster, Priority
from hal_provision.model.slurm import PRIORITY_MAX
from hal_provision.render.slurm import slurm_conf
from hal_provision.loader import validate

CLUSTERS = Path(__file__).resolve().parents[2] / "data" / "clusters"


def load(file: Path | None = None) -> Cluster:
    loaded = validate(file)
    assert loaded.model is not None, [f.format() for f in loaded.findings]
    return loaded.model


def variant(cluster: Cluster, edit) -> Cluster:
    """A copy of `cluster` after `edit(data)` on its plain data, validated again."""
    data = cluster.model_dump(mode="json", exclude_none=True)
    edit(data)
    return Cluster.model_validate(data)


def priority_block(conf: str) -> list[str]:
    return [line for line in conf.splitlines() if line.startswith("Priority")]


def no_policy(data: dict) -> None:
    """sacctmgr's default shares and QOS without a priority: nothing for multifactor to weigh."""
    for group in data["accounts"]["groups"]:
        group["fairshare"] = 1
    for qos in data["slurm"]["qos"]:
        qos["priority"] = 0


def test_defaults_are_slurms_where_it_has_one():
    p = Priority()
    assert p.type is None
    assert (p.decay_half_life, p.max_age, p.favor_small, p.usage_reset_period, p.calc_period_minutes) == (
        "7-00:00:00",
        "7-00:00:00",
        False,
        "NONE",
        5,
    )
    assert (p.weight_age, p.weight_fairshare, p.weight_job_size, p.weight_partition, p.weight_qos) == (
        1000,
        10000,
        0,
        0,
        10000,
    )
    assert p.weight_tres == {}
    assert p.highest_priority == 21000


def test_highest_priority_leaves_negative_tres_weights_out():
    p = Priority(weight_tres={"CPU": -500, "GRES/gpu": 3000})
    assert p.highest_priority == 21000 + 3000
    assert Priority(weight_age=PRIORITY_MAX, weight_fairshare=0, weight_qos=0).highest_priority == PRIORITY_MAX


def test_hal_is_multifactor_by_its_own_word(hal):
    assert (hal.slurm.priority.type, hal.priority_type) == ("multifactor", "multifactor")
    assert [g.slurm_account for _i, g in hal.fair_share_groups()] == ["astro", "bioml"]
    assert [q.name for _i, q in hal.slurm.prioritised_qos()] == ["normal", "debug"]


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        pytest.param(lambda d: None, "multifactor", id="fair-share-and-qos-priorities"),
        pytest.param(no_policy, "basic", id="nothing-to-weigh"),
        pytest.param(
            lambda d: (no_policy(d), d["accounts"]["groups"][2].update(fairshare=0)),
            "multifactor",
            id="one-account-with-no-shares",
        ),
        pytest.param(
            lambda d: (no_policy(d), d["slurm"]["qos"][1].update(priority=1)), "multifactor", id="one-qos-priority"
        ),
        # Shares on a group without a Slurm account reach no sacctmgr association.
        pytest.param(
            lambda d: (no_policy(d), d["accounts"]["groups"][0].update(fairshare=5)),
            "basic",
            id="shares-without-a-slurm-account",
        ),
    ],
)
def test_type_left_out_follows_the_policies(hal, edit, expected):
    def without_type(data):
        del data["slurm"]["priority"]["type"]
        edit(data)

    assert variant(hal, without_type).priority_type == expected


def test_type_the_site_names_wins(hal):
    chosen = variant(hal, lambda d: d["slurm"]["priority"].update(type="basic"))
    assert chosen.priority_type == "basic"  # an error of the checks, but the model says what the site said


def test_hal_renders_multifactor_with_its_weights(hal):
    assert priority_block(slurm_conf(hal)) == [
        "PriorityType=priority/multifactor",
        "PriorityWeightAge=1000",
        "PriorityWeightFairshare=100000",
        "PriorityWeightJobSize=0",
        "PriorityWeightPartition=0",
        "PriorityWeightQOS=10000",
        "PriorityDecayHalfLife=7-00:00:00",
        "PriorityMaxAge=7-00:00:00",
        "PriorityFavorSmall=NO",
        "PriorityUsageResetPeriod=NONE",
        "PriorityCalcPeriod=5",
    ]


def test_every_setting_is_rendered(hal):
    cluster = variant(
        hal,
        lambda d: d["slurm"]["priority"].update(
            weight_job_size=50,
            weight_partition=7,
            favor_small=True,
            decay_half_life="14-00:00:00",
            max_age="2-00:00:00",
            usage_reset_period="MONTHLY",
            calc_period_minutes=10,
            weight_tres={"GRES/gpu": 3000, "CPU": -1000, "Mem": 2000},
        ),
    )
    block = priority_block(slurm_conf(cluster))
    for line in (
        "PriorityWeightJobSize=50",
        "PriorityWeightPartition=7",
        "PriorityFavorSmall=YES",
        "PriorityDecayHalfLife=14-00:00:00",
        "PriorityMaxAge=2-00:00:00",
        "PriorityUsageResetPeriod=MONTHLY",
        "PriorityCalcPeriod=10",
    ):
        assert line in block
    # In slurm.conf's order of TRES, whatever the order in cluster.yml.
    assert "PriorityWeightTRES=CPU=-1000,Mem=2000,GRES/gpu=3000" in block


@pytest.mark.parametrize("chosen", [{"type": "basic"}, {}], ids=["named", "left-out"])
def test_basic_names_its_type_and_nothing_else(hal, chosen):
    def edit(data):
        no_policy(data)
        data["slurm"]["priority"] = chosen

    cluster = variant(hal, edit)
    conf = slurm_conf(cluster)
    assert priority_block(conf) == ["PriorityType=priority/basic"]
    assert "first in, first out" in conf


def test_workstation_is_basic():
    assert priority_block(slurm_conf(load(CLUSTERS / "workstation.yml"))) == ["PriorityType=priority/basic"]


def test_priority_is_set_before_accounting(hal):
    """Beside the scheduling settings, ahead of the slurmdbd lines the fair-share usage comes from."""
    lines = slurm_conf(hal).splitlines()
    assert lines.index("PriorityType=priority/multifactor") < lines.index(
        "AccountingStorageType=accounting_storage/slurmdbd"
    )
    assert "AccountingStorageEnforce=associations,limits,qos" in lines


def test_priority_tier_is_rendered_where_the_model_sets_one():
    twogen = load(CLUSTERS / "x86-twogen.yml")
    tiers = {
        line.split()[0]: [f for f in line.split() if f.startswith("PriorityTier=")]
        for line in slurm_conf(twogen).splitlines()
        if line.startswith("PartitionName=")
    }
    assert tiers.pop("PartitionName=h100") == ["PriorityTier=2"]
    assert tiers and all(found == [] for found in tiers.values())  # None: Slurm's default, not written


def test_priority_tier_bounds(hal):
    def tier(value):
        return lambda d: d["slurm"]["partitions"][0].update(priority_tier=value)

    assert " PriorityTier=65533 " in slurm_conf(variant(hal, tier(65533)))
    with pytest.raises(ValueError, match="less than or equal to 65533"):
        variant(hal, tier(65534))
