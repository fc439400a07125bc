"""Line protocol to Prometheus' text format (hal_provision/node/monitoring/openmetrics.py).

Each naming and value rule has its table; then every collector's output, from the recorded
and documented command output test_collectors.py parses, goes through the conversion and back:
read by the Prometheus Python client's own parser, every number of every line must come back
under its derived name and labels, and Debian's promtool must find no format error.
"""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from hal_provision.node.monitoring import lineprotocol as lp
from hal_provision.node.monitoring import openmetrics as om
from tests.unit.node.test_collectors import _collector_output

PROMTOOL = Path("/usr/bin/promtool")
needs_promtool = pytest.mark.skipif(
    not PROMTOOL.exists(), reason="promtool is not installed (Debian package prometheus; ./bootstrap.sh installs it)"
)
# promtool check metrics exits 1 on a format error and 3 on lint problems alone. The names the
# contract fixes trip three of its lints (gpus_total is a gauge, not a counter; session_count
# is no histogram; age_s, list_home_ms abbreviate units); any other problem is a defect.
ACCEPTED_LINTS = (
    'non-counter metrics should not have "_total" suffix',
    'non-histogram and non-summary metrics should not have "_count" suffix',
    "metric names should not contain abbreviated units",
)
COLLECTORS = ("slurm", "bmc", "gpu", "nvidia_smi", "storage_responsiveness", "backup", "health", "pull")


