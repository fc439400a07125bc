"""slurmdbd parses the rendered slurmdbd.conf.

There is no MariaDB here, so slurmdbd is run until it has read its configuration, loaded
accounting_storage/mysql and tried the database; a key it does not know, a bad value or a
wrong file mode would have stopped it before that ("fatal: Could not open/read/parse").
Not exercised: the database connection itself (StoragePass is a deploy-time secret), the
schema, AccountingStorageTRES=gres/gpu and QOS creation, which all need a live database.
"""

from __future__ import annotations

import pytest

from hal_provision.hostlist import nodeset

from .conftest import CLUSTER_FILES, load_cluster
from .slurm_harness import run_slurmdbd_until_storage

pytestmark = pytest.mark.acceptance

# No database: the MySQL client cannot connect. A database that refuses the user also
# proves the file was read; one that accepts it starts slurmdbd.
REACHED_STORAGE = ("mysql_real_connect failed", "slurmdbd version")


@pytest.mark.parametrize("name", list(CLUSTER_FILES))
def test_slurmdbd_conf_is_parsed_up_to_the_database(name, make_scratch):
    cluster = load_cluster(name)
    scratch = make_scratch(cluster)
    log = run_slurmdbd_until_storage(scratch, nodeset(cluster.services.slurmdbd)[0], REACHED_STORAGE)
    assert "fatal" not in log, log
    assert any(marker in log for marker in REACHED_STORAGE), log


def test_unknown_key_stops_slurmdbd(make_scratch):
    """Negative control: slurmdbd's parser is strict, so the test above means something."""
    cluster = load_cluster("hal")
    scratch = make_scratch(cluster)
    with open(scratch.conf_dir / "slurmdbd.conf", "a") as f:
        f.write("StorageEverything=yes\n")
    log = run_slurmdbd_until_storage(scratch, nodeset(cluster.services.slurmdbd)[0], REACHED_STORAGE)
    assert "Could not open/read/parse slurmdbd.conf" in log, log
