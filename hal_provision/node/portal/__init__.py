"""The web portal's pieces that run outside hal-provision: the JupyterHub spawner (spawner.py,
installed by the portal role into the hub's virtualenv as the module hal_portal)."""
