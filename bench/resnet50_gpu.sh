#!/bin/bash
# The ResNet-50 recipe on this machine's GPUs, started by its own rendered job script, then a
# plain torchvision DDP loop on the same GPU for comparison. Prints both figures and their ratio.
#
#   bench/resnet50_gpu.sh RECIPE_DIR [STEPS]
#
# RECIPE_DIR: a rendered /opt/hal/recipes/resnet50 (resnet50.swbatch and recipe.env), e.g.
# .hal-sandbox/rendered/files/opt/hal/recipes/resnet50 or the HAL goldens under tests/golden.
# Needs python3 with torch and torchvision, and NVIDIA GPUs; no Slurm: bench/fake_srun.py
# stands in for srun on this one node and sets the variables slurmstepd would. The recipe's
# environment file is used as rendered except its Lmod block (this machine has no module
# tree; its python3 holds PyTorch). The job variables are those of a one-node job given every
# GPU of the machine (swbatch -p gpuxN with N = the GPU count).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
rendered=${1:?"usage: bench/resnet50_gpu.sh RECIPE_DIR [STEPS]"}
steps=${2:-200}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cp "$repo"/hal_provision/node/recipes/{train_resnet50,slurmenv,wiring_probe,hal_stage}.py "$work"/
sed "s#^recipe_dir=.*#recipe_dir=$work#" "$rendered/resnet50.swbatch" > "$work/resnet50.swbatch"
sed '/^set +u$/,/^set -u$/d' "$rendered/recipe.env" > "$work/recipe.env"
mkdir "$work/bin"
ln -s "$here/fake_srun.py" "$work/bin/srun"
chmod +x "$here/fake_srun.py"

gpus=$(nvidia-smi -L | grep -c '^GPU ')
export PATH="$work/bin:$PATH"
export SLURM_JOB_ID=4242 SLURM_JOB_NUM_NODES=1 SLURM_NNODES=1 SLURM_GPUS_ON_NODE=$gpus
export SLURM_CPUS_ON_NODE=$(nproc) SLURM_JOB_NODELIST=$(hostname -s) SLURM_TASKS_PER_NODE=$gpus
export SLURM_JOB_GPUS=$(seq -s, 0 $((gpus - 1)))
getent hosts "$SLURM_JOB_NODELIST" >/dev/null || export MASTER_ADDR=127.0.0.1
echo "== $gpus GPU(s): $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | sort | uniq -c)"
echo "== recipe environment (rendered, Lmod block left out):"; grep '^export' "$work/recipe.env"

echo "== wiring probe: bash resnet50.swbatch --wiring-probe"
bash "$work/resnet50.swbatch" --wiring-probe || echo "== wiring probe failed (see above); the recipe runs anyway"

cmd=(bash "$work/resnet50.swbatch" --data synthetic --epochs 1 --steps-per-epoch "$((steps + 20))"
     --warmup-steps-timing 20 --log-every 100)
echo "== recipe: ${cmd[*]}"
"${cmd[@]}" | tee "$work/recipe.log"
echo "== reference: python3 bench/resnet50_reference.py --batch 256 --steps $steps --warmup 20"
python3 "$here/resnet50_reference.py" --batch 256 --steps "$steps" --warmup 20 | tee "$work/reference.log"

python3 - "$work/recipe.log" "$work/reference.log" <<'PY'
import json, sys
recipe = json.loads(open(sys.argv[1]).read().split("RESULT ", 1)[1].splitlines()[0])
ref = json.loads(open(sys.argv[2]).read().split("REFERENCE ", 1)[1].splitlines()[0])
r, p = recipe["images_per_second"], ref["images_per_second"]
print(f"== recipe {r:.1f} images/s ({recipe['gpus']} GPU, {recipe['gpu_name']}, torch {recipe['torch']}); "
      f"plain loop {p:.1f} images/s; recipe/plain {r / p:.3f}")
PY
