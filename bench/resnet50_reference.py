#!/usr/bin/env python3
"""A plain torchvision ResNet-50 training loop, the yardstick for the recipe's images/s.

Synthetic data, DDP over NCCL with world size 1 (env://, this host), fp16 autocast with a
gradient scaler, channels-last, SGD: the loop the issue's reference figure (about 4,150
images/s on one H100) was measured with. Prints one line: REFERENCE {json}.

    python3 bench/resnet50_reference.py [--batch 256] [--steps 200] [--warmup 20]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torchvision


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    args = parser.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("nccl", init_method="env://", rank=0, world_size=1)
    torch.cuda.set_device(0)
    torch.backends.cudnn.benchmark = True
    model = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0])
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    scaler = torch.amp.GradScaler("cuda")
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.randn(args.batch, 3, 224, 224, device="cuda").contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (args.batch,), device="cuda")
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            torch.cuda.synchronize()
            start = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(ddp(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    print(
        "REFERENCE "
        + json.dumps(
            {
                "images_per_second": round(args.batch * args.steps / seconds, 1),
                "steps": args.steps,
                "seconds": round(seconds, 3),
                "torch": torch.__version__,
                "gpu_name": torch.cuda.get_device_name(0),
            }
        ),
        flush=True,
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
