"""Print the ``uv pip install`` arguments that find packages where this machine's pip does, one per line.

uv reads no pip configuration, so scripts/lib/venv.sh asks pip (``pip config list``: its files and its ``PIP_*``
variables) and hands uv the same indexes, links, constraints and certificate. The first line is the certificate file
(empty: none configured), for uv's ``SSL_CERT_FILE``. A setting this does not translate exits 3 and names it: the
caller then installs with pip itself, as before, so no setting is silently dropped.
"""

from __future__ import annotations

import shlex
import subprocess
import sys

#: pip settings that change what is installed from where, and the uv flag each becomes (None: handled apart)
TRANSLATED = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links",
              "constraint": "--constraint", "cert": None, "no-index": "--no-index"}
#: pip settings that change nothing uv installs (its output, timeouts, its own version check)
IGNORED = {"default-timeout", "timeout", "disable-pip-version-check", "progress-bar", "root-user-action", "quiet",
           "no-cache-dir", "no-color", "verbose", "retries", "no-input"}


def uv_arguments(config_lines: list[str]) -> tuple[str, list[str]]:
    """(certificate file, uv arguments) for ``pip config list``'s lines; ValueError names a setting not translated."""
    values: dict[str, str] = {}
    rank = {"global": 0, "install": 1, ":env:": 2}  # as pip reads them: the environment wins over its files
    settings = []
    for line in config_lines:
        if "=" not in line:
            continue
        name, value = line.split("=", 1)
        scope, key = name.rsplit(".", 1) if "." in name else ("", name)
        if scope not in rank:
            continue  # another command's section (pip download, pip wheel, ...)
        settings.append((rank[scope], name, key, value.strip().strip("'\"")))
    for _, name, key, value in sorted(settings):
        if key in IGNORED:
            continue
        if key not in TRANSLATED:
            raise ValueError(f"pip's '{name}' setting has no uv translation here")
        values[key] = value
    cert = values.pop("cert", "")
    args: list[str] = []
    for key, value in values.items():
        flag = TRANSLATED[key]
        if key == "no-index":
            if value.lower() in ("1", "true", "yes", "on"):
                args.append(flag)
            continue
        for item in shlex.split(value):
            args += [flag, item]
    return cert, args


def main() -> int:
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    if listed.returncode != 0:
        print(f"pip config list failed: {listed.stderr.strip()[:200]}", file=sys.stderr)
        return 3
    try:
        cert, args = uv_arguments(listed.stdout.splitlines())
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 3
    print(cert)
    print("\n".join(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
