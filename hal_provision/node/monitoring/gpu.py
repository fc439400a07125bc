"""GPUs: the `gpu` inventory collector, and an emulation of Telegraf's nvidia_smi input.

The collector runs exactly

    nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.total,driver_version,ecc.mode.current --format=csv

and prints one line per GPU with the facts Telegraf's nvidia_smi input does not tag:

    gpu_info,driver_version=580.159.04,index=0,name=NVIDIA\\ H100\\ 80GB\\ HBM3,pci_bus_id=00000000:00:06.0,uuid=GPU-... ecc_enabled=1i,memory_total_mib=81559i

ECC reported as `[N/A]` (a GPU without ECC) counts as not enabled.

nvidia_smi_points() turns `nvidia-smi -q -x` output into what Telegraf's own nvidia_smi input
(its schema for nvsmi_device_v12/v13 XML) writes: measurement nvidia_smi, tags index (the
GPU's position in the report), name, uuid, pstate, compute_mode, arch; integer fields in the
tool's units with the unit stripped (memory_* in MiB, temperature_* in degrees C,
utilization_* in percent, clocks_current_* in MHz), power_* floats in W; values nvidia-smi
reports as N/A are left out, as Telegraf does; one nvidia_smi_process line per process. The
stand-in uses it on nodes where Telegraf cannot be installed, and the `nvidia_smi` collector
prints it where no Telegraf runs at all (the Prometheus backend's textfile runner):

    python3 -m hal_monitoring nvidia_smi [--bin-path nvidia-smi] [--timeout 5]

runs the stand-in's command, `<bin-path> -q -x`, and reads it with the same nvidia_smi_points
(read_nvidia_smi). Telegraf stamps the points with the report's own <timestamp> (whole
seconds); the stand-in and the collector stamp them with the time they ran nvidia-smi, which is
the same moment to within a second and keeps a replayed recording (the sandbox's fake
nvidia-smi) current.
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import time
import xml.etree.ElementTree as ET

from .commands import CollectorError, emit, run_command
from .lineprotocol import Point

QUERY = "index,name,uuid,pci.bus_id,memory.total,driver_version,ecc.mode.current"
COMMAND = ("nvidia-smi", f"--query-gpu={QUERY}", "--format=csv")
XML_COMMAND_ARGS = ("-q", "-x")  # after Telegraf's bin_path
NOT_AVAILABLE = {"", "N/A", "[N/A]", "Requested functionality has been deprecated", "[Not Supported]"}


# ---- the gpu collector ------------------------------------------------------------------------


def _number(text: str) -> str:
    """The number in `81559 MiB`, `71.26 W`, `16x`."""
    words = text.strip().split()
    return words[0].rstrip("x") if words else ""


def parse_query_csv(text: str) -> list[Point]:
    rows = list(csv.reader(io.StringIO(text), skipinitialspace=True))
    rows = [r for r in rows if r]
    if not rows:
        return []
    # "memory.total [MiB]" -> "memory.total": columns by name, whatever their order
    header = [re.sub(r"\s*\[.*\]$", "", h).strip() for h in rows[0]]
    missing = set(QUERY.split(",")) - set(header)
    if missing:
        raise CollectorError(f"nvidia-smi's CSV lacks {', '.join(sorted(missing))} (header {rows[0]!r})")
    points = []
    for row in rows[1:]:
        if len(row) != len(header):
            raise CollectorError(f"nvidia-smi CSV row {row!r} does not match its header")
        values = {h: v.strip() for h, v in zip(header, row)}
        try:
            memory = int(_number(values["memory.total"]))
        except ValueError:
            raise CollectorError(f"memory.total {values['memory.total']!r} is not a number of MiB") from None
        points.append(
            Point(
                "gpu_info",
                {
                    "index": values["index"],
                    "name": values["name"],
                    "uuid": values["uuid"],
                    "pci_bus_id": values["pci.bus_id"],
                    "driver_version": values["driver_version"],
                },
                {"memory_total_mib": memory, "ecc_enabled": int(values["ecc.mode.current"] == "Enabled")},
            )
        )
    return points


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="hal_monitoring gpu",
        description="Print each GPU's inventory facts (nvidia-smi --query-gpu) as InfluxDB line protocol (gpu_info).",
    )
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds nvidia-smi may take (default 5)")
    args = parser.parse_args(argv)
    stamp = time.time_ns()
    emit([p.format(stamp) for p in parse_query_csv(run_command(COMMAND, args.timeout))])
    return 0


# ---- Telegraf's nvidia_smi input, emulated ---------------------------------------------------------

# (field, type, path under <gpu>), in Telegraf's order: a later path that is present replaces an
# earlier one (power_draw: power_readings, then gpu_power_readings; instant over plain).
GPU_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("driver_version", "str", "/driver_version"),
    ("cuda_version", "str", "/cuda_version"),
    ("serial", "str", "serial"),
    ("vbios_version", "str", "vbios_version"),
    ("display_active", "str", "display_active"),
    ("display_mode", "str", "display_mode"),
    ("current_ecc", "str", "ecc_mode/current_ecc"),
    ("fan_speed", "int", "fan_speed"),
    ("memory_total", "int", "fb_memory_usage/total"),
    ("memory_used", "int", "fb_memory_usage/used"),
    ("memory_free", "int", "fb_memory_usage/free"),
    ("memory_reserved", "int", "fb_memory_usage/reserved"),
    ("ecc_errors_volatile_dram_correctable", "int", "ecc_errors/volatile/dram_correctable"),
    ("ecc_errors_volatile_dram_uncorrectable", "int", "ecc_errors/volatile/dram_uncorrectable"),
    ("ecc_errors_volatile_sram_correctable", "int", "ecc_errors/volatile/sram_correctable"),
    ("ecc_errors_volatile_sram_uncorrectable", "int", "ecc_errors/volatile/sram_uncorrectable"),
    ("ecc_errors_aggregate_dram_correctable", "int", "ecc_errors/aggregate/dram_correctable"),
    ("ecc_errors_aggregate_dram_uncorrectable", "int", "ecc_errors/aggregate/dram_uncorrectable"),
    ("retired_pages_multiple_single_bit", "int", "retired_pages/multiple_single_bit_retirement/retired_count"),
    ("retired_pages_double_bit", "int", "retired_pages/double_bit_retirement/retired_count"),
    ("remapped_rows_correctable", "int", "remapped_rows/remapped_row_corr"),
    ("remapped_rows_uncorrectable", "int", "remapped_rows/remapped_row_unc"),
    ("remapped_rows_pending", "str", "remapped_rows/remapped_row_pending"),
    ("remapped_rows_failure", "str", "remapped_rows/remapped_row_failure"),
    ("temperature_gpu", "int", "temperature/gpu_temp"),
    ("temperature_memory", "int", "temperature/memory_temp"),
    ("utilization_gpu", "int", "utilization/gpu_util"),
    ("utilization_memory", "int", "utilization/memory_util"),
    ("utilization_encoder", "int", "utilization/encoder_util"),
    ("utilization_decoder", "int", "utilization/decoder_util"),
    ("utilization_jpeg", "int", "utilization/jpeg_util"),
    ("utilization_ofa", "int", "utilization/ofa_util"),
    ("pcie_link_gen_current", "int", "pci/pci_gpu_link_info/pcie_gen/current_link_gen"),
    ("pcie_link_width_current", "int", "pci/pci_gpu_link_info/link_widths/current_link_width"),
    ("pcie_rx_util", "int", "pci/rx_util"),
    ("pcie_tx_util", "int", "pci/tx_util"),
    ("encoder_stats_session_count", "int", "encoder_stats/session_count"),
    ("encoder_stats_average_fps", "int", "encoder_stats/average_fps"),
    ("encoder_stats_average_latency", "int", "encoder_stats/average_latency"),
    ("fbc_stats_session_count", "int", "fbc_stats/session_count"),
    ("fbc_stats_average_fps", "int", "fbc_stats/average_fps"),
    ("fbc_stats_average_latency", "int", "fbc_stats/average_latency"),
    ("clocks_current_graphics", "int", "clocks/graphics_clock"),
    ("clocks_current_sm", "int", "clocks/sm_clock"),
    ("clocks_current_memory", "int", "clocks/mem_clock"),
    ("clocks_current_video", "int", "clocks/video_clock"),
    ("power_draw", "float", "power_readings/power_draw"),
    ("power_draw", "float", "power_readings/instant_power_draw"),
    ("power_limit", "float", "power_readings/power_limit"),
    ("power_draw_average", "float", "power_readings/average_power_draw"),
    ("power_draw", "float", "gpu_power_readings/power_draw"),
    ("power_draw", "float", "gpu_power_readings/instant_power_draw"),
    ("power_limit", "float", "gpu_power_readings/current_power_limit"),
    ("power_limit", "float", "gpu_power_readings/power_limit"),
    ("power_draw_average", "float", "gpu_power_readings/average_power_draw"),
    ("power_limit_default", "float", "gpu_power_readings/default_power_limit"),
    ("power_limit_min", "float", "gpu_power_readings/min_power_limit"),
    ("power_limit_max", "float", "gpu_power_readings/max_power_limit"),
    ("module_power_draw", "float", "module_power_readings/power_draw"),
    ("module_power_draw", "float", "module_power_readings/instant_power_draw"),
)
GPU_TAGS = (
    ("pstate", "performance_state"),
    ("name", "product_name"),
    ("arch", "product_architecture"),
    ("uuid", "uuid"),
    ("compute_mode", "compute_mode"),
)


def _text(node: ET.Element | None) -> str:
    return (node.text or "").strip() if node is not None else ""


def _typed(kind: str, text: str) -> int | float | str | None:
    if text in NOT_AVAILABLE:
        return None
    if kind == "str":
        return text
    try:
        return float(_number(text)) if kind == "float" else int(_number(text))
    except ValueError:
        return None


def nvidia_smi_points(xml_text: str) -> list[Point]:
    """Telegraf's nvidia_smi metrics from `nvidia-smi -q -x` output."""
    try:
        root = ET.fromstring(xml_text)
    except ET.ParseError as exc:
        raise CollectorError(f"nvidia-smi -q -x: not XML ({exc})") from None
    points = []
    for index, gpu in enumerate(root.findall("gpu")):
        tags = {"index": str(index)}
        tags.update({tag: _text(gpu.find(path)) for tag, path in GPU_TAGS if _text(gpu.find(path))})
        fields: dict[str, int | float | str] = {}
        for name, kind, path in GPU_FIELDS:
            node = root.find(path[1:]) if path.startswith("/") else gpu.find(path)
            value = _typed(kind, _text(node))
            if value is not None:
                fields[name] = value
        if fields:
            points.append(Point("nvidia_smi", tags, fields))
        for process in gpu.findall("processes/process_info"):
            ptags = {
                k: _text(process.find(p))
                for k, p in (("name", "process_name"), ("type", "type"))
                if _text(process.find(p))
            }
            pfields = {
                k: v
                for k, p in (("pid", "pid"), ("used_memory", "used_memory"))
                if (v := _typed("int", _text(process.find(p)))) is not None
            }
            if pfields:
                points.append(Point("nvidia_smi_process", ptags, pfields))
    return points


def read_nvidia_smi(bin_path: str, timeout: float) -> list[Point]:
    """Run `<bin_path> -q -x` and read it as Telegraf's nvidia_smi input would."""
    return nvidia_smi_points(run_command([bin_path, *XML_COMMAND_ARGS], timeout))


def nvidia_smi_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="hal_monitoring nvidia_smi",
        description="Print what Telegraf's nvidia_smi input writes (nvidia-smi -q -x) as InfluxDB line protocol "
        "(nvidia_smi, nvidia_smi_process).",
    )
    parser.add_argument("--bin-path", default="nvidia-smi", help="the nvidia-smi to run (default: the one on PATH)")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds nvidia-smi may take (default 5)")
    args = parser.parse_args(argv)
    stamp = time.time_ns()
    emit([p.format(stamp) for p in read_nvidia_smi(args.bin_path, args.timeout)])
    return 0
