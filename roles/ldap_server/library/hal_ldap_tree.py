#!/usr/bin/python
# -*- coding: utf-8 -*-
# hal-provision (role ldap_server): make an LDAP subtree equal to the rendered model.
from __future__ import annotations

DOCUMENTATION = r"""
---
module: hal_ldap_tree
short_description: Make the entries of an LDAP directory equal to a list of entries
description:
  - Adds the entries of O(entries) that are missing (parents first), replaces every attribute
    whose value set differs from the model, and deletes the entries below O(managed_subtrees)
    that are not in O(entries) (children first).
  - Attributes named in O(ignored_attributes) are never added, changed or removed (for example
    C(userPassword), which users and administrators set). Operational attributes are never read.
  - Supports check mode (the plan is reported, nothing is written) and diff mode (an LDIF-like
    before/after text per changed entry).
  - Runs on the directory server with python-ldap; binds with SASL EXTERNAL over ldapi:/// as
    root unless O(bind_dn) is given.
options:
  entries:
    description: Entries the directory must hold, each C({dn, attributes}) with lists of string values.
    type: list
    elements: dict
    required: true
  managed_subtrees:
    description:
      - Subtrees owned by the model. Entries strictly below them that are not in O(entries) are deleted.
      - Nothing outside them is ever deleted.
    type: list
    elements: str
    default: []
  ignored_attributes:
    description: Attribute names (case-insensitive) the module never adds, modifies or removes.
    type: list
    elements: str
    default: []
  server_uri:
    description: LDAP URI of the server.
    type: str
    default: ldapi:///
  bind_dn:
    description: DN for a simple bind; without it the module binds with SASL EXTERNAL.
    type: str
  bind_pw:
    description: Password of O(bind_dn).
    type: str
  ca_file:
    description: CA certificate file to verify an ldaps:// server with.
    type: path
requirements: [python-ldap]
"""

EXAMPLES = r"""
- name: Make the directory equal to the rendered model
  hal_ldap_tree:
    entries: "{{ (lookup('ansible.builtin.file', 'ldap-directory.json') | from_json).entries }}"
    managed_subtrees: ["ou=People,dc=example,dc=org", "ou=Groups,dc=example,dc=org"]
    ignored_attributes: [userPassword, shadowLastChange]
"""

RETURN = r"""
added:
  description: DNs added (or that would be added in check mode), parents first.
  type: list
  returned: always
modified:
  description: DN -> names of the attributes replaced or removed.
  type: dict
  returned: always
deleted:
  description: DNs deleted (or that would be deleted), children first.
  type: list
  returned: always
"""

import base64
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

try:
    import ldap
    import ldap.dn
    import ldap.modlist
    import ldap.sasl
except ImportError:
    HAS_LDAP = False
    LDAP_IMPORT_ERROR = traceback.format_exc()
else:
    HAS_LDAP = True
    LDAP_IMPORT_ERROR = None


def normalize_dn(dn):
    """A comparison key for a DN: attribute types and values lower-cased, spacing canonical."""
    return ldap.dn.dn2str([[(t.lower(), v.lower(), f) for t, v, f in rdn] for rdn in ldap.dn.str2dn(dn)])


def depth(dn):
    return len(ldap.dn.str2dn(dn))


def is_below(dn_key, base_key):
    """dn_key lies strictly below base_key (both normalized)."""
    return dn_key != base_key and dn_key.endswith("," + base_key)


def decode(value):
    return value.decode("utf-8", errors="surrogateescape")


def model_attributes(attributes, ignored):
    """{lower name: (name, sorted values)} without ignored attributes and empty ones."""
    out = {}
    for name, values in attributes.items():
        if name.lower() in ignored:
            continue
        if isinstance(values, str):
            values = [values]
        values = sorted({str(v) for v in values})
        if values:
            out[name.lower()] = (name, values)
    return out


def ldif_value(name, value):
    safe = value.isascii() and value.isprintable() and not value.startswith((" ", ":", "<")) and not value.endswith(" ")
    if safe:
        return "%s: %s" % (name, value)
    return "%s:: %s" % (name, base64.b64encode(value.encode("utf-8", errors="surrogateescape")).decode("ascii"))


def ldif(dn, attributes):
    """LDIF-like text of an entry, attributes sorted by name (objectClass first), for diffs."""
    if attributes is None:
        return ""
    lines = ["dn: %s" % dn]
    for key in sorted(attributes, key=lambda k: (k != "objectclass", k)):
        name, values = attributes[key]
        lines.extend(ldif_value(name, v) for v in values)
    return "\n".join(lines) + "\n"


