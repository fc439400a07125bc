"""Programs that run ON the cluster: the distributed ResNet-50 recipe and its helpers.

The `recipes` Ansible role copies these files (not this package) into the shared software
tree, e.g. PREFIX/resnet50/ (recipes.prefix in the model), beside the job scripts rendered for
the cluster (hal_provision/render/recipes.py). There they run as plain scripts, one process per
srun task, where hal-provision is not installed:

    python3 PREFIX/resnet50/wiring_probe.py --timeout 60
    python3 PREFIX/resnet50/train_resnet50.py --data synthetic --steps-per-epoch 100
    python3 PREFIX/resnet50/scaling.py report ~/resnet50-scaling

so every module imports its siblings both ways (as `hal_provision.node.recipes.x` here, as `x` from
the script's own directory there).

- slurmenv: one srun task's rank, local rank, world, rendezvous address and GPU, from Slurm's
  environment; the single source both the recipe and the probe use.
- wiring_probe: proves that launch without PyTorch: every rank reaches rank 0 over TCP and
  opens its own GPU's device file.
- train_resnet50: PyTorch DistributedDataParallel ResNet-50 (HAL, PEARC '20).
- hal_stage: `hal-stage`, a data set copied from the shared file system to the job's local
  scratch once per node (one task copies, the node's others wait); train_resnet50 --stage.
- scaling: runs the recipe once per virtual partition and reports throughput and scaling
  efficiency (a table, and a PNG plot with matplotlib).

Standard library only, except train_resnet50 (PyTorch and torchvision at run time, imported
only where used) and scaling's plot (matplotlib).
"""
