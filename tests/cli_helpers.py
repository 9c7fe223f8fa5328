"""The CLI as the tests call it: in process through click's runner, with exceptions not swallowed (an unexpected
one fails the test with its traceback), and the check that a mistake is answered in one error line, exit code 1."""

from __future__ import annotations

import re

from click.testing import CliRunner

from vitdeploy.cli import cli


def run(*args: str) -> tuple[int, str]:
    """(exit code, output) of ``vitdeploy ARGS``."""
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def assert_user_error(code: int, output: str, *needles: str) -> None:
    """Exit code 1, no traceback, exactly one ``error:`` line, holding every one of ``needles``."""
    assert code == 1, output
    assert "Traceback" not in output
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, output
    for needle in needles:
        assert needle in errors[0], output


def assert_calibrated_within(output: str, precision: str, cosine_min: float,
                             against: tuple[str, ...] = ("FP32 ONNX", "eager official")) -> None:
    """``vitdeploy calibrate``'s output says each parity line (``parity vs FP32 ONNX``, ``parity vs eager
    official``) is within ``precision``'s budget with a worst cosine of at least ``cosine_min``."""
    for what in against:
        found = re.search(rf"parity vs {what}: worst cosine ([0-9.]+).*within '{precision}'", output)
        assert found and float(found.group(1)) >= cosine_min, output
