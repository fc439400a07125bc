"""HAL's monitoring collectors, and a stand-in for Telegraf where Telegraf cannot be installed.

Standard library only (Python 3.11), relative imports only: the telegraf role copies this
directory's *.py files onto every node as the package `hal_monitoring` (below
/usr/local/lib/hal-monitoring), where neither hal-provision nor pydantic is installed, and
Telegraf's `[[inputs.exec]]` runs them through `/usr/local/bin/hal-collect <collector>`:

    PYTHONPATH=/usr/local/lib/hal-monitoring python3 -m hal_monitoring <collector> [options]

In this repository the same package runs as `python -m hal_provision.node.monitoring <collector>`.

Collectors (each prints InfluxDB line protocol on stdout and exits 0, or prints one line on
stderr and exits 1; the names they write are INPUTS in hal_provision/model/monitoring.py):

- slurm: slurm_jobs, slurm_job, slurm_node from squeue and scontrol, slurm_daemons (slurmctld,
  and with --slurmdbd slurmdbd through sacctmgr) (slurmctld host only)
- bmc: bmc from `ipmitool sdr elist full`
- gpu: gpu_info from `nvidia-smi --query-gpu=... --format=csv`
- nvidia_smi: nvidia_smi, nvidia_smi_process from `nvidia-smi -q -x`, as Telegraf's own input
  writes them (gpu.py), for the Prometheus backend, where no Telegraf runs
- storage_responsiveness: how long listing the home directories and a stat take (probe.py)
- health: hal_healthcheck, hal_healthcheck_run from the node health check's last result
  (healthstate.py)
- pull: hal_converge from a pull node's last converge record (pullstate.py)

and two runners. `standin` reads the rendered telegraf.conf and does Telegraf's job where
Telegraf cannot be installed: runs the exec inputs, emulates the built-in inputs cpu, mem,
system, disk, net, processes (host.py) and nvidia_smi (gpu.py), and writes to InfluxDB
(standin.py). `textfile` is the Prometheus backend's: it runs the collectors a JSON file names
for this host every interval and writes their output, converted to Prometheus' text format
(openmetrics.py: the naming rules both sides share), as `hal_<collector>.prom` files into the
node exporter's textfile directory (textfile.py).
"""
