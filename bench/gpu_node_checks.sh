#!/bin/bash
# What only a real NVIDIA node can show, in one run (a lent GPU machine, or any node of a site).
# Read-only: it never changes MIG mode, clocks, persistence or anything else of the GPU.
#
#   bench/gpu_node_checks.sh [STEPS] [WHEELS]
#
# 0. records: this node's raw outputs in the records layout discovery reads (nvidia-smi -q -x and
#    topo -m, nvlink --status, lscpu, meminfo, /sys/class/infiniband's files), as
#    $OUT/records.tar.gz, so a node seen once can become a fixture (tests/data/hardware/);
# 1. discovery: this node's hardware read live (NVML or nvidia-smi, lscpu, sysfs) as a profile in
#    cluster.yml's shape, its adapters and PCIe links among it, beside the same parsers on the
#    recorded H100 (tests/data/hardware/h100-x1);
# 2. `hal-provision discover` against the workstation example's ws01 (one H100) and the AI lab's
#    gpu01 (8 H100, 8 single-port NDR adapters): the differences it names;
# 3. the health check of the model built from what was discovered: the workstation example with
#    its profile replaced by this node's, rendered (render_all), and its expectation's GPU checks
#    (gpus, gpu_model, gpu_faults, dcgm, and infiniband on the adapters found ACTIVE) run by
#    hal-healthcheck --no-slurm on this node: it must pass. Then three negative controls, each of
#    which must fail naming the cause: one GPU more, a PCIe link twice as wide, an XID the kernel
#    log is read for on a GPU that has none (passes: the control is that the log was readable);
# 4. the ResNet-50 recipe's GPU path (bench/resnet50_gpu.sh, STEPS steps, default 100; 0 skips).
# WHEELS: a directory of wheels for the controller side's dependencies, for a machine without
# them (installed with --target beside the system's packages). Prints figures and PASS/FAIL per
# step; exits non-zero when a step that must pass did not.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
steps=${1:-100}
wheels=${2:-}
out=${OUT:-$(mktemp -d)}  # what comes back: records.tar.gz, live.yml, live.json
work=$(mktemp -d)  # the rest
cd "$repo"
py=python3
if [ -n "$wheels" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/hal-site \
    "$wheels"/*.whl || exit 2
  export PYTHONPATH=/tmp/hal-site:$repo
else
  export PYTHONPATH=$repo
fi
failed=0
echo "== node: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sort | uniq -c)"

echo "== 0. records"
rec=$(mktemp -d)/records
mkdir -p "$rec"
lscpu -J >"$rec/lscpu.json" 2>/dev/null; lscpu -p >"$rec/lscpu-p.txt" 2>/dev/null; lscpu >"$rec/lscpu.txt" 2>/dev/null
head -n 5 /proc/meminfo >"$rec/meminfo-head.txt"
if [ -r /sys/devices/system/memory/block_size_bytes ]; then
  { echo "block_size_bytes $(cat /sys/devices/system/memory/block_size_bytes)"
    echo "online_blocks $(grep -l '^online$' /sys/devices/system/memory/memory*/state 2>/dev/null | wc -l)"; } >"$rec/memory-blocks.txt"
