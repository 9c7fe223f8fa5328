"""The CLI as the tests call it: in process through click's runner, with exceptions not swallowed (an unexpected
one fails the test with its traceback), and the check that a mistake is answered in one error line, exit code 1."""

from __future__ import annotations

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
