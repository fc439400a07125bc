"""ResNet-50 with PyTorch DistributedDataParallel on every GPU of a Slurm job (HAL, PEARC '20),
or on the CPUs of a job without GPUs.

The recipe HAL's paper measured scaling with: ResNet-50, a per-GPU batch of 256, mixed
precision (fp16 autocast with a gradient scaler, channels-last tensors), SGD with momentum 0.9
and weight decay 1e-4, the learning rate scaled linearly with the global batch (0.1 per 256
images) after a linear warm-up (Goyal et al., "Accurate, Large Minibatch SGD", 2017), then
divided by 10 at epochs 30, 60 and 80 (or a cosine decay).

One process per GPU, started by the job script's srun (one task per GPU per node). Each takes
its rank, world and rendezvous from Slurm's environment through slurmenv.py, the same values
wiring_probe.py checks, and hands them to torch.distributed's env:// initialisation.

    train_resnet50.py --data synthetic --epochs 1 --steps-per-epoch 100   (the benchmark)
    train_resnet50.py --data /datasets/imagenet --checkpoint-dir ~/ckpt --resume
    train_resnet50.py --data ~/datasets/imagenet-mini --stage      (copied to local scratch first)
    train_resnet50.py --device cpu --arch resnet18 --image-size 64 --batch-per-rank 16 ...

On CPUs (--device cpu, or --device auto, the default, where the task sees no GPU: Slurm sets
no CUDA_VISIBLE_DEVICES in a job without GPUs, or PyTorch finds none) the same loop runs in
fp32 over gloo, one process per task (the job script starts one per socket), with
torch.set_num_threads from OMP_NUM_THREADS, else SLURM_CPUS_PER_TASK. --arch resnet18 and a
smaller --image-size make a run that takes minutes on a few cores; ResNet-50 at 224 pixels
stays the default. The network is defined here (the layers of torchvision's resnet18 and
resnet50, v1.5: stride on the 3x3 convolution; the same parameter counts, 11,689,512 and
25,557,032), so synthetic runs need PyTorch alone; an ImageFolder needs torchvision too.

`--data synthetic` makes one batch of random images and fixed labels on each rank once and
trains on it every step, so the figure measures the devices and the collective, not the file
system or JPEG decoding; the batch is a small fixed data set the network learns (memorises), so
the loss falls within a few dozen steps. A path is an ImageFolder tree (PATH/train when it
exists), sharded across ranks with a DistributedSampler. With --stage every task first calls
hal_stage.stage() on it: on each node one task copies the tree to the job's local scratch
(default $TMPDIR/hal-stage/NAME, or --stage-dest), the node's other tasks wait for that copy,
and all read from there.

Throughput: the first --warmup-steps-timing steps (cuDNN autotuning, NCCL setup) are not
timed; the rest are, between torch.cuda.synchronize() calls on GPUs, checkpoint writes
excluded. The slowest rank's time counts. Two checks follow the steps: every rank's parameters
are the same (a SHA-256 of all parameters from each rank, compared on rank 0: DDP's averaged
gradients and the same optimiser step keep replicas bit for bit equal), and the loss fell (the
mean over the ranks of the first k steps' loss against the last k's, k = a quarter of the
steps, at most 10). Rank 0 ends with exactly one line, keys sorted:

    RESULT {"arch": "resnet50", "batch_per_gpu": 256, "batch_per_rank": 256, "device": "cuda",
            "gpu_name": ..., "gpus": 8, "image_size": 224, "images_per_second": ...,
            "loss_fell": true, "loss_first": 6.93, "loss_last": 2.1, "loss_window": 10,
            "nodes": 2, "params_checksum": ..., "params_digests": [...], "params_equal": true, "per_gpu": ...,
            "per_node": ..., "per_rank": ..., "precision": "amp", "ranks": 8, "seconds": ...,
            "steps": ..., "torch": "2.5.1"}

On CPUs "device" is "cpu", "gpus", "per_gpu", "batch_per_gpu" and "gpu_name" are left out, and
"cpu_name" and "threads_per_rank" come in. scaling.py reads it. images_per_second = ranks *
batch_per_rank * steps / seconds; per_node = images_per_second / nodes. With --stage it also
has stage_seconds (the slowest node's copy), stage_bytes and stage_files (one node's copy:
every node copies the same tree). Parameters that differ between ranks make the exit status 1.

PyTorch (and torchvision, for an ImageFolder) is imported only inside the functions that
train, so that the options, the learning-rate schedule, the device and thread choice and the
checks can be read and tested where PyTorch is not installed.
"""