class Directory(object):
    def __init__(self, module):
        self.module = module
        params = module.params
        try:
            self.conn = ldap.initialize(params["server_uri"])
            self.conn.set_option(ldap.OPT_REFERRALS, 0)
            if params["ca_file"]:
                self.conn.set_option(ldap.OPT_X_TLS_CACERTFILE, params["ca_file"])
                self.conn.set_option(ldap.OPT_X_TLS_NEWCTX, 0)
            if params["bind_dn"]:
                self.conn.simple_bind_s(params["bind_dn"], params["bind_pw"] or "")
            else:
                self.conn.sasl_non_interactive_bind_s("EXTERNAL")
        except ldap.LDAPError as e:
            module.fail_json(msg="Cannot bind to %s: %s" % (params["server_uri"], e))

    def read(self, base, scope):
        """{normalized dn: (dn, {lower name: (name, sorted values)})}; a missing base gives {}."""
        try:
            result = self.conn.search_s(base, scope, "(objectClass=*)", ["*"])
        except ldap.NO_SUCH_OBJECT:
            return {}
        out = {}
        for dn, attrs in result:
            if dn is None:  # a referral
                continue
            out[normalize_dn(dn)] = (
                dn,
                dict((name.lower(), (name, sorted(decode(v) for v in values))) for name, values in attrs.items()),
            )
        return out


def plan(desired, current, managed_keys, ignored):
    """The adds, modifications and deletions that make current equal to desired."""
    adds, mods, deletes = [], [], []
    for key, (dn, want) in desired.items():
        if key not in current:
            adds.append((dn, want))
            continue
        have = dict((k, v) for k, v in current[key][1].items() if k not in ignored)
        changes = []
        for attr in sorted(set(want) | set(have)):
            want_values = want[attr][1] if attr in want else []
            have_values = have[attr][1] if attr in have else []
            if want_values != have_values:
                name = want[attr][0] if attr in want else have[attr][0]
                changes.append((name, want_values))
        if changes:
            mods.append((current[key][0], have, want, changes))
    for key, (dn, have) in current.items():
        if key in desired:
            continue
        if any(is_below(key, base) for base in managed_keys):
            deletes.append((dn, dict((k, v) for k, v in have.items() if k not in ignored)))
    adds.sort(key=lambda a: depth(a[0]))
    deletes.sort(key=lambda d: -depth(d[0]))
    return adds, mods, deletes


def main():
    module = AnsibleModule(
        argument_spec=dict(
            entries=dict(type="list", elements="dict", required=True),
            managed_subtrees=dict(type="list", elements="str", default=[]),
            ignored_attributes=dict(type="list", elements="str", default=[]),
            server_uri=dict(type="str", default="ldapi:///"),
            bind_dn=dict(type="str"),
            bind_pw=dict(type="str", no_log=True),
            ca_file=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    if not HAS_LDAP:
        module.fail_json(msg=missing_required_lib("python-ldap (Debian: python3-ldap)"), exception=LDAP_IMPORT_ERROR)

    ignored = set(a.lower() for a in module.params["ignored_attributes"])
    desired = {}
    for entry in module.params["entries"]:
        if "dn" not in entry or not isinstance(entry.get("attributes"), dict):
            module.fail_json(msg="every entry needs a dn and an attributes mapping: %r" % (entry,))
        try:
            key = normalize_dn(entry["dn"])
        except ldap.DECODING_ERROR:
            module.fail_json(msg="invalid DN %r" % entry["dn"])
        if key in desired:
            module.fail_json(msg="DN %s is listed twice" % entry["dn"])
        desired[key] = (entry["dn"], model_attributes(entry["attributes"], ignored))
    managed = module.params["managed_subtrees"]
    managed_keys = [normalize_dn(m) for m in managed]

    directory = Directory(module)
    current = {}
    for base in managed:
        current.update(directory.read(base, ldap.SCOPE_SUBTREE))
    for key, (dn, _) in desired.items():
        if key not in current and not any(key == b or is_below(key, b) for b in managed_keys):
            current.update(directory.read(dn, ldap.SCOPE_BASE))

    adds, mods, deletes = plan(desired, current, managed_keys, ignored)
    changed = bool(adds or mods or deletes)
    result = dict(
        changed=changed,
        added=[dn for dn, _ in adds],
        modified=dict((dn, [name for name, _ in changes]) for dn, _, _, changes in mods),
        deleted=[dn for dn, _ in deletes],
    )
    if module._diff:
        result["diff"] = (
            [dict(before_header=dn, after_header=dn, before="", after=ldif(dn, want)) for dn, want in adds]
            + [
                dict(before_header=dn, after_header=dn, before=ldif(dn, have), after=ldif(dn, want))
                for dn, have, want, _ in mods
            ]
            + [dict(before_header=dn, after_header=dn, before=ldif(dn, have), after="") for dn, have in deletes]
        )

    if changed and not module.check_mode:
        done = None
        try:
            for dn, want in adds:
                done = dn
                directory.conn.add_s(
                    dn,
                    ldap.modlist.addModlist(
                        dict((name, [v.encode("utf-8") for v in values]) for name, values in want.values())
                    ),
                )
            for dn, _, _, changes in mods:
                done = dn
                directory.conn.modify_s(
                    dn,
                    [
                        (ldap.MOD_REPLACE, name, [v.encode("utf-8") for v in values])
                        if values
                        else (ldap.MOD_DELETE, name, None)
                        for name, values in changes
                    ],
                )
            for dn, _ in deletes:
                done = dn
                directory.conn.delete_s(dn)
        except ldap.LDAPError as e:
            result["msg"] = "LDAP operation on %s failed: %s" % (done, e)
            module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