def promtool_problems(text: str) -> list[str]:
    """promtool's lint lines for an exposition; fails the test on a format error or on a
    problem other than the accepted lints."""
    done = subprocess.run([str(PROMTOOL), "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    problems = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert done.returncode in (0, 3), f"promtool exit {done.returncode}: {problems}"
    assert (done.returncode == 3) == bool(problems), (done.returncode, problems)
    unexpected = [p for p in problems if not p.endswith(ACCEPTED_LINTS)]
    assert not unexpected, unexpected
    return problems


def parsed(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(name, sorted labels) -> value, read by the Prometheus client's parser; no series twice."""
    out = {}
    for family in text_string_to_metric_families(text):
        assert family.type == "gauge"
        for s in family.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in out, f"{key} twice"
            assert s.timestamp is None
            out[key] = s.value
    return out


# ---- names ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "measurement,field,name",
    [
        ("slurm_node", "up", "hal_slurm_node_up"),
        ("nvidia_smi", "utilization_gpu", "hal_nvidia_smi_utilization_gpu"),
        ("hal_backup", "age_s", "hal_backup_age_s"),
        ("storage_responsiveness", "list_home_ms", "hal_storage_responsiveness_list_home_ms"),
        ("gpu_info", "memory_total_mib", "hal_gpu_info_memory_total_mib"),
        ("bmc", "value", "hal_bmc_value"),
        ("halo", "x", "hal_halo_x"),  # `hal_` is a prefix, not any start
        ("disk.io", "read-bytes/s", "hal_disk_io_read_bytes_s"),
        ("mém", "naïve", "hal_m_m_na_ve"),
    ],
)
def test_metric_name(measurement, field, name):
    assert om.metric_name(measurement, field) == name


@pytest.mark.parametrize(
    "tag,label",
    [
        ("node", "node"),
        ("job", "job_name"),  # Prometheus' target label
        ("instance", "instance_name"),
        ("host", None),  # the scrape adds its own
        ("job_id", "job_id"),
        ("pci-bus.id", "pci_bus_id"),
        ("0index", "_0index"),  # a label name cannot start with a digit
        ("__name__", "_name__"),  # nor with __, which Prometheus reserves
    ],
)
def test_label_name(tag, label):
    assert om.label_name(tag) == label


@pytest.mark.parametrize(
    "value,sample",
    [(12, 12), (-3, -3), (0.5, 0.5), (True, 1), (False, 0), ("text", None), (math.nan, None), (math.inf, None)],
)
def test_sample_value(value, sample):
    got = om.sample_value(value)
    assert got == sample and type(got) is type(sample)


def test_a_point_becomes_labelled_gauges_without_timestamps():
    [line] = lp.parse_lines(
        'slurm_job,host=ctl,job=train,instance=3,job_id=42,user=al\\ ice gpus=4i,load=0.25,ok=true,name="x y" 1700000000000000000'
    )
    assert om.convert([line], "slurm") == (
        "# HELP hal_slurm_job_gpus slurm_job gpus, from hal-collect slurm\n"
        "# TYPE hal_slurm_job_gpus gauge\n"
        'hal_slurm_job_gpus{instance_name="3",job_id="42",job_name="train",user="al ice"} 4\n'
        "# HELP hal_slurm_job_load slurm_job load, from hal-collect slurm\n"
        "# TYPE hal_slurm_job_load gauge\n"
        'hal_slurm_job_load{instance_name="3",job_id="42",job_name="train",user="al ice"} 0.25\n'
        "# HELP hal_slurm_job_ok slurm_job ok, from hal-collect slurm\n"
        "# TYPE hal_slurm_job_ok gauge\n"
        'hal_slurm_job_ok{instance_name="3",job_id="42",job_name="train",user="al ice"} 1\n'
    )


def test_label_values_are_escaped_and_read_back():
    value = 'a "quoted" back\\slash\nand a newline'
    point = lp.Point("bmc", {"sensor": value, "unit": ""}, {"value": 1.5})
    text = om.convert([point], "bmc")
    assert 'sensor="a \\"quoted\\" back\\\\slash\\nand a newline"' in text
    assert "unit=" not in text  # an empty label is no label
    assert parsed(text) == {("hal_bmc_value", (("sensor", value),)): 1.5}


def test_help_is_escaped():
    text = om.exposition([om.Sample("hal_x", (), 1, "back\\slash\nnewline")])
    assert text.splitlines()[0] == "# HELP hal_x back\\\\slash\\nnewline"


def test_samples_are_grouped_under_one_help_and_type_in_a_fixed_order():
    points = [
        lp.Point("slurm_node", {"node": "n2"}, {"up": 1, "down": 0}),
        lp.Point("bmc", {"sensor": "b"}, {"value": 2.0}),
        lp.Point("slurm_node", {"node": "n1"}, {"up": 0, "down": 1}),
        lp.Point("bmc", {"sensor": "a"}, {"value": 1.0}),
    ]
    text = om.convert(points, "c")
    assert om.convert(list(reversed(points)), "c") == text
    lines = text.splitlines()
    assert [line.split()[2] for line in lines if line.startswith("# TYPE")] == [
        "hal_bmc_value",
        "hal_slurm_node_down",
        "hal_slurm_node_up",
    ]
    assert [line for line in lines if not line.startswith("#")] == [
        'hal_bmc_value{sensor="a"} 1.0',
        'hal_bmc_value{sensor="b"} 2.0',
        'hal_slurm_node_down{node="n1"} 1',
        'hal_slurm_node_down{node="n2"} 0',
        'hal_slurm_node_up{node="n1"} 0',
        'hal_slurm_node_up{node="n2"} 1',
    ]
    assert sum(line.startswith("# HELP") for line in lines) == 3


def test_a_series_given_twice_keeps_the_later_value():
    """As InfluxDB keeps the later of two writes to one series at one time."""
    points = [lp.Point("m", {"a": "1", "host": "x"}, {"v": 1}), lp.Point("m", {"a": "1", "host": "y"}, {"v": 2})]
    assert parsed(om.convert(points, "c")) == {("hal_m_v", (("a", "1"),)): 2}


def test_text_only_points_write_nothing():
    assert om.convert([lp.Point("storage_responsiveness", {"path": "/home"}, {"error": "gone"})], "s") == ""


# ---- every collector's output, through the conversion and back ---------------------------------


@pytest.mark.parametrize("collector", COLLECTORS)
def test_collector_output_round_trip(collector, tmp_path):
    lines = _collector_output(collector, tmp_path)
    assert lines, f"{collector}: no output from the fixtures"
    text = om.convert(lines, collector)
    got = parsed(text)
    expected = {}
    for line in lines:
        labels = tuple(sorted((om.label_name(k), v) for k, v in line.tags.items() if k != "host"))
        for field, value in line.fields().items():
            number = om.sample_value(value)
            if number is not None:
                expected[(om.metric_name(line.measurement, field), labels)] = number
    assert got == expected
    for family in text_string_to_metric_families(text):
        measurement_field = family.documentation.removesuffix(f", from hal-collect {collector}")
        measurement, field = measurement_field.split(" ")
        assert om.metric_name(measurement, field) == family.name


@needs_promtool
@pytest.mark.parametrize("collector", COLLECTORS)
def test_collector_output_passes_promtool(collector, tmp_path):
    text = om.convert(_collector_output(collector, tmp_path), collector)
    problems = promtool_problems(text)
    names = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")}
    assert {p.split()[0] for p in problems} <= names


@needs_promtool
def test_promtool_finds_format_errors_and_lints():
    """What promtool_problems relies on: exit 1 for a format error, 3 for lints alone."""
    assert promtool_problems("# HELP hal_a_up a up\n# TYPE hal_a_up gauge\nhal_a_up 1\n") == []
    broken = subprocess.run([str(PROMTOOL), "check", "metrics"], input="hal a 1\n", capture_output=True, text=True)
    assert broken.returncode == 1
    lint = subprocess.run([str(PROMTOOL), "check", "metrics"], input="hal_a 1\n", capture_output=True, text=True)
    assert lint.returncode == 3 and "no help text" in lint.stdout + lint.stderr