from __future__ import annotations

import argparse
import collections
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
DEVICES = ("auto", "cuda", "cpu")
ARCHS = {"resnet50": ("bottleneck", (3, 4, 6, 3)), "resnet18": ("basic", (2, 2, 2, 2))}  # torchvision's layers
LARGE_BATCH = 8192  # past this global batch the SC18 CPU study needed more than the linear rule
LOSS_WINDOW = 10  # at most this many first and last steps' losses are compared


# ---- options and schedule (no PyTorch) ------------------------------------------------------


def parse_args(argv: list[str] | None = None, environ=None) -> argparse.Namespace:
    """The recipe's options. The per-GPU batch defaults to $HAL_RECIPE_BATCH_PER_GPU, else 256."""
    environ = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(
        prog="train_resnet50.py",
        description="ResNet-50 with PyTorch DistributedDataParallel, one process per GPU of the Slurm step "
        "(or per task on CPUs, over gloo).",
    )
    parser.add_argument(
        "--data",
        default="synthetic",
        help="'synthetic' (a random batch made on the device once: the benchmark) or an ImageFolder path",
    )
    device = environ.get(slurmenv.DEVICE_VAR, "")
    parser.add_argument(
        "--device",
        choices=DEVICES,
        default=device if device in DEVICES else "auto",
        help=f"auto (default; ${slurmenv.DEVICE_VAR} when set, as the job script's CPU branch "
        "does): the GPUs when the task sees one (CUDA_VISIBLE_DEVICES set and PyTorch finds "
        "it), else the CPUs over gloo",
    )
    parser.add_argument(
        "--arch",
        choices=tuple(ARCHS),
        default="resnet50",
        help="the network (default resnet50; resnet18 for a short run on few cores)",
    )
    parser.add_argument(
        "--image-size",
        type=int,
        default=IMAGE_SIZE,
        help=f"side of the images in pixels (default {IMAGE_SIZE}; at least 32)",
    )
    parser.add_argument("--epochs", type=int, default=90, help="epochs to train (default 90)")
    parser.add_argument(
        "--steps-per-epoch",
        type=int,
        default=None,
        help="steps per epoch (synthetic: default 100; a data set: at most this many)",
    )
    parser.add_argument(
        "--batch-per-gpu",
        "--batch-per-rank",
        dest="batch_per_gpu",
        type=int,
        default=_env_int(environ, BATCH_VAR, 256),
        help=f"images per GPU (per rank, on CPUs) per step (default ${BATCH_VAR}, else 256)",
    )
    parser.add_argument(
        "--base-lr",
        type=float,
        default=0.1,
        help=f"learning rate for {REFERENCE_BATCH} images, scaled linearly by the global batch",
    )
    parser.add_argument("--warmup-epochs", type=float, default=5.0, help="linear warm-up epochs (default 5)")
    parser.add_argument(
        "--schedule",
        choices=("step", "cosine"),
        default="step",
        help="after warm-up: /10 at epochs 30, 60, 80 (step) or cosine decay to 0",
    )
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--weight-decay", type=float, default=1e-4)
    parser.add_argument(
        "--no-bn-weight-decay", action="store_true", help="no weight decay on batch-norm weights and biases"
    )
    parser.add_argument("--label-smoothing", type=float, default=0.0)
    parser.add_argument(
        "--precision",
        choices=("amp", "fp32"),
        default="amp",
        help="amp: fp16 autocast and a gradient scaler on GPUs (default); fp32 (always on CPUs)",
    )
    parser.add_argument(
        "--stage",
        action="store_true",
        help="copy --data to this node's local scratch once (hal-stage) and train from there",
    )
    parser.add_argument(
        "--stage-dest",
        default=None,
        help="where --stage copies to (default: $TMPDIR or /tmp, then /hal-stage/<data's name>)",
    )
    parser.add_argument("--workers", type=int, default=8, help="data loader processes per GPU (data sets only)")
    parser.add_argument(
        "--warmup-steps-timing", type=int, default=10, help="first steps left out of the throughput figure (default 10)"
    )
    parser.add_argument("--log-every", type=int, default=50, help="rank 0 logs every N steps (default 50)")
    parser.add_argument("--checkpoint-dir", default=None, help=f"rank 0 writes DIR/{CHECKPOINT_NAME} after every epoch")
    parser.add_argument(
        "--resume",
        action="store_true",
        help=f"continue from --checkpoint-dir/{CHECKPOINT_NAME} when it exists (a requeued job)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="compute threads per rank on CPUs (default: OMP_NUM_THREADS, which the job script sets "
        "to the cores of the task's socket, else SLURM_CPUS_PER_TASK); fewer where the nodes' CPUs "
        "are shared",
    )
    args = parser.parse_args(argv)

    for name in ("epochs", "batch_per_gpu", "log_every"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.steps_per_epoch is not None and args.steps_per_epoch < 1:
        parser.error("--steps-per-epoch must be at least 1")
    if args.threads is not None and args.threads < 1:
        parser.error("--threads must be at least 1")
    if args.image_size < 32:
        parser.error("--image-size must be at least 32 (the network halves it five times)")
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
            parser.error(
                f"{args.epochs * args.steps_per_epoch} steps leave none to time after "
                f"--warmup-steps-timing {args.warmup_steps_timing}"
            )
    return args


def _env_int(environ, name: str, default: int) -> int:
    text = environ.get(name, "").strip()
    return int(text) if text.isdigit() else default


def scaled_lr(base_lr: float, global_batch: int) -> float:
    """The linear scaling rule: base_lr is for 256 images; k times the batch, k times the rate."""
    return base_lr * global_batch / REFERENCE_BATCH


def learning_rate(
    epoch: float,
    base_lr: float,
    global_batch: int,
    warmup_epochs: float = 5.0,
    schedule: str = "step",
    total_epochs: float = 90.0,
    milestones: tuple[float, ...] = STEP_MILESTONES,
) -> float:
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


# ---- device, threads, the checks and the result (no PyTorch) ------------------------------------


class DeviceError(Exception):
    """The device asked for cannot be had; the message says why."""


def cuda_visible(environ) -> bool:
    """Slurm shows the task GPUs: CUDA_VISIBLE_DEVICES set, not empty and not "NoDevFiles" (a
    job without GPUs has none of it)."""
    text = environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    return bool(text) and text != "NoDevFiles"


def choose_device(requested: str, environ, cuda_available) -> str:
    """ "cuda" or "cpu" for --device `requested`; `cuda_available` is asked only when it matters
    (torch.cuda.is_available, which needs PyTorch). auto: the GPUs when Slurm shows the task
    some and PyTorch finds them (a CPU build of PyTorch finds none), else the CPUs."""
    if requested == "cpu":
        return "cpu"
    if requested == "cuda":
        if not cuda_available():
            raise DeviceError(
                "--device cuda, but PyTorch finds no GPU (a CPU build, or a job without GPUs: "
                "submit with swbatch -p gpuxN)"
            )
        return "cuda"
    return "cuda" if cuda_visible(environ) and cuda_available() else "cpu"


def effective_precision(requested: str, device: str) -> str:
    """fp16 autocast is for GPUs: on CPUs the recipe trains in fp32, as the published CPU figures."""
    return requested if device == "cuda" else "fp32"


def cpu_threads(environ) -> int | None:
    """Compute threads per rank on CPUs: OMP_NUM_THREADS (the job script sets it to the cores
    of the task's socket; its first entry where it lists nested levels), else
    SLURM_CPUS_PER_TASK; None when neither is a positive number (PyTorch's own default)."""
    for name in ("OMP_NUM_THREADS", "SLURM_CPUS_PER_TASK"):
        text = environ.get(name, "").split(",")[0].strip()
        if text.isdigit() and int(text) > 0:
            return int(text)
    return None


def large_batch_warning(global_batch: int, warmup_epochs: float) -> str | None:
    """What to say past a global batch of LARGE_BATCH: what the SC18 study of ResNet-50 on CPU
    clusters learned about large batches; None up to it."""
    if global_batch <= LARGE_BATCH:
        return None
    return (
        f"train_resnet50: warning: a global batch of {global_batch} images (over {LARGE_BATCH}). Scaling "
        "ResNet-50 on CPU clusters (SC18) found that batches this large lose accuracy under the linear "
        f"learning-rate rule alone: keep a learning-rate warm-up (--warmup-epochs, now {warmup_epochs:g}; "
        "5 or more), use layer-wise rate scaling (LARS-style, not in this recipe), or a smaller batch "
        "(--batch-per-rank, or fewer nodes)."
    )


def loss_window(steps: int) -> int:
    """How many first and last steps' losses are compared: a quarter of the steps, 1..LOSS_WINDOW."""
    return max(1, min(LOSS_WINDOW, steps // 4))


class LossTrack:
    """The losses of the first `window` steps and of the last `window` (any values: the
    training loop keeps detached tensors, read once at the end, so that no step waits for the
    device)."""

    def __init__(self, window: int):
        self.window = window
        self.first: list = []
        self.last: collections.deque = collections.deque(maxlen=window)

    def add(self, loss) -> None:
        if len(self.first) < self.window:
            self.first.append(loss)
        self.last.append(loss)

    def means(self, value=float) -> tuple[float, float]:
        """The mean of the first and of the last losses, each read with `value`."""
        if not self.first:
            return math.nan, math.nan
        return (sum(value(x) for x in self.first) / len(self.first), sum(value(x) for x in self.last) / len(self.last))


def loss_fields(first: float, last: float, window: int) -> dict:
    """The RESULT line's account of the loss: it fell when the last steps' mean is below the first's."""
    return {
        "loss_first": round(first, 4),
        "loss_last": round(last, 4),
        "loss_window": window,
        "loss_fell": bool(last < first),
    }


def unequal_ranks(digests: list[str]) -> list[int]:
    """The ranks whose parameter digest differs from rank 0's (empty: all equal)."""
    return [rank for rank, digest in enumerate(digests) if digest != digests[0]]


def cpu_name(cpuinfo: str) -> str:
    """The processor's name from /proc/cpuinfo: "model name" (x86), else "cpu" (POWER), else "?"."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    return fields.get("model name") or fields.get("cpu") or "?"


def result_fields(
    *,
    device: str,
    ranks: int,
    nodes: int,
    batch_per_rank: int,
    steps: int,
    seconds: float,
    precision: str,
    arch: str,
    image_size: int,
    torch_version: str,
    device_name: str,
    threads: int | None = None,
) -> dict:
    """The RESULT line's figures (the checks' and the copy's fields are added to it). On GPUs
    the names scaling.py has always read (gpus, per_gpu, batch_per_gpu, gpu_name) stay."""
    total = throughput(ranks, batch_per_rank, steps, seconds)
    result = {
        "device": device,
        "arch": arch,
        "image_size": image_size,
        "precision": precision,
        "images_per_second": round(total, 1),
        "per_node": round(total / nodes, 1),
        "per_rank": round(total / ranks, 1),
        "ranks": ranks,
        "nodes": nodes,
        "batch_per_rank": batch_per_rank,
        "steps": steps,
        "seconds": round(seconds, 3),
        "torch": torch_version,
    }
    if device == "cuda":
        result.update(
            {"gpus": ranks, "per_gpu": result["per_rank"], "batch_per_gpu": batch_per_rank, "gpu_name": device_name}
        )
    else:
        result.update({"cpu_name": device_name, "threads_per_rank": threads})
    return result


class StepTimer:
    """Seconds spent in the timed steps: steps after the first `skip` count, and the clock
    runs only between resume() and pause() (checkpoint writes fall outside). `sync` waits for
    the GPU (torch.cuda.synchronize) so the clock measures finished work."""

    def __init__(self, skip: int, sync=lambda: None, clock=time.perf_counter):
        self.skip, self.sync, self.clock = skip, sync, clock
        self.done = 0  # steps finished
        self.seconds = 0.0
        self._since = None  # clock value when the running interval began

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


def setup(rv: slurmenv.Rendezvous, device_type: str):
    """Join the world: env:// with the Slurm-derived settings; NCCL and this rank's GPU, or
    gloo on the CPUs with the task's threads."""
    import torch
    import torch.distributed as dist

    os.environ.update(rv.torch_env())
    if device_type == "cuda":
        torch.cuda.set_device(rv.device)
        dist.init_process_group("nccl", init_method="env://")
        torch.backends.cudnn.benchmark = True
        return torch.device("cuda", rv.device)
    threads = cpu_threads(os.environ)
    if threads is not None:
        torch.set_num_threads(threads)
    dist.init_process_group("gloo", init_method="env://")
    return torch.device("cpu")


def build_network(arch: str, classes: int = CLASSES):
    """ResNet (He et al., 2016) as torchvision builds it, v1.5: the stride of a bottleneck on
    its 3x3 convolution, convolutions initialised He-normal (fan out), batch norms to 1 and 0;
    the same module names, so its checkpoints and torchvision's load into each other."""
    from torch import nn

    def conv(cin: int, cout: int, k: int, stride: int = 1):
        return nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, bias=False)

    class Basic(nn.Module):
        expansion = 1

        def __init__(self, cin: int, width: int, stride: int, down):
            super().__init__()
            self.conv1, self.bn1 = conv(cin, width, 3, stride), nn.BatchNorm2d(width)
            self.conv2, self.bn2 = conv(width, width, 3), nn.BatchNorm2d(width)
            self.relu, self.downsample = nn.ReLU(inplace=True), down

        def forward(self, x):
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return self.relu(out + (x if self.downsample is None else self.downsample(x)))

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, cin: int, width: int, stride: int, down):
            super().__init__()
            self.conv1, self.bn1 = conv(cin, width, 1), nn.BatchNorm2d(width)
            self.conv2, self.bn2 = conv(width, width, 3, stride), nn.BatchNorm2d(width)
            self.conv3, self.bn3 = conv(width, width * 4, 1), nn.BatchNorm2d(width * 4)
            self.relu, self.downsample = nn.ReLU(inplace=True), down

        def forward(self, x):
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            return self.relu(out + (x if self.downsample is None else self.downsample(x)))

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            kind, depths = ARCHS[arch]
            block = Bottleneck if kind == "bottleneck" else Basic
            self.conv1, self.bn1, self.relu = conv(3, 64, 7, 2), nn.BatchNorm2d(64), nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
            cin = 64
            for i, depth in enumerate(depths):
                width, stride = 64 * 2**i, 1 if i == 0 else 2
                blocks = []
                for j in range(depth):
                    down = None
                    if j == 0 and (stride != 1 or cin != width * block.expansion):
                        down = nn.Sequential(
                            conv(cin, width * block.expansion, 1, stride), nn.BatchNorm2d(width * block.expansion)
                        )
                    blocks.append(block(cin, width, stride if j == 0 else 1, down))
                    cin = width * block.expansion
                setattr(self, f"layer{i + 1}", nn.Sequential(*blocks))
            self.avgpool, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(cin, classes)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(self.avgpool(x).flatten(1))

    model = ResNet()
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
    return model


def build_model(args, device, world_size: int):
    """The network in channels-last, wrapped in DDP; its SGD optimiser, loss and grad scaler
    (enabled for amp on GPUs only)."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(args.seed)  # every rank starts alike (DDP also sends rank 0's weights)
    model = build_network(args.arch).to(device, memory_format=torch.channels_last)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    if args.no_bn_weight_decay:
        decay = [p for n, p in model.named_parameters() if p.ndim > 1]
        no_decay = [p for n, p in model.named_parameters() if p.ndim <= 1]  # BN weights, all biases
        groups = [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    else:
        groups = [{"params": list(model.parameters()), "weight_decay": args.weight_decay}]
    lr0 = learning_rate(
        0.0, args.base_lr, args.batch_per_gpu * world_size, args.warmup_epochs, args.schedule, args.epochs
    )
    optimizer = torch.optim.SGD(groups, lr=lr0, momentum=args.momentum)
    criterion = torch.nn.CrossEntropyLoss(label_smoothing=args.label_smoothing).to(device)
    amp = effective_precision(args.precision, device.type) == "amp"
    try:
        scaler = torch.amp.GradScaler(device.type, enabled=amp)
    except (AttributeError, TypeError):  # PyTorch before 2.3
        scaler = torch.cuda.amp.GradScaler(enabled=amp)
    return model, ddp, optimizer, criterion, scaler


def synthetic_batches(args, device, rank: int, steps: int):
    """The same random batch, made on the device once, `steps` times per epoch."""
    import torch

    generator = torch.Generator(device=device).manual_seed(args.seed + rank)
    size = args.image_size
    images = torch.randn(args.batch_per_gpu, 3, size, size, device=device, generator=generator)
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
    dataset = torchvision.datasets.ImageFolder(
        root,
        transforms.Compose(
            [
                transforms.RandomResizedCrop(args.image_size),
                transforms.RandomHorizontalFlip(),
                transforms.ToTensor(),
                transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
            ]
        ),
    )
    sampler = DistributedSampler(
        dataset, num_replicas=rv.world_size, rank=rv.rank, shuffle=True, seed=args.seed, drop_last=True
    )
    loader = DataLoader(
        dataset,
        batch_size=args.batch_per_gpu,
        sampler=sampler,
        num_workers=args.workers,
        pin_memory=device.type == "cuda",
        drop_last=True,
        persistent_workers=args.workers > 0,
    )
    steps = len(loader) if args.steps_per_epoch is None else min(len(loader), args.steps_per_epoch)
    if steps < 1:
        raise SystemExit(f"train_resnet50: {root} has too few images for one batch of {args.batch_per_gpu} per rank")

    def epoch(number: int):
        sampler.set_epoch(number)
        for step, (images, labels) in enumerate(loader):
            if step == steps:
                break
            yield (
                images.to(device, non_blocking=True).contiguous(memory_format=torch.channels_last),
                labels.to(device, non_blocking=True),
            )

    return epoch, steps


def checkpoint_path(args) -> str:
    return os.path.join(args.checkpoint_dir, CHECKPOINT_NAME)


def save_checkpoint(args, epoch: int, model, optimizer, scaler) -> None:
    """Rank 0: written beside, then renamed, so a job killed mid-write keeps the last one."""
    import torch

    os.makedirs(args.checkpoint_dir, exist_ok=True)
    path = checkpoint_path(args)
    torch.save(
        {
            "epoch": epoch,
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scaler": scaler.state_dict(),
            "args": vars(args),
        },
        path + ".tmp",
    )
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


def parameter_digest(model) -> tuple[str, float]:
    """SHA-256 of every parameter's bytes in order (equal on every rank, or DDP went wrong) and
    their float64 sum (a figure to read). The bytes are read in place (ctypes), not through
    NumPy, which a framework environment need not have."""
    import ctypes
    import hashlib

    import torch

    digest, total = hashlib.sha256(), 0.0
    with torch.no_grad():
        for p in model.parameters():
            flat = p.detach().to("cpu").contiguous().reshape(-1)
            digest.update(ctypes.string_at(flat.data_ptr(), flat.numel() * flat.element_size()))
            total += flat.double().sum().item()
    return digest.hexdigest(), total


def train(args, rv: slurmenv.Rendezvous, device_type: str, staged: hal_stage.Staged | None = None) -> dict | None:
    """Train on `device_type` ("cuda" or "cpu"); the RESULT dictionary on rank 0, None on the
    others. `staged`: this node's copy of the data set (--stage), already in args.data."""
    import torch
    import torch.distributed as dist

    device = setup(rv, device_type)
    model, ddp, optimizer, criterion, scaler = build_model(args, device, rv.world_size)
    if args.data == "synthetic":
        batches, steps = synthetic_batches(args, device, rv.rank, args.steps_per_epoch)
    else:
        batches, steps = folder_batches(args, device, rv)
    start_epoch = load_checkpoint(args, device, model, optimizer, scaler) if args.resume else 0
    if start_epoch >= args.epochs:
        raise SystemExit(f"train_resnet50: the checkpoint in {args.checkpoint_dir} has all {args.epochs} epochs")
    total_steps = (args.epochs - start_epoch) * steps
    if total_steps <= args.warmup_steps_timing:
        raise SystemExit(
            f"train_resnet50: {total_steps} steps leave none to time after "
            f"--warmup-steps-timing {args.warmup_steps_timing}"
        )
    global_batch = args.batch_per_gpu * rv.world_size
    precision = effective_precision(args.precision, device_type)
    amp = precision == "amp"
    cuda = device_type == "cuda"
    timer = StepTimer(args.warmup_steps_timing, sync=torch.cuda.synchronize if cuda else (lambda: None))
    losses = LossTrack(loss_window(total_steps))
    log = print if rv.rank == 0 else (lambda *a, **k: None)
    warning = large_batch_warning(global_batch, args.warmup_epochs)
    if warning and rv.rank == 0:
        print(warning, file=sys.stderr, flush=True)
    where = f"{rv.world_size} GPUs" if cuda else f"{rv.world_size} CPU ranks x {torch.get_num_threads()} threads (gloo)"
    log(
        f"{args.arch}: {where} on {rv.nnodes} node(s), global batch {global_batch}, "
        f"peak lr {scaled_lr(args.base_lr, global_batch):g}, {steps} steps/epoch, epochs {start_epoch}..{args.epochs - 1}, "
        f"data {args.data}, images {args.image_size}px, precision {precision}",
        flush=True,
    )

    ddp.train()
    for epoch in range(start_epoch, args.epochs):
        timer.resume()
        for step, (images, labels) in enumerate(batches(epoch)):
            lr = learning_rate(
                epoch + step / steps, args.base_lr, global_batch, args.warmup_epochs, args.schedule, args.epochs
            )
            for group in optimizer.param_groups:
                group["lr"] = lr
            with torch.autocast(device_type, dtype=torch.float16, enabled=amp):
                loss = criterion(ddp(images), labels)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            losses.add(loss.detach())
            timer.step_finished()
            if rv.rank == 0 and (step + 1) % args.log_every == 0:
                log(f"epoch {epoch} step {step + 1}/{steps} loss {loss.item():.4f} lr {lr:.5f}", flush=True)
        timer.pause()
        if args.checkpoint_dir and rv.rank == 0:
            save_checkpoint(args, epoch, model, optimizer, scaler)

    # The slowest rank's time is the job's, and the slowest node's copy to local scratch; the
    # loss is the mean over the ranks; every rank's parameters go to rank 0 to be compared.
    seconds = torch.tensor([timer.seconds, staged.seconds if staged else 0.0], device=device, dtype=torch.float64)
    dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
    loss_means = torch.tensor(losses.means(lambda t: t.float().item()), device=device, dtype=torch.float64)
    dist.all_reduce(loss_means, op=dist.ReduceOp.SUM)
    digest, checksum = parameter_digest(model)
    # As bytes in a tensor: all_gather_object would need NumPy.
    own = torch.tensor(list(bytes.fromhex(digest)), dtype=torch.uint8, device=device)
    gathered = [torch.empty_like(own) for _ in range(rv.world_size)]
    dist.all_gather(gathered, own)
    digests = [bytes(t.tolist()).hex() for t in gathered]
    result = None
    if rv.rank == 0:
        threads = None if cuda else torch.get_num_threads()
        result = result_fields(
            device=device_type,
            ranks=rv.world_size,
            nodes=rv.nnodes,
            batch_per_rank=args.batch_per_gpu,
            steps=timer.timed_steps,
            seconds=seconds[0].item(),
            precision=precision,
            arch=args.arch,
            image_size=args.image_size,
            torch_version=torch.__version__,
            device_name=torch.cuda.get_device_name(device) if cuda else cpu_name(_read("/proc/cpuinfo")),
            threads=threads,
        )
        differing = unequal_ranks(digests)
        result.update(params_equal=not differing, params_checksum=checksum, params_digests=digests)
        result.update(loss_fields(*(loss_means / rv.world_size).tolist(), losses.window))
        if differing:
            print(
                f"train_resnet50: the parameters of rank(s) {', '.join(map(str, differing))} differ from rank 0's "
                "after training (DDP replicas must stay equal)",
                file=sys.stderr,
                flush=True,
            )
        if staged is not None:
            result.update(stage_fields(staged, seconds[1].item()))
    dist.destroy_process_group()
    return result


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


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
    if args.threads is not None:  # before PyTorch loads its OpenMP, which reads it once
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(args.threads)
    gpu_step = args.device == "cuda" or (args.device == "auto" and cuda_visible(os.environ))
    try:
        rv = slurmenv.from_slurm(os.environ, gpus=gpu_step)
    except slurmenv.SlurmEnvError as exc:
        print(f"train_resnet50: {exc}", file=sys.stderr)
        return 2
    needed = "PyTorch" if args.data == "synthetic" else "PyTorch and torchvision"
    try:
        import torch

        if args.data != "synthetic":
            import torchvision  # noqa: F401
    except ImportError as exc:
        print(
            f"train_resnet50: {needed} {'is' if args.data == 'synthetic' else 'are'} needed ({exc}): load the "
            "framework module or activate an environment that has it",
            file=sys.stderr,
        )
        return 2
    try:
        device_type = choose_device(args.device, os.environ, torch.cuda.is_available)
    except DeviceError as exc:
        print(f"train_resnet50: {exc}", file=sys.stderr)
        return 2
    if gpu_step and device_type == "cpu" and rv.rank == 0:
        print(
            f"train_resnet50: CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')} but PyTorch "
            f"{torch.__version__} finds no GPU: training on the CPUs",
            file=sys.stderr,
            flush=True,
        )
    staged = None
    if args.stage:
        try:
            staged = stage_data(args, rv)
        except hal_stage.StageError as exc:
            print(f"train_resnet50: --stage: {exc}", file=sys.stderr)
            return 2
    result = train(args, rv, device_type, staged)
    if result is not None:
        print(result_line(result), flush=True)
        if not result["params_equal"]:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
