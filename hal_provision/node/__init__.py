"""Programs the roles copy onto cluster nodes: the monitoring collectors, hal-healthcheck, the portal's
spawner, the training recipes, the wrapper suite (swrun, swbatch, swqueue) and the storage benchmark.

Each runs where it lands without this package: standard library only, except the spawner (run by
JupyterHub, with batchspawner) and the recipes' trainer and plot (PyTorch, matplotlib), and none
imports anything of the controller (tests/unit/test_layers.py holds that).
"""
