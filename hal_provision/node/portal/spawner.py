"""hal_portal: JupyterHub's spawner for the portal's app catalogue.

The portal role installs this file into the hub's virtualenv as the module ``hal_portal``;
it needs only JupyterHub, batchspawner and the standard library (nothing of hal-provision).
The catalogue comes from the rendered jupyterhub_config.py (``c.CatalogueSpawner.apps``):
for every app its title, kind, launch script, default URL and, for each virtual partition it
offers, the Slurm options the wrapper suite resolved for it and the longest session.

The form offers one choice of app x virtual partition and a number of hours; the batch script
is the catalogue's options, --time from the hours, and the app's launch script in front of
batchspawner's single-user command, run by srun as the user (batchspawner's sudo prefix).
"""

from __future__ import annotations

import html
import re

from batchspawner import SlurmSpawner
from traitlets import Dict

CHOICE = re.compile(r"^([A-Za-z][A-Za-z0-9_-]*):([A-Za-z][A-Za-z0-9_-]*)$")


class CatalogueSpawner(SlurmSpawner):
    apps = Dict(
        config=True,
        help="The rendered catalogue: app name -> title, kind, launch, default_url, "
        "default_hours, virtual_partitions {name: {description, max_hours, options}}.",
    )

    # ---- the form ----------------------------------------------------------------------------

    def _options_form_default(self):
        return self.form_html

    def form_html(self, spawner=None) -> str:
        groups = []
        first = True
        for name, app in self.apps.items():
            opts = []
            for vp, spec in app["virtual_partitions"].items():
                label = f"{app['title']} on {vp}: {spec['description']} (up to {spec['max_hours']} h)"
                selected = " selected" if first else ""
                first = False
                opts.append(
                    f'<option value="{html.escape(name)}:{html.escape(vp)}"{selected}>{html.escape(label)}</option>'
                )
            title = app["title"] + (f" ({app['description']})" if app.get("description") else "")
            groups.append(f'<optgroup label="{html.escape(title)}">{"".join(opts)}</optgroup>')
        default_hours = next(iter(self.apps.values()))["default_hours"] if self.apps else 1
        return (
            '<div class="form-group">'
            '<label for="hal-session">Application and resources</label>'
            f'<select class="form-control" id="hal-session" name="session">{"".join(groups)}</select>'
            "</div>"
            '<div class="form-group">'
            '<label for="hal-hours">Hours</label>'
            f'<input class="form-control" type="number" id="hal-hours" name="hours" min="1" value="{default_hours}">'
            "</div>"
        )

    def options_from_form(self, formdata):
        """{'app', 'virtual_partition', 'hours'}; a ValueError (shown on the spawn page) for a
        choice outside the catalogue or hours beyond its limit."""
        choice = (formdata.get("session") or [""])[0]
        hours_text = (formdata.get("hours") or [""])[0].strip()
        return self.validated(choice, hours_text)

    def validated(self, choice: str, hours_text: str) -> dict:
        m = CHOICE.match(choice)
        if not m or m.group(1) not in self.apps:
            raise ValueError(f"unknown application choice {choice!r}")
        app_name, vp = m.groups()
        app = self.apps[app_name]
        if vp not in app["virtual_partitions"]:
            raise ValueError(
                f"{app['title']} is not offered on {vp}; choose one of {', '.join(app['virtual_partitions'])}"
            )
        limit = app["virtual_partitions"][vp]["max_hours"]
        if not hours_text:
            hours = app["default_hours"]
        elif not hours_text.isdigit() or not 1 <= int(hours_text) <= limit:
            raise ValueError(
                f"hours must be a whole number from 1 to {limit} for {app['title']} on {vp}; got {hours_text!r}"
            )
        else:
            hours = int(hours_text)
        return {"app": app_name, "virtual_partition": vp, "hours": hours}

    # ---- the job -----------------------------------------------------------------------------

    def _session(self) -> tuple[dict, dict, int]:
        opts = self.user_options or {}
        if not opts:  # started through the API without options: the form's preselected choice
            app_name = next(iter(self.apps))
            vp = next(iter(self.apps[app_name]["virtual_partitions"]))
            opts = {"app": app_name, "virtual_partition": vp, "hours": self.apps[app_name]["default_hours"]}
        checked = self.validated(f"{opts.get('app')}:{opts.get('virtual_partition')}", str(opts.get("hours", "")))
        app = self.apps[checked["app"]]
        return app, app["virtual_partitions"][checked["virtual_partition"]], checked["hours"]

    async def start(self):
        app, _spec, _hours = self._session()
        self.default_url = app["default_url"]
        return await super().start()

    def cmd_formatted_for_batch(self):
        app, _spec, _hours = self._session()
        return " ".join([app["launch"], super().cmd_formatted_for_batch()])

    async def _get_batch_script(self, **subvars):
        app, spec, hours = self._session()
        name = next(n for n, a in self.apps.items() if a is app)
        lines = [
            "#!/bin/bash",
            f"#SBATCH --job-name=portal-{name}",
            f"#SBATCH --output={subvars['homedir']}/jupyterhub_slurmspawner_%j.log",
            f"#SBATCH --chdir={subvars['homedir']}",
            f"#SBATCH --export={subvars['keepvars']}",
            f"#SBATCH --time={hours:02d}:00:00",
            *(f"#SBATCH {opt}" for opt in spec["options"]),
            "set -euo pipefail",
            "trap 'echo SIGTERM received' TERM",
            f"{subvars['srun']} {subvars['cmd']}".strip(),
            'echo "jupyterhub-singleuser ended gracefully"',
        ]
        return "\n".join(lines) + "\n"
