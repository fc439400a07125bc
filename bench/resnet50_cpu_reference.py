#!/usr/bin/env python3
"""A plain PyTorch CPU training loop, the yardstick for the recipe's images/s on CPUs.

Started one process per rank by bench/fake_srun.py (as the recipe is, with the same pinning:
rank and world from SLURM_PROCID and SLURM_NTASKS) or by torchrun (RANK, WORLD_SIZE), each
with torch.set_num_threads(--threads): DDP over gloo, the same network as the
recipe (train_resnet50.build_network: torchvision's layers, which torchvision itself would
give, were it installable beside this PyTorch), a synthetic batch made once, channels-last,
fp32, SGD with momentum and weight decay, cross-entropy. No learning-rate schedule, no checks,
no logging: what is left when the recipe's extras are taken away. Rank 0 prints one line,
REFERENCE {json}, with the slowest rank's time.

    MASTER_PORT=29517 bench/fake_srun.py --ntasks 2 --cpu-bind=sockets python3 bench/resnet50_cpu_reference.py \\
        --arch resnet18 --image-size 64 --batch 32 --threads 1 --steps 40 --warmup 5
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hal_provision" / "node" / "recipes"))
from train_resnet50 import build_network  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", default="resnet50")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=32, help="images per rank per step")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads per rank")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))
    world = int(os.environ.get("WORLD_SIZE", os.environ.get("SLURM_NTASKS", "1")))
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = build_network(args.arch).to(memory_format=torch.channels_last)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(args.batch, 3, args.image_size, args.image_size, generator=g).contiguous(
        memory_format=torch.channels_last
    )
    y = torch.randint(0, 1000, (args.batch,), generator=g)
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            start = time.perf_counter()
        loss = loss_fn(ddp(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    seconds = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
    dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
    if rank == 0:
        ips = world * args.batch * args.steps / seconds.item()
        print(
            "REFERENCE "
            + json.dumps(
                {
                    "images_per_second": round(ips, 1),
                    "per_node": round(ips, 1),
                    "ranks": world,
                    "threads_per_rank": torch.get_num_threads(),
                    "arch": args.arch,
                    "image_size": args.image_size,
                    "batch_per_rank": args.batch,
                    "steps": args.steps,
                    "seconds": round(seconds.item(), 3),
                    "torch": torch.__version__,
                    "omp": os.environ.get("OMP_NUM_THREADS"),
                },
                sort_keys=True,
            ),
            flush=True,
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