fi
nvidia-smi -q -x >"$rec/nvidia-smi-q.xml"
nvidia-smi topo -m >"$rec/nvidia-smi-topo-m.txt" 2>&1
nvidia-smi nvlink --status >"$rec/nvidia-smi-nvlink-status.txt" 2>&1
nvidia-smi --query-gpu=index,name,pci.bus_id,memory.total,pcie.link.gen.max,pcie.link.width.max --format=csv >"$rec/nvidia-smi-query.csv"
for dev in /sys/class/infiniband/*; do
  [ -e "$dev" ] || continue
  d="$rec/infiniband/$(basename "$dev")"; mkdir -p "$d"
  for f in hca_type board_id sys_image_guid; do [ -r "$dev/$f" ] && cat "$dev/$f" >"$d/$f"; done
  [ -r "$dev/device/numa_node" ] && { mkdir -p "$d/device"; cat "$dev/device/numa_node" >"$d/device/numa_node"; }
  for p in "$dev"/ports/*; do
    mkdir -p "$d/ports/$(basename "$p")"
    for f in state phys_state rate link_layer; do cat "$p/$f" >"$d/ports/$(basename "$p")/$f" 2>/dev/null; done
  done
done
{ echo "# device files"; ls -l /dev/nvidia* 2>&1; echo "# /sys/class/infiniband"; ls -l /sys/class/infiniband 2>&1
  echo "# /sys/class/net"; ls /sys/class/net 2>&1; echo "# kernel log readers"
  for c in journalctl dmesg dcgmi nv-hostengine ibstat; do echo "$c: $(command -v $c || echo absent)"; done
  echo "# uname"; uname -r; echo "# os-release"; cat /etc/os-release 2>&1; } >"$rec/host-misc.txt"
tar -C "$(dirname "$rec")" -czf "$out/records.tar.gz" records
echo "records: $(ls "$rec" | tr '\n' ' ')"
echo "infiniband devices: $(ls /sys/class/infiniband 2>/dev/null | tr '\n' ' ' || true)"
sed -n '/# kernel log readers/,/# uname/p' "$rec/host-misc.txt"

echo "== 1. discovery, live and recorded"
$py -m hal_provision.discovery --json --name live >"$out/live.json"; rc=$?; echo "live rc=$rc"
[ $rc = 0 ] || failed=1
$py -m hal_provision.discovery --name live >"$out/live.yml"; cat "$out/live.yml"
$py -m hal_provision.discovery --json --records "$rec" --name records >"$work/records.json"
echo "the same node from its records: rc=$? (must equal live in GPUs and adapters)"
$py - "$out" "$work" tests/data/hardware/h100-x1 <<'EOF'
import json, subprocess, sys
out, work, h100 = sys.argv[1:]
live = json.load(open(f"{out}/live.json"))
recs = json.load(open(f"{work}/records.json"))
rec = json.loads(subprocess.run([sys.executable, "-m", "hal_provision.discovery", "--json", "--records", h100,
                                 "--name", "recorded"], capture_output=True, text=True, check=True).stdout)
(_, lp), = live["hardware"].items()
(_, sp), = recs["hardware"].items()
(_, rp), = rec["hardware"].items()
print(f"  adapters discovered live: {len(lp['ib_adapters'])}: {json.dumps(lp['ib_adapters'])}")
print(f"  InfiniBand ports live: {json.dumps(live['infiniband_ports'])}")
print(f"  PCIe link live: gen {lp['gpus'].get('pcie_generation')} x{lp['gpus'].get('pcie_width')}")
same = lp["gpus"]["model"] == sp["gpus"]["model"] and lp["ib_adapters"] == sp["ib_adapters"]
print(f"  live vs its own records (GPU model, adapters): {'same' if same else 'DIFFER'}")
for key in sorted(set(lp) | set(rp)):
    mark = "same" if lp.get(key) == rp.get(key) else "DIFFERS"
    print(f"  vs recorded H100: {key:18} {mark:8} live={json.dumps(lp.get(key))[:150]}")
sys.exit(0 if same else 1)
EOF
[ $? = 0 ] || failed=1

echo "== 2. hal-provision discover against the models"
$py -m hal_provision.cli discover tests/data/clusters/workstation.yml --host ws01 2>&1 | tee "$work/discover-ws.txt"
echo "discover ws01 rc=${PIPESTATUS[0]} (1: differences found)"
$py -m hal_provision.cli discover examples/ailab.yml --host gpu01 2>&1 | tee "$work/discover-ailab.txt"
echo "discover gpu01 rc=${PIPESTATUS[0]} (1: differences found)"

echo "== 3. the health check of the model built from this node"
$py - "$out" "$work" <<'EOF'
import json, subprocess, sys
from pathlib import Path
from hal_provision.loader import load
from hal_provision.model import HardwareProfile
from hal_provision.render import render_all

out, work = Path(sys.argv[1]), Path(sys.argv[2])
live = json.loads((out / "live.json").read_text())
(_, found), = live["hardware"].items()
model = load(Path("tests/data/clusters/workstation.yml")).model
found = {k: v for k, v in found.items() if v is not None}  # what discovery cannot read (the chassis model)
profile = HardwareProfile.model_validate({**model.hardware["h100-ws"].model_dump(), **found})
model = model.model_copy(update={"hardware": {**model.hardware, "h100-ws": profile}})
files = render_all(model)
expect = json.loads(files["files/etc/hal-provision/health/ws.json"])
checks = {k: v for k, v in expect["checks"].items() if k in ("gpus", "gpu_model", "gpu_faults", "dcgm")}
active = [p for p in live["infiniband_ports"] if p["state"].endswith("ACTIVE") and p["link_layer"].lower() == "infiniband"]
if active:  # the adapters found ACTIVE, at the rate found: what a fabric link to each would expect
    ports = []
    for p in active:
        dev, _, port = p["port"].rpartition("/")  # mlx5_0/1
        ports.append({"device": dev, "port": int(port), "rate_gbps": int(float(p["rate"].split()[0]))})
    checks["infiniband"] = {"ports": ports, "rate_gbps": min(p["rate_gbps"] for p in ports)}
expect["checks"] = checks
print(f"  rendered checks: {json.dumps(checks)[:900]}")
prog = "hal_provision/node/health/healthcheck.py"

def run(name: str, doc: dict, must_pass: bool, needle: str = "") -> bool:
    path = work / f"expectation-{name}.json"
    path.write_text(json.dumps(doc))
    r = subprocess.run([sys.executable, prog, "--no-slurm", "--expectation", str(path)], capture_output=True, text=True)
    text = (r.stdout + r.stderr).strip()
    ok = (r.returncode == 0) if must_pass else (r.returncode == 1 and needle in text)
    print(f"  {'PASS' if ok else 'FAIL'} {name}: rc={r.returncode}\n    " + text.replace("\n", "\n    ")[:1500])
    return ok

results = [run("as-discovered", expect, True)]
more = json.loads(json.dumps(expect))
more["checks"]["gpu_model"]["count"] += 1
more["checks"]["gpu_faults"]["count"] += 1
results.append(run("one-gpu-more", more, False, "GPUs answer nvidia-smi, expected"))
wide = json.loads(json.dumps(expect))
width = wide["checks"]["gpu_faults"].get("pcie_width")
if width:
    wide["checks"]["gpu_faults"]["pcie_width"] = width * 2
    results.append(run("pcie-twice-as-wide", wide, False, f"expected x{width * 2}"))
else:
    print("  FAIL pcie-twice-as-wide: discovery found no PCIe width")
    results.append(False)
xid = json.loads(json.dumps(expect))
xid["checks"] = {"gpu_faults": {**expect["checks"]["gpu_faults"], "xids": list(range(1, 200))}}
run("every-xid", xid, True)  # told, not counted: the kernel log readable, and which XIDs of any number it has
sys.exit(0 if all(results) else 1)
EOF
[ $? = 0 ] || failed=1

if [ "$steps" -gt 0 ]; then
  echo "== 4. the ResNet-50 recipe's GPU path, $steps steps"
  bash bench/resnet50_gpu.sh tests/golden/hal/files/opt/hal/recipes/resnet50 "$steps" 2>&1 | tee "$work/resnet50.txt" | tail -n 25
fi
echo "== result: $([ $failed = 0 ] && echo 'every step passed' || echo 'a step FAILED')"
exit $failed
