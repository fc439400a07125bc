"""Action gpfs_tuning: bring Spectrum Scale's settings to the rendered tuning, changing only differences.

Runs on the controller, where hal-provision is installed: it reads `mmlsconfig -Y` on the
admin node, computes the plan with hal_provision.model.gpfs_plan (the same code as
`hal-provision storage plan`), and unless in check mode (or apply=false) runs the plan's
mmchconfig commands there. Returns changed, a before/after diff of the managed settings, the
commands, and `restart`: the scopes ('cluster' or node classes) whose daemons must restart
for a change to take effect.

Options: desired (controller path of the rendered tuning.json), mm_bin (directory of the mm
commands on the node, default /usr/lpp/mmfs/bin), apply (bool, default true).
"""

from __future__ import annotations

import json
import shlex

from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("desired", "mm_bin", "apply"))

    def _run_on_node(self, argv: list[str]) -> dict:
        return self._low_level_execute_command(shlex.join(argv), sudoable=True)

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        try:
            from hal_provision.model import gpfs_plan as gpfs
        except ImportError as exc:
            raise AnsibleActionFail(
                f"hal-provision is not importable by the controller's Python ({exc}); "
                "install it (pip install -e .) for the Python that runs Ansible"
            ) from None
        args = self._task.args
        if "desired" not in args:
            raise AnsibleActionFail("gpfs_tuning needs desired: the rendered tuning.json")
        mm_bin = args.get("mm_bin", "/usr/lpp/mmfs/bin").rstrip("/")
        apply = boolean(args.get("apply", True), strict=True)
        try:
            with open(args["desired"], encoding="utf-8") as handle:
                desired = json.load(handle)["scopes"]
        except (OSError, ValueError, KeyError) as exc:
            raise AnsibleActionFail(f"cannot read the rendered tuning {args['desired']}: {exc}") from None

        listed = self._run_on_node([f"{mm_bin}/mmlsconfig", "-Y"])
        if listed["rc"] != 0:
            raise AnsibleActionFail(
                f"mmlsconfig -Y failed (exit {listed['rc']}): {listed['stderr'] or listed['stdout']}"
            )
        try:
            plan = gpfs.plan(desired, gpfs.parse_mmlsconfig(listed["stdout"]))
        except gpfs.MmlsconfigError as exc:
            raise AnsibleActionFail(str(exc)) from None
        doc = plan.to_json()
        result.update(
            changed=doc["changed"],
            changes=[c["text"] for c in doc["changes"]],
            commands=doc["commands"],
            restart=doc["restart"],
            deferred=doc["deferred"],
            overrides=doc["overrides"],
        )
        if doc["changed"]:
            result["diff"] = {"before_header": "mmlsconfig -Y", "after_header": "rendered tuning.json", **doc["diff"]}
        if self._task.check_mode or not apply or not doc["changed"]:
            return result
        applied = []
        for argv in doc["commands"]:
            ran = self._run_on_node([f"{mm_bin}/{argv[0]}", *argv[1:]])
            if ran["rc"] != 0:
                result.update(
                    failed=True,
                    applied=applied,
                    msg=f"{' '.join(argv)} failed (exit {ran['rc']}): {ran['stderr'] or ran['stdout']}",
                )
                return result
            applied.append(" ".join(argv))
        result["applied"] = applied
        return result
