"""A real IPMI-over-LAN BMC for the tests, on pyghmi's BMC server (what virtualbmc builds on):
`python ipmi_bmc.py STATE USER PASSWORD ADDRESS` answers RMCP+ (ipmitool -I lanplus) on port 623
of ADDRESS, keeps the chassis power and the last boot-device request, writes them to the JSON
file STATE after every change ({"power", "bootdev", "persistent"}) and prints "ready". One
process per BMC, as virtualbmc runs them: pyghmi's server loop answers a second BMC of the same
process only once the first has been spoken to. Chassis control as real BMCs do it: a power
cycle of a machine that is off is refused (completion code 0xd5, "not in present state")."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pyghmi.ipmi import bmc

NOT_IN_PRESENT_STATE = 0xD5


class Machine(bmc.Bmc):
    def __init__(self, authdata: dict, address: str, state: Path) -> None:
        super().__init__(authdata, port=623, address=address)
        self.state = state
        self.board = {"power": "off", "bootdev": None, "persistent": None}
        self._save()

    def _save(self) -> None:
        tmp = self.state.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.board, sort_keys=True))
        tmp.replace(self.state)

    def _set(self, **changes) -> None:
        self.board.update(changes)
        self._save()

    def get_power_state(self) -> str:
        return self.board["power"]

    def power_on(self) -> None:
        self._set(power="on")

    def power_off(self) -> None:
        self._set(power="off")

    def power_cycle(self):
        if self.get_power_state() == "off":
            return NOT_IN_PRESENT_STATE
        self._set(power="on")

    def get_boot_device(self) -> str:
        return self.board["bootdev"] or "default"

    def set_boot_device(self, bootdevice: str) -> None:
        self._set(bootdev=bootdevice)

    def set_system_boot_options(self, request, session):
        # Parameter 5 (boot flags): data[1] bit 6 is "persistent", data[2] the device; pyghmi's
        # own handler keeps the device only, so the flag is recorded here.
        if request["data"][0] == 5:
            self.board["persistent"] = bool(request["data"][1] & 0x40)
        return super().set_system_boot_options(request, session)


def main(argv: list[str]) -> None:
    state, user, password, address = argv
    Machine({user: password}, address, Path(state))
    print("ready", flush=True)
    bmc.Bmc.listen(timeout=30)


if __name__ == "__main__":
    main(sys.argv[1:])
