"""How the library talks to people while it works: one ``echo`` callable per call, silent unless given.

Long library calls (export, build, calibrate, validate, benchmark) take ``echo: Echo = quiet``: a function
that takes one line. The CLI passes one that prints (``click.echo``); Python callers pass ``print`` or a
logger's method, or nothing. Progress bars with an ETA are the CLI's (:mod:`vitdeploy.cli.progress`); the
library calls a ``progress(stage, done, total)`` callable where it has one.
"""

from __future__ import annotations

from collections.abc import Callable

#: One line for a person.
Echo = Callable[[str], None]


def quiet(_: str) -> None:
    """The default ``echo``: says nothing."""


__all__ = ["Echo", "quiet"]
