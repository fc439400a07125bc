"""ResNet-50 with PyTorch DistributedDataParallel on every GPU of a Slurm job (HAL, PEARC '20).

The recipe HAL's paper measured scaling with: torchvision's ResNet-50, a per-GPU batch of 256,
mixed precision (fp16 autocast with a gradient scaler, channels-last tensors), SGD with
momentum 0.9 and weight decay 1e-4, the learning rate scaled linearly with the global batch
(0.1 per 256 images) after a linear warm-up (Goyal et al., "Accurate, Large Minibatch SGD",
2017), then divided by 10 at epochs 30, 60 and 80 (or a cosine decay).

One process per GPU, started by the job script's srun (one task per GPU per node). Each takes
its rank, world and rendezvous from Slurm's environment through slurmenv.py, the same values
wiring_probe.py checks, and hands them to torch.distributed's env:// initialisation.

    train_resnet50.py --data synthetic --epochs 1 --steps-per-epoch 100   (the benchmark)
    train_resnet50.py --data /datasets/imagenet --checkpoint-dir ~/ckpt --resume
    train_resnet50.py --data ~/datasets/imagenet-mini --stage      (copied to local scratch first)

`--data synthetic` makes one batch of random images and fixed labels on each GPU once and
trains on it every step, so the figure measures the GPUs and NCCL, not the file system or
JPEG decoding. A path is an ImageFolder tree (PATH/train when it exists), sharded across ranks
with a DistributedSampler. With --stage every task first calls hal_stage.stage() on it: on
each node one task copies the tree to the job's local scratch (default $TMPDIR/hal-stage/NAME,
or --stage-dest), the node's other tasks wait for that copy, and all read from there.

Throughput: the first --warmup-steps-timing steps (cuDNN autotuning, NCCL setup) are not
timed; the rest are, between torch.cuda.synchronize() calls, checkpoint writes excluded. The
slowest rank's time counts. Rank 0 ends with exactly one line

    RESULT {"batch_per_gpu": 256, "gpu_name": ..., "gpus": 8, "images_per_second": ...,
            "nodes": 2, "per_gpu": ..., "precision": "amp", "seconds": ..., "steps": ...,
            "torch": "2.5.1"}

which scaling.py reads. images_per_second = gpus * batch_per_gpu * steps / seconds. With
--stage it also has stage_seconds (the slowest node's copy), stage_bytes and stage_files (one
node's copy: every node copies the same tree).

PyTorch and torchvision are imported only inside the functions that train, so that the
options and the learning-rate schedule can be read and tested where PyTorch is not installed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

try:
    from . import hal_stage, slurmenv
except ImportError:  # run as a script beside slurmenv.py and hal_stage.py (the recipes role's layout)
    import hal_stage
    import slurmenv

REFERENCE_BATCH = 256  # the batch the base learning rate is given for (Goyal et al.)
BATCH_VAR = "HAL_RECIPE_BATCH_PER_GPU"  # set by the rendered recipe.env (recipes.batch_per_gpu)
STEP_MILESTONES = (30, 60, 80)
CHECKPOINT_NAME = "checkpoint.pt"
IMAGE_SIZE = 224
CLASSES = 1000


# ---- options and schedule (no PyTorch) ------------------------------------------------------

def parse_args(argv: list[str] | None = None, environ=None) -> argparse.Namespace:
    """The recipe's options. The per-GPU batch defaults to $HAL_RECIPE_BATCH_PER_GPU, else 256."""
    environ = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(
        prog="train_resnet50.py",
        description="ResNet-50 with PyTorch DistributedDataParallel, one process per GPU of the Slurm step.")
    parser.add_argument("--data", default="synthetic",
                        help="'synthetic' (random batch made on the GPU once: the benchmark) or an ImageFolder path")
    parser.add_argument("--epochs", type=int, default=90, help="epochs to train (default 90)")
    parser.add_argument("--steps-per-epoch", type=int, default=None,
                        help="steps per epoch (synthetic: default 100; a data set: at most this many)")
    parser.add_argument("--batch-per-gpu", type=int, default=_env_int(environ, BATCH_VAR, 256),
                        help=f"images per GPU per step (default ${BATCH_VAR}, else 256)")
    parser.add_argument("--base-lr", type=float, default=0.1,
                        help=f"learning rate for {REFERENCE_BATCH} images, scaled linearly by the global batch")
    parser.add_argument("--warmup-epochs", type=float, default=5.0, help="linear warm-up epochs (default 5)")
    parser.add_argument("--schedule", choices=("step", "cosine"), default="step",
                        help="after warm-up: /10 at epochs 30, 60, 80 (step) or cosine decay to 0")
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--weight-decay", type=float, default=1e-4)
    parser.add_argument("--no-bn-weight-decay", action="store_true",
                        help="no weight decay on batch-norm weights and biases")
    parser.add_argument("--label-smoothing", type=float, default=0.0)
    parser.add_argument("--precision", choices=("amp", "fp32"), default="amp",
                        help="amp: fp16 autocast and a gradient scaler (default); fp32")
    parser.add_argument("--stage", action="store_true",
                        help="copy --data to this node's local scratch once (hal-stage) and train from there")
    parser.add_argument("--stage-dest", default=None,
                        help="where --stage copies to (default: $TMPDIR or /tmp, then /hal-stage/<data's name>)")
    parser.add_argument("--workers", type=int, default=8, help="data loader processes per GPU (data sets only)")
    parser.add_argument("--warmup-steps-timing", type=int, default=10,
                        help="first steps left out of the throughput figure (default 10)")
    parser.add_argument("--log-every", type=int, default=50, help="rank 0 logs every N steps (default 50)")
    parser.add_argument("--checkpoint-dir", default=None,
                        help=f"rank 0 writes DIR/{CHECKPOINT_NAME} after every epoch")
    parser.add_argument("--resume", action="store_true",
                        help=f"continue from --checkpoint-dir/{CHECKPOINT_NAME} when it exists (a requeued job)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    for name in ("epochs", "batch_per_gpu", "log_every"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.steps_per_epoch is not None and args.steps_per_epoch < 1:
        parser.error("--steps-per-epoch must be at least 1")
    if args.warmup_steps_timing < 0 or args.warmup_epochs < 0 or args.workers < 0:
        parser.error("--warmup-steps-timing, --warmup-epochs and --workers cannot be negative")
    if not 0.0 <= args.label_smoothing < 1.0:
        parser.error("--label-smoothing must be in [0, 1)")
    if args.resume and not args.checkpoint_dir:
        parser.error("--resume needs --checkpoint-dir")
    if (args.stage or args.stage_dest) and args.data == "synthetic":
        parser.error("--stage copies a data set: give --data PATH")
    if args.stage_dest and not args.stage:
        parser.error("--stage-dest needs --stage")
    if args.data == "synthetic":
        args.steps_per_epoch = args.steps_per_epoch or 100
        if args.epochs * args.steps_per_epoch <= args.warmup_steps_timing:
            parser.error(f"{args.epochs * args.steps_per_epoch} steps leave none to time after "
                         f"--warmup-steps-timing {args.warmup_steps_timing}")
    return args


def _env_int(environ, name: str, default: int) -> int:
    text = environ.get(name, "").strip()
    return int(text) if text.isdigit() else default


def scaled_lr(base_lr: float, global_batch: int) -> float:
    """The linear scaling rule: base_lr is for 256 images; k times the batch, k times the rate."""
    return base_lr * global_batch / REFERENCE_BATCH


def learning_rate(epoch: float, base_lr: float, global_batch: int, warmup_epochs: float = 5.0,
                  schedule: str = "step", total_epochs: float = 90.0,
                  milestones: tuple[float, ...] = STEP_MILESTONES) -> float:
    """The rate at `epoch` (fractional: epoch + step / steps_per_epoch).

    Warm-up climbs linearly from base_lr (the rate a 256-image batch trains with safely) to the
    scaled rate, reached at `warmup_epochs`; a global batch of 256 or less starts at its scaled
    rate. Then "step" divides by 10 at each milestone passed, and "cosine" decays from the
    scaled rate at the end of warm-up to 0 at `total_epochs`.
    """
    if schedule not in ("step", "cosine"):
        raise ValueError(f"unknown schedule {schedule!r} (step or cosine)")
    peak = scaled_lr(base_lr, global_batch)
    if epoch < warmup_epochs:
        start = min(base_lr, peak)
        return start + (peak - start) * epoch / warmup_epochs
    if schedule == "step":
        return peak * 0.1 ** sum(1 for m in milestones if epoch >= m)
    span = total_epochs - warmup_epochs
    progress = min(max((epoch - warmup_epochs) / span, 0.0), 1.0) if span > 0 else 1.0
    return peak * 0.5 * (1.0 + math.cos(math.pi * progress))


def throughput(gpus: int, batch_per_gpu: int, steps: int, seconds: float) -> float:
    """Global images per second."""
    return gpus * batch_per_gpu * steps / seconds


def stage_fields(staged: hal_stage.Staged, slowest_seconds: float | None = None) -> dict:
    """The RESULT line's account of the copy to local scratch: its seconds (the slowest node's
    when given), bytes and files."""
    seconds = staged.seconds if slowest_seconds is None else slowest_seconds
    return {"stage_seconds": round(seconds, 3), "stage_bytes": staged.bytes, "stage_files": staged.files}


def result_line(result: dict) -> str:
    """The one line scaling.py reads: RESULT {json, keys sorted}."""
    return "RESULT " + json.dumps(result, sort_keys=True)


class StepTimer:
    """Seconds spent in the timed steps: steps after the first `skip` count, and the clock
    runs only between resume() and pause() (checkpoint writes fall outside). `sync` waits for
    the GPU (torch.cuda.synchronize) so the clock measures finished work."""

    def __init__(self, skip: int, sync=lambda: None, clock=time.perf_counter):
        self.skip, self.sync, self.clock = skip, sync, clock
        self.done = 0          # steps finished
        self.seconds = 0.0
        self._since = None     # clock value when the running interval began

    @property
    def timed_steps(self) -> int:
        return max(self.done - self.skip, 0)

    def step_finished(self) -> None:
        self.done += 1
        if self.done == self.skip:  # the untimed steps end here (skip 0: resume() started it)
            self.sync()
            self._since = self.clock()

    def resume(self) -> None:
        """Start the clock again (each epoch), once the untimed steps are behind."""
        if self.done >= self.skip and self._since is None:
            self.sync()
            self._since = self.clock()

    def pause(self) -> None:
        """Stop the clock (end of an epoch), adding the interval."""
        if self._since is not None:
            self.sync()
            self.seconds += self.clock() - self._since
            self._since = None


# ---- training (PyTorch) -----------------------------------------------------------------------

def setup(rv: slurmenv.Rendezvous):
    """Join the world: env:// with the Slurm-derived settings, NCCL, this rank's GPU."""
    import torch
    import torch.distributed as dist

    os.environ.update(rv.torch_env())
    torch.cuda.set_device(rv.device)
    dist.init_process_group("nccl", init_method="env://")
    torch.backends.cudnn.benchmark = True
    return torch.device("cuda", rv.device)


def build_model(args, device, world_size: int):
    """ResNet-50 in channels-last, wrapped in DDP; its SGD optimiser, loss and grad scaler."""
    import torch
    import torchvision
    from torch.nn.parallel import DistributedDataParallel

    model = torchvision.models.resnet50(num_classes=CLASSES).to(device, memory_format=torch.channels_last)
    ddp = DistributedDataParallel(model, device_ids=[device.index])
    if args.no_bn_weight_decay:
        decay = [p for n, p in model.named_parameters() if p.ndim > 1]
        no_decay = [p for n, p in model.named_parameters() if p.ndim <= 1]  # BN weights, all biases
        groups = [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    else:
        groups = [{"params": list(model.parameters()), "weight_decay": args.weight_decay}]
    lr0 = learning_rate(0.0, args.base_lr, args.batch_per_gpu * world_size, args.warmup_epochs, args.schedule,
                        args.epochs)
    optimizer = torch.optim.SGD(groups, lr=lr0, momentum=args.momentum)
    criterion = torch.nn.CrossEntropyLoss(label_smoothing=args.label_smoothing).to(device)
    amp = args.precision == "amp"
    try:
        scaler = torch.amp.GradScaler("cuda", enabled=amp)
    except (AttributeError, TypeError):  # PyTorch before 2.3
        scaler = torch.cuda.amp.GradScaler(enabled=amp)
    return model, ddp, optimizer, criterion, scaler


def synthetic_batches(args, device, rank: int, steps: int):
    """The same random batch, made on the GPU once, `steps` times per epoch."""
    import torch

    generator = torch.Generator(device=device).manual_seed(args.seed + rank)
    images = torch.randn(args.batch_per_gpu, 3, IMAGE_SIZE, IMAGE_SIZE, device=device, generator=generator)
    images = images.contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, CLASSES, (args.batch_per_gpu,), device=device, generator=generator)

    def epoch(_epoch: int):
        for _ in range(steps):
            yield images, labels
    return epoch, steps


def folder_batches(args, device, rv: slurmenv.Rendezvous):
    """An ImageFolder tree with the standard training transforms, sharded by rank."""
    import torch
    import torchvision
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler
    from torchvision import transforms

    root = os.path.join(args.data, "train") if os.path.isdir(os.path.join(args.data, "train")) else args.data
    dataset = torchvision.datasets.ImageFolder(root, transforms.Compose([
        transforms.RandomResizedCrop(IMAGE_SIZE),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ]))
    sampler = DistributedSampler(dataset, num_replicas=rv.world_size, rank=rv.rank, shuffle=True,
                                 seed=args.seed, drop_last=True)
    loader = DataLoader(dataset, batch_size=args.batch_per_gpu, sampler=sampler, num_workers=args.workers,
                        pin_memory=True, drop_last=True, persistent_workers=args.workers > 0)
    steps = len(loader) if args.steps_per_epoch is None else min(len(loader), args.steps_per_epoch)
    if steps < 1:
        raise SystemExit(f"train_resnet50: {root} has too few images for one batch of {args.batch_per_gpu} per GPU")

    def epoch(number: int):
        sampler.set_epoch(number)
        for step, (images, labels) in enumerate(loader):
            if step == steps:
                break
            yield (images.to(device, non_blocking=True).contiguous(memory_format=torch.channels_last),
                   labels.to(device, non_blocking=True))
    return epoch, steps


def checkpoint_path(args) -> str:
    return os.path.join(args.checkpoint_dir, CHECKPOINT_NAME)


def save_checkpoint(args, epoch: int, model, optimizer, scaler) -> None:
    """Rank 0: written beside, then renamed, so a job killed mid-write keeps the last one."""
    import torch

    os.makedirs(args.checkpoint_dir, exist_ok=True)
    path = checkpoint_path(args)
    torch.save({"epoch": epoch, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scaler": scaler.state_dict(), "args": vars(args)}, path + ".tmp")
    os.replace(path + ".tmp", path)


def load_checkpoint(args, device, model, optimizer, scaler) -> int:
    """The first epoch still to train: 0 without a checkpoint, else the one after it."""
    import torch

    path = checkpoint_path(args)
    if not os.path.exists(path):
        return 0
    state = torch.load(path, map_location=device)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scaler.load_state_dict(state["scaler"])
    return state["epoch"] + 1


def train(args, rv: slurmenv.Rendezvous, staged: hal_stage.Staged | None = None) -> dict | None:
    """Train; the RESULT dictionary on rank 0, None on the others. `staged`: this node's copy of
    the data set (--stage), already in args.data."""
    import torch
    import torch.distributed as dist

    device = setup(rv)
    model, ddp, optimizer, criterion, scaler = build_model(args, device, rv.world_size)
    if args.data == "synthetic":
        batches, steps = synthetic_batches(args, device, rv.rank, args.steps_per_epoch)
    else:
        batches, steps = folder_batches(args, device, rv)
    start_epoch = load_checkpoint(args, device, model, optimizer, scaler) if args.resume else 0
    if start_epoch >= args.epochs:
        raise SystemExit(f"train_resnet50: the checkpoint in {args.checkpoint_dir} has all {args.epochs} epochs")
    if (args.epochs - start_epoch) * steps <= args.warmup_steps_timing:
        raise SystemExit(f"train_resnet50: {(args.epochs - start_epoch) * steps} steps leave none to time after "
                         f"--warmup-steps-timing {args.warmup_steps_timing}")
    global_batch = args.batch_per_gpu * rv.world_size
    amp = args.precision == "amp"
    timer = StepTimer(args.warmup_steps_timing, sync=torch.cuda.synchronize)
    log = print if rv.rank == 0 else (lambda *a, **k: None)
    log(f"resnet50: {rv.world_size} GPUs on {rv.nnodes} node(s), global batch {global_batch}, "
        f"peak lr {scaled_lr(args.base_lr, global_batch):g}, {steps} steps/epoch, epochs {start_epoch}..{args.epochs - 1}, "
        f"data {args.data}, precision {args.precision}", flush=True)

    ddp.train()
    for epoch in range(start_epoch, args.epochs):
        timer.resume()
        for step, (images, labels) in enumerate(batches(epoch)):
            lr = learning_rate(epoch + step / steps, args.base_lr, global_batch, args.warmup_epochs,
                               args.schedule, args.epochs)
            for group in optimizer.param_groups:
                group["lr"] = lr
            with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
                loss = criterion(ddp(images), labels)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            timer.step_finished()
            if rv.rank == 0 and (step + 1) % args.log_every == 0:
                log(f"epoch {epoch} step {step + 1}/{steps} loss {loss.item():.4f} lr {lr:.5f}", flush=True)
        timer.pause()
        if args.checkpoint_dir and rv.rank == 0:
            save_checkpoint(args, epoch, model, optimizer, scaler)

    # The slowest rank's time is the job's, and the slowest node's copy to local scratch.
    seconds = torch.tensor([timer.seconds, staged.seconds if staged else 0.0], device=device, dtype=torch.float64)
    dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
    result = None
    if rv.rank == 0:
        total = throughput(rv.world_size, args.batch_per_gpu, timer.timed_steps, seconds[0].item())
        result = {
            "images_per_second": round(total, 1),
            "per_gpu": round(total / rv.world_size, 1),
            "gpus": rv.world_size,
            "nodes": rv.nnodes,
            "batch_per_gpu": args.batch_per_gpu,
            "precision": args.precision,
            "steps": timer.timed_steps,
            "seconds": round(seconds[0].item(), 3),
            "torch": torch.__version__,
            "gpu_name": torch.cuda.get_device_name(device),
        }
        if staged is not None:
            result.update(stage_fields(staged, seconds[1].item()))
    dist.destroy_process_group()
    return result


def stage_data(args, rv: slurmenv.Rendezvous) -> hal_stage.Staged:
    """Copy --data to this node's local scratch (one task per node copies, the others wait) and
    point args.data at the copy. Each node's local rank 0 says what happened."""
    staged = hal_stage.stage(args.data, args.stage_dest)
    if rv.local_rank == 0:
        print(f"{rv.hostname} {staged.summary()}", file=sys.stderr, flush=True)
    args.data = str(staged.path)
    return staged


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        rv = slurmenv.from_slurm(os.environ)
    except slurmenv.SlurmEnvError as exc:
        print(f"train_resnet50: {exc}", file=sys.stderr)
        return 2
    try:
        import torch  # noqa: F401
        import torchvision  # noqa: F401
    except ImportError as exc:
        print(f"train_resnet50: PyTorch and torchvision are needed ({exc}): load the framework module "
              "or activate an environment that has them", file=sys.stderr)
        return 2
    staged = None
    if args.stage:
        try:
            staged = stage_data(args, rv)
        except hal_stage.StageError as exc:
            print(f"train_resnet50: --stage: {exc}", file=sys.stderr)
            return 2
    result = train(args, rv, staged)
    if result is not None:
        print(result_line(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
