#!/usr/bin/env python3
"""Turns the user-agent rules of a `ua-parser-builtins` wheel (PyPI) back into uap-core's
`regexes.yaml`.

ua-parser-builtins is built monthly from uap-core's default branch: its build reads
uap-core's regexes.yaml and writes every rule, in file order, as a call such as
`UserAgentParser(regex, family_replacement, v1_replacement, ...)` into
`ua_parser_builtins/regexes.py` (and the same arguments into matchers.py and lazy.py),
with the uap-core commit in the wheel's `REVISION` file. The arguments are, per section:

  user_agent_parsers: regex, family_replacement, v1_replacement .. v4_replacement
  os_parsers:         regex, os_replacement, os_v1_replacement .. os_v4_replacement
  device_parsers:     regex, regex_flag, device_replacement, brand_replacement, model_replacement

each the YAML value or None when the rule does not set it, trailing Nones dropped. This
script reads those calls as literals (the module is parsed with `ast`, never run), checks
that the three generated modules agree, and writes the rules back as YAML in the same order
with the same values. A key that was None is left out, which every uap parser reads the
same as an absent key.

Standard library only.

  wheel2yaml.py WHEEL SHA256 REVISION OUTDIR

checks the wheel's sha256 and that its REVISION names the expected uap-core commit, then
writes OUTDIR/regexes.yaml and OUTDIR/REVISION (OUTDIR must exist). Wheels from before
202601 carry no REVISION file: pass "-" for those.
"""

import ast
import hashlib
import io
import os
import sys
import zipfile

SECTIONS = {
    # section: (call name in regexes.py, call name in matchers.py / lazy.py, YAML keys)
    "user_agent_parsers": (
        "UserAgentParser",
        "UserAgentMatcher",
        ["regex", "family_replacement", "v1_replacement", "v2_replacement",
         "v3_replacement", "v4_replacement"],
    ),
    "os_parsers": (
        "OSParser",
        "OSMatcher",
        ["regex", "os_replacement", "os_v1_replacement", "os_v2_replacement",
         "os_v3_replacement", "os_v4_replacement"],
    ),
    "device_parsers": (
        "DeviceParser",
        "DeviceMatcher",
        ["regex", "regex_flag", "device_replacement", "brand_replacement",
         "model_replacement"],
    ),
}
LEGACY_NAMES = {
    "USER_AGENT_PARSERS": "user_agent_parsers",
    "OS_PARSERS": "os_parsers",
    "DEVICE_PARSERS": "device_parsers",
}


def fail(msg):
    sys.exit(f"wheel2yaml: {msg}")


def call_args(node, name, where):
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name):
        fail(f"{where}: expected a call of {name}, found {ast.dump(node)[:120]}")
    if node.keywords:
        fail(f"{where}: unexpected keyword arguments in {name}(...)")
    args = [ast.literal_eval(a) for a in node.args]
    for a in args:
        if a is not None and not isinstance(a, str):
            fail(f"{where}: argument {a!r} of {name}(...) is neither a string nor None")
    if not args or args[0] is None:
        fail(f"{where}: {name}(...) without a regex")
    return args


def legacy_rules(source):
    """Sections in file order from regexes.py: [(section, [args, ...]), ...]."""
    out = []
    for stmt in ast.parse(source).body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target = stmt.targets[0]
            if isinstance(target, ast.Name) and target.id in LEGACY_NAMES:
                section = LEGACY_NAMES[target.id]
                if not isinstance(stmt.value, ast.List):
                    fail(f"regexes.py: {target.id} is not a list")
                name = SECTIONS[section][0]
                out.append((section, [call_args(e, name, f"regexes.py {target.id}[{i}]")
                                      for i, e in enumerate(stmt.value.elts)]))
    if sorted(s for s, _ in out) != sorted(SECTIONS):
        fail(f"regexes.py: expected the sections {sorted(SECTIONS)}, found {[s for s, _ in out]}")
    return out


