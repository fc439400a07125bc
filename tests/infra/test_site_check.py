"""site.yml in check mode finds nothing to change on a converged cluster."""

from __future__ import annotations

from deployed import changed_tasks, deployed, parse_recap, run_site, tail

D = deployed()


def test_site_check_mode_changes_nothing():
    proc = run_site(D.inventory, "--check", "--diff")
    recap = parse_recap(proc.stdout)
    assert set(recap) == set(D.hostvars), (
        f"PLAY RECAP lists {sorted(recap)}, the inventory {sorted(D.hostvars)}\n{tail(proc.stdout)}"
    )
    dirty = {h: r for h, r in recap.items() if r.get("changed") or r.get("failed") or r.get("unreachable")}
    assert proc.returncode == 0 and not dirty, (
        f"ansible-playbook --check --diff site.yml: exit {proc.returncode}, hosts not clean: {dirty}\n"
        + "\n".join(changed_tasks(proc.stdout))
        + "\n"
        + tail(proc.stdout, 120)
    )
