#!/bin/bash
# The ResNet recipe on this machine's CPUs, started by its own job script's CPU branch (rendered
# for nodes like this one), then a plain PyTorch loop with the same ranks, threads, pinning,
# network, image size and batch. Prints both figures and their ratio.
#
#   bench/resnet50_cpu.sh [RANKS] [STEPS] [ARCH] [IMAGE_SIZE] [BATCH_PER_RANK]
#
# Defaults: 2 ranks, 40 timed steps (after 5 untimed), resnet18, 64 px, 32 images per rank:
# about a minute each on two cores. PYTHON: a python3 with torch (default python3); HAL_PYTHON:
# one with hal_provision's requirements, to render the job script (default python3). No
# Slurm: bench/cpu_job_script.py renders the job script from the HAL description with its
# compute nodes' profile replaced by this machine's cores described as RANKS sockets, so the
# CPU branch starts RANKS tasks of cores/RANKS threads, and bench/fake_srun.py stands in for
# srun on this one node (with --cpu-bind=sockets: task i on the i-th slice of the CPUs). The
# recipe's environment file is used as rendered except its Lmod block. The job variables are
# those of a one-node cpun1 job (partition gpu, no GPUs).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
ranks=${1:-2} steps=${2:-40} arch=${3:-resnet18} size=${4:-64} batch=${5:-32}
warm=5
py=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

PYTHONPATH="$repo" "${HAL_PYTHON:-python3}" "$here/cpu_job_script.py" "$work" --sockets "$ranks"
cp "$repo"/hal_provision/node/recipes/{train_resnet50,slurmenv,wiring_probe,hal_stage}.py "$work"/
sed -i "s#^recipe_dir=.*#recipe_dir=$work#" "$work/resnet50.swbatch"
sed -i '/^set +u$/,/^set -u$/d' "$work/recipe.env"
mkdir "$work/bin"
ln -s "$here/fake_srun.py" "$work/bin/srun"
chmod +x "$here/fake_srun.py"
printf '#!/bin/sh\nexec %s "$@"\n' "$(command -v "$py")" > "$work/bin/python3"
chmod +x "$work/bin/python3"

export PATH="$work/bin:$PATH"
unset SLURM_GPUS_ON_NODE CUDA_VISIBLE_DEVICES OMP_NUM_THREADS MKL_NUM_THREADS
export SLURM_JOB_ID=4243 SLURM_JOB_NUM_NODES=1 SLURM_NNODES=1 SLURM_JOB_PARTITION=gpu
export SLURM_CPUS_ON_NODE=$(nproc) SLURM_JOB_NODELIST=$(hostname -s) SLURM_TASKS_PER_NODE=$ranks
getent hosts "$SLURM_JOB_NODELIST" >/dev/null || export MASTER_ADDR=127.0.0.1
echo "== CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; torch $(python3 -c 'import torch; print(torch.__version__)')"

cmd=(bash "$work/resnet50.swbatch" --data synthetic --arch "$arch" --image-size "$size" --batch-per-rank "$batch"
     --epochs 1 --steps-per-epoch "$((steps + warm))" --warmup-steps-timing "$warm" --log-every 1000)
echo "== recipe: ${cmd[*]}"
"${cmd[@]}" | tee "$work/recipe.log"
threads=$(python3 -c 'import json, sys; print(json.loads(open(sys.argv[1]).read().split("RESULT ", 1)[1].splitlines()[0])["threads_per_rank"])' "$work/recipe.log")

ref=(srun --nodes=1 --ntasks="$ranks" --cpu-bind=sockets python3 "$here/resnet50_cpu_reference.py" --arch "$arch"
     --image-size "$size" --batch "$batch" --threads "$threads" --steps "$steps" --warmup "$warm")
echo "== plain loop: ${ref[*]}"
OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads OMP_PROC_BIND=close OMP_PLACES=cores MASTER_ADDR=127.0.0.1 \
    MASTER_PORT=29517 "${ref[@]}" | tee "$work/reference.log"

python3 - "$work/recipe.log" "$work/reference.log" <<'PY'
import json, sys
recipe = json.loads(open(sys.argv[1]).read().split("RESULT ", 1)[1].splitlines()[0])
ref = json.loads(open(sys.argv[2]).read().split("REFERENCE ", 1)[1].splitlines()[0])
r, p = recipe["per_node"], ref["per_node"]
print(f"== recipe {r:.1f} images/s per node ({recipe['ranks']} ranks x {recipe['threads_per_rank']} threads, "
      f"{recipe['arch']} {recipe['image_size']}px, batch {recipe['batch_per_rank']}/rank, {recipe['cpu_name']}, "
      f"torch {recipe['torch']}; params_equal={recipe['params_equal']}, loss {recipe['loss_first']} -> "
      f"{recipe['loss_last']}); plain loop {p:.1f} images/s per node; recipe/plain {r / p:.3f}")
PY