def matcher_rules(source, module):
    """The MATCHERS tuple of matchers.py / lazy.py: {section: [args, ...]}."""
    for stmt in ast.parse(source).body:
        target = getattr(stmt, "target", None) or (stmt.targets[0] if isinstance(stmt, ast.Assign) else None)
        if isinstance(target, ast.Name) and target.id == "MATCHERS":
            value = stmt.value
            if not (isinstance(value, ast.Tuple) and len(value.elts) == 3):
                fail(f"{module}: MATCHERS is not a 3-tuple")
            out = {}
            for section, lst in zip(SECTIONS, value.elts):
                name = SECTIONS[section][1]
                out[section] = [call_args(e, name, f"{module} {section}[{i}]") for i, e in enumerate(lst.elts)]
            return out
    fail(f"{module}: no MATCHERS")


def quote(value, where):
    """A YAML single-quoted scalar: every character literal except '' for a quote."""
    if not value.isprintable():
        fail(f"{where}: {value!r} has a non-printable character; single quotes cannot carry it")
    return "'" + value.replace("'", "''") + "'"


def to_yaml(rules, header):
    out = io.StringIO()
    for line in header:
        out.write(f"# {line}\n" if line else "#\n")
    for section, items in rules:
        keys = SECTIONS[section][2]
        out.write(f"\n{section}:\n")
        for i, args in enumerate(items):
            if len(args) > len(keys):
                fail(f"{section}[{i}]: {len(args)} arguments, at most {len(keys)} expected")
            first = True
            for key, value in zip(keys, args):
                if value is None:
                    continue
                prefix = "  - " if first else "    "
                out.write(f"{prefix}{key}: {quote(value, f'{section}[{i}].{key}')}\n")
                first = False
            out.write("\n")
    return out.getvalue()


def main(argv):
    if len(argv) != 5:
        fail("usage: wheel2yaml.py WHEEL SHA256 REVISION OUTDIR")
    wheel, sha256, revision, outdir = argv[1:]
    with open(wheel, "rb") as f:
        data = f.read()
    got = hashlib.sha256(data).hexdigest()
    if got != sha256.lower():
        fail(f"{wheel}: sha256 {got}, expected {sha256}")
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        names = set(z.namelist())
        for need in ("ua_parser_builtins/regexes.py", "ua_parser_builtins/matchers.py",
                     "ua_parser_builtins/lazy.py"):
            if need not in names:
                fail(f"{wheel}: no {need} in the wheel")
        # Wheels before 202601 (0.15.0 .. 0.18.0.post1, built from uap-core's release tags)
        # have no REVISION; pass "-" as REVISION for those.
        wheel_revision = z.read("REVISION").decode().strip() if "REVISION" in names else "-"
        legacy = legacy_rules(z.read("ua_parser_builtins/regexes.py").decode())
        for module in ("matchers.py", "lazy.py"):
            other = matcher_rules(z.read(f"ua_parser_builtins/{module}").decode(), module)
            if dict(legacy) != other:
                fail(f"{wheel}: regexes.py and {module} disagree")
    if wheel_revision != revision:
        fail(f"{wheel}: built from uap-core {wheel_revision}, expected {revision}")
    version = os.path.basename(wheel).split("-")[1]
    header = [
        "uap-core's regexes.yaml (https://github.com/ua-parser/uap-core)",
        f"revision {revision}",
        "Apache License, Version 2.0; Copyright 2009 Google Inc. (see LICENSE beside this file)",
        "",
        f"Regenerated by Rivulet's scripts/uap-core/wheel2yaml.py from PyPI's ua-parser-builtins {version}",
        f"(sha256 {sha256}): the same rules in the same order with the same values.",
    ]
    text = to_yaml(legacy, header)
    tmp = os.path.join(outdir, ".regexes.yaml.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, os.path.join(outdir, "regexes.yaml"))
    with open(os.path.join(outdir, "REVISION"), "w") as f:
        f.write(revision + "\n")
    counts = ", ".join(f"{len(items)} {section}" for section, items in legacy)
    print(f"wheel2yaml: uap-core {revision} ({counts}) -> {os.path.join(outdir, 'regexes.yaml')}")


if __name__ == "__main__":
    main(sys.argv)
