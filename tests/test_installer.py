"""scripts/lib/pip_to_uv.py: uv is handed exactly where this machine's pip finds packages, or is not used."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "lib" / "pip_to_uv.py"
spec = importlib.util.spec_from_file_location("pip_to_uv", SCRIPT)
pip_to_uv = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pip_to_uv)

#: `pip config list` on the machines this project runs on (2026-11-29): a pip.conf and PIP_* variables
THIS_KIND = """:env:.cert='/etc/ssl/certs/ca-certificates.crt'
:env:.default-timeout='180'
:env:.disable-pip-version-check='1'
:env:.find-links='/opt/wheels'
global.cert='/etc/ssl/certs/ca-certificates.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/opt/wheels'
""".splitlines()


def test_the_indexes_links_constraints_and_certificate_pip_uses() -> None:
    cert, args = pip_to_uv.uv_arguments(THIS_KIND)
    assert cert == "/etc/ssl/certs/ca-certificates.crt"
    pairs = list(zip(args[::2], args[1::2]))
    assert sorted(pairs) == sorted([("--constraint", "/etc/xdg/pip/constraints.txt"),
                                    ("--extra-index-url", "file:///opt/pypi/simple"),
                                    ("--extra-index-url", "file:///opt/pypi-more/simple"),
                                    ("--find-links", "/opt/wheels")])


def test_the_environment_wins_over_pips_files_as_in_pip() -> None:
    cert, args = pip_to_uv.uv_arguments(["global.index-url='https://files.example/simple'",
                                         ":env:.index-url='https://mirror.example/simple'", "global.no-index='false'",
                                         "download.find-links='/elsewhere'"])
    assert (cert, args) == ("", ["--index-url", "https://mirror.example/simple"])


@pytest.mark.parametrize("line", ["global.only-binary=':all:'", ":env:.pre='1'", "install.proxy='http://p:3128'"])
def test_a_setting_uv_would_not_follow_is_named_and_pip_installs(line: str) -> None:
    with pytest.raises(ValueError, match=f"pip's '{line.split('=')[0]}' setting has no uv translation"):
        pip_to_uv.uv_arguments([*THIS_KIND, line])
