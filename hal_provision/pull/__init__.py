"""Pull mode's controller side: `bundle` (what a node converges itself from) and `fleet` (the
nodes' drift as the controller sees it). The node side, hal-converge, lives in
hal_provision/node/converge.py."""
