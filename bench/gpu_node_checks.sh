#!/bin/bash
# What only a real NVIDIA node can show, in one run (a lent GPU machine, or any node of a site):
#
#   bench/gpu_node_checks.sh [STEPS] [WHEELS]
#
# 1. discovery: this node's hardware read live (nvidia-smi, NVML, lscpu, hwloc) as a profile in
#    cluster.yml's shape, beside the same parsers on the recorded H100 node (tests/data/hardware/
#    h100-x1); their GPU parts compared;
# 2. `hal-provision discover` against x86-twogen's H100 profile (8 GPUs): the differences it names;
# 3. the health check of the model built from what was discovered: x86-twogen with its H100
#    profile replaced by this node's, rendered (render_all), and the H100 group's expectation's
#    GPU checks (gpus, gpu_model) run by hal-healthcheck --no-slurm on this node; then the same
#    expectation asking for one GPU more, which must fail;
# 4. the ResNet-50 recipe's GPU path (bench/resnet50_gpu.sh, STEPS steps, default 100).
# WHEELS: a directory of wheels for the controller side's dependencies, for a machine without
# them (installed into a virtual environment that sees the system's PyTorch). Prints figures;
# writes its outputs under $OUT when set. Asserts nothing beyond what each step prints.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
steps=${1:-100}
wheels=${2:-}
out=${OUT:-$(mktemp -d)}
cd "$repo"
py=python3
if [ -n "$wheels" ]; then
  python3 -m venv --system-site-packages /tmp/hal-venv \
    && /tmp/hal-venv/bin/pip install -q --no-index --find-links "$wheels" pydantic 'ruamel.yaml' PyYAML ClusterShell \
         typer rich ldap3 cryptography graphviz nvidia-ml-py 'grafana-foundation-sdk==1769699998!10.1.0' \
    && py=/tmp/hal-venv/bin/python
fi
export PYTHONPATH=$repo
echo "== node: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sort | uniq -c)"

echo "== 1. discovery, live and recorded"
$py -m hal_provision.discovery --json --name live >"$out/live.json"; echo "live rc=$?"
$py -m hal_provision.discovery --name live >"$out/live.yml"; cat "$out/live.yml"
$py -m hal_provision.discovery --json --records tests/data/hardware/h100-x1 --name recorded >"$out/recorded.json"
echo "recorded rc=$?"
$py - "$out" <<'EOF'
import json, sys
out = sys.argv[1]
live, rec = (json.load(open(f"{out}/{n}.json")) for n in ("live", "recorded"))
(lname, lp), = live.items() if "hardware" not in live else live["hardware"].items()
(rname, rp), = rec.items() if "hardware" not in rec else rec["hardware"].items()
for key in sorted(set(lp) | set(rp)):
    same = "same" if lp.get(key) == rp.get(key) else "DIFFERS"
    print(f"  {key:18} {same:8} live={json.dumps(lp.get(key))[:150]}")
    if same == "DIFFERS":
        print(f"  {'':18} {'':8} rec ={json.dumps(rp.get(key))[:150]}")
EOF

echo "== 2. hal-provision discover against x86-twogen's H100 nodes"
$py -m hal_provision.cli discover tests/data/clusters/x86-twogen.yml --host tg05 | tee "$out/discover-twogen.txt"
echo "discover rc=${PIPESTATUS[0]} (1: differences found)"

echo "== 3. the health check of the model built from this node"
$py - "$out" <<'EOF'
import json, subprocess, sys
from pathlib import Path
from hal_provision.loader import load
from hal_provision.model import HardwareProfile
from hal_provision.render import render_all

out = Path(sys.argv[1])
live = json.loads((out / "live.json").read_text())
(_, found), = (live["hardware"] if "hardware" in live else live).items()
model = load(Path("tests/data/clusters/x86-twogen.yml")).model
hardware = dict(model.hardware)
found = {k: v for k, v in found.items() if v is not None}  # what discovery cannot read (the chassis model)
hardware["hgx-h100"] = HardwareProfile.model_validate({**model.hardware["hgx-h100"].model_dump(), **found})
model = model.model_copy(update={"hardware": hardware})
files = render_all(model)
group = next(g.name for g in model.nodes if g.hardware == "hgx-h100")
path = next(p for p in files if p.endswith(f"/health/{group}.json") or p.endswith(f"/health/hosts/tg05.json"))
expect = json.loads(files[path])
expect["checks"] = {k: v for k, v in expect["checks"].items() if k in ("gpus", "gpu_model")}
print(f"  rendered {path}: GPU checks {json.dumps(expect['checks'])[:300]}")
(out / "expectation.json").write_text(json.dumps(expect))
prog = "hal_provision/node/health/healthcheck.py"
run = subprocess.run([sys.executable, prog, "--no-slurm", "--expectation", str(out / "expectation.json")],
                     capture_output=True, text=True)
print(f"  healthcheck rc={run.returncode}: {(run.stdout + run.stderr).strip()[:600]}")
more = json.loads(json.dumps(expect))
gpus = more["checks"].get("gpus", {})
if "files" in gpus:
    n = len(gpus["files"])
    gpus["files"] = gpus["files"] + [f"/dev/nvidia{n}"]
if "count" in more["checks"].get("gpu_model", {}):
    more["checks"]["gpu_model"]["count"] += 1
(out / "expectation-plus-one.json").write_text(json.dumps(more))
run = subprocess.run([sys.executable, prog, "--no-slurm", "--expectation", str(out / "expectation-plus-one.json")],
                     capture_output=True, text=True)
print(f"  healthcheck, one GPU more expected: rc={run.returncode}: {(run.stdout + run.stderr).strip()[:600]}")
EOF

echo "== 4. the ResNet-50 recipe's GPU path, $steps steps"
bash bench/resnet50_gpu.sh tests/golden/hal/files/opt/hal/recipes/resnet50 "$steps" 2>&1 | tee "$out/resnet50.txt" | tail -n 25
