"""The CLI run in this process, for the CLI tests of every folder: one runner, so that every
test sees the exit status, stdout and stderr the same way."""

from __future__ import annotations

import io
import sys
from collections.abc import Callable

import pytest

from logmarshal.cli.main import main

#: ``cli(*argv, stdin=None)`` -> (exit status, stdout, stderr)
Cli = Callable[..., tuple[int, str, str]]


def in_process_cli(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *, stdin: str | None = None
) -> Cli:
    """``main(argv)`` in this process; returns (exit status, stdout, stderr) of that call only.

    ``stdin`` is what a command reads: given to the runner, the default of every call; given
    to a call, for that call; neither, whatever ``sys.stdin`` is (pytest's refuses reads)."""
    default = stdin

    def invoke(*argv: str, stdin: str | None = None) -> tuple[int, str, str]:
        text = default if stdin is None else stdin
        if text is not None:
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
        capsys.readouterr()  # what came before this call is not its output
        try:
            code = main(list(argv))
        except SystemExit as exit_:  # argparse usage errors
            code = exit_.code
        out, err = capsys.readouterr()
        return code, out, err

    return invoke
