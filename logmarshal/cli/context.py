"""What every CLI command shares: the output mode, where its data comes from, and a lazily
opened cluster.

Every command declares a :class:`DataSource`: whether it honours ``--bootstrap`` and
``--data-dir`` (docs/architecture.md, "Connections": embedded or network) or refuses them with its
reason. ``main`` applies the declaration before the command runs, so no command can ignore
either option in silence.
"""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass

from ..cluster import Cluster
from ..connect import DATA_DIR_ENV, connect, default_data_dir
from ..errors import LogmarshalError, NetworkError

__all__ = [
    "CREATES",
    "READS",
    "CliError",
    "Context",
    "DataSource",
    "commands_of",
    "declare",
    "describe_json",
    "parse_bootstrap",
    "refuse_json",
]

#: how long one bootstrap address may take to accept a TCP connection
PROBE_TIMEOUT_S = 5.0


class CliError(LogmarshalError):
    """A mistake in how the command was called; printed as one line."""


@dataclass(frozen=True)
class DataSource:
    """Where a command's data comes from, and what it does with each connection option.

    ``refuse_bootstrap`` / ``refuse_data_dir``: the reason the option is refused (None: it is
    honoured). ``existing``: an embedded data directory must exist already (a command that
    only reads would otherwise create an empty one and report nothing, hiding a typo).
    ``help``: the sentence ``--help`` shows under "where the data comes from"; ``short``:
    the same in a few words, for the overview in ``logmarshal --help``.
    """

    help: str
    short: str = ""
    existing: bool = True
    refuse_bootstrap: str | None = None
    refuse_data_dir: str | None = None

    def admit(self, bootstrap: str | None, data_dir: str | None, command: str = "") -> None:
        """Raise CliError for an option this command refuses (``command``: its name)."""
        who = command or "this command"
        if bootstrap is not None and self.refuse_bootstrap is not None:
            raise CliError(f"{who} refuses --bootstrap: {self.refuse_bootstrap}")
        if data_dir is not None and self.refuse_data_dir is not None:
            raise CliError(f"{who} refuses --data-dir: {self.refuse_data_dir}")


_DEFAULT_DIR = f"--data-dir DIR (default: ${DATA_DIR_ENV}, else ./data)"

#: a command that works on data already in the cluster
READS = DataSource(
    help=(
        f"the brokers named by --bootstrap HOST:PORT,..., else the embedded data directory "
        f"{_DEFAULT_DIR}, which must exist"
    ),
    short="--bootstrap, or an existing --data-dir",
)
#: a command that may be the first to write: it creates a missing data directory
CREATES = DataSource(
    help=(
        f"the brokers named by --bootstrap HOST:PORT,..., else the embedded data directory "
        f"{_DEFAULT_DIR}, created if missing"
    ),
    short="--bootstrap, or --data-dir (created)",
    existing=False,
)


#: a command that works on the files of an embedded data directory itself
FILES = DataSource(
    help=f"the embedded data directory {_DEFAULT_DIR}, which must exist (a broker's: stop it)",
    short="an existing --data-dir",
    refuse_bootstrap="it works on the files of a data directory; run it where they are",
)


def declare(parser: argparse.ArgumentParser, source: DataSource) -> None:
    """Attach ``source`` to a command: ``main`` enforces it, ``--help`` states it."""
    command = (
        parser.prog.partition(" ")[2] or parser.prog
    )  # "logmarshal topic list" -> "topic list"
    parser.set_defaults(data_source=source, command_name=command)
    _add_note(parser, f"where the data comes from: {source.help}.")


def _add_note(parser: argparse.ArgumentParser, note: str) -> None:
    parser.epilog = f"{parser.epilog}\n\n{note}" if parser.epilog else note
    parser.formatter_class = _Paragraphs


class _Paragraphs(argparse.HelpFormatter):
    """Each note a paragraph of its own (argparse's default fills the epilog as one: a
    second note ran on after the first's full stop)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n\n".join(
            super(_Paragraphs, self)._fill_text(part, width, indent) for part in text.split("\n\n")
        )


def describe_json(parser: argparse.ArgumentParser, document: str) -> None:
    """State in ``--help`` what ``--json`` prints for a command whose JSON is not obvious."""
    _add_note(parser, f"--json: {document}.")


def refuse_json(parser: argparse.ArgumentParser, reason: str) -> None:
    """A command with no JSON document to print: ``main`` refuses ``--json`` with ``reason``
    (rather than ignore it), and ``--help`` says so."""
    parser.set_defaults(json_refusal=reason)
    _add_note(parser, f"--json is refused: {reason}.")


def commands_of(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every runnable command under ``parser``, as ("group reset", its parser)."""
    subcommands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subcommands:
        yield " ".join(path), parser
        return
    for action in subcommands:
        for name, sub in action.choices.items():
            yield from commands_of(sub, (*path, name))


def parse_bootstrap(text: str) -> list[tuple[str, int]]:
    """``HOST:PORT[,HOST:PORT...]`` (``[v6]:PORT`` too) into addresses; CliError names the bad one."""
    addresses = []
    items = [item.strip() for item in text.split(",")]
    if not any(items):
        raise CliError("--bootstrap needs at least one HOST:PORT, e.g. 127.0.0.1:9092")
    for item in items:
        host, sep, port_text = item.rpartition(":")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        problem = None
        if not sep or not host or any(c.isspace() for c in host) or "/" in host:
            problem = "is not HOST:PORT"
        elif not (port_text.isascii() and port_text.isdigit()) or not 0 < int(port_text) < 65536:
            problem = f"has no valid port ({port_text!r}; 1-65535)"
        if problem:
            raise CliError(
                f"--bootstrap: {item!r} {problem} (e.g. 127.0.0.1:9092; several brokers: "
                "HOST:PORT,HOST:PORT)"
            )
        addresses.append((host, int(port_text)))
    return addresses


def _probe(addresses: list[tuple[str, int]], timeout: float) -> None:
    """Fail in seconds, naming each address and why, when no broker accepts a connection.

    librdkafka would retry for its whole metadata timeout and then report a transport failure
    without the reason (refused, unknown host, timed out); one TCP connection per address says
    which, and is bounded by ``timeout`` each.
    """
    failures = []
    for host, port in addresses:
        named = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return
        except socket.gaierror as exc:
            failures.append(f"{named}: unknown host ({exc.strerror})")
        except TimeoutError:
            failures.append(f"{named}: no answer within {timeout:g} s")
        except OSError as exc:
            failures.append(f"{named}: {(exc.strerror or str(exc)).lower()}")
    raise CliError("cannot reach any broker of --bootstrap: " + "; ".join(failures))


class Context:
    """``bootstrap`` (brokers) and ``data_dir`` (embedded) exclude each other.

    ``existing``: the embedded data directory must already exist when the cluster is opened.
    """

    def __init__(
        self,
        data_dir: str | None,
        as_json: bool,
        bootstrap: str | None = None,
        *,
        existing: bool = False,
        probe_timeout: float = PROBE_TIMEOUT_S,
    ) -> None:
        if bootstrap is not None and data_dir is not None:
            raise CliError(
                "--bootstrap and --data-dir exclude each other: commands use either brokers "
                "or an embedded data directory"
            )
        self.addresses = None if bootstrap is None else parse_bootstrap(bootstrap)
        self.bootstrap = bootstrap
        self.explicit_data_dir = data_dir
        self.data_dir = data_dir or default_data_dir()
        self.as_json = as_json
        self.existing = existing
        self.probe_timeout = probe_timeout
        self._cluster: Cluster | None = None

    def where(self) -> str:
        """The connection in words, for messages."""
        if self.bootstrap is not None:
            return f"brokers at {self.bootstrap}"
        return f"embedded data directory {self.data_dir}"

    def check_data_dir(self) -> None:
        """CliError when the embedded directory is needed but missing or not a directory."""
        path = self.data_dir
        if os.path.exists(path) and not os.path.isdir(path):
            raise CliError(f"data directory {path} is not a directory")
        if self.existing and not os.path.isdir(path):
            how = (
                "given by --data-dir"
                if self.explicit_data_dir is not None
                else f"${DATA_DIR_ENV}"
                if os.environ.get(DATA_DIR_ENV)
                else "the default; give --data-dir DIR or --bootstrap HOST:PORT"
            )
            raise CliError(f"no data directory at {path} ({how}): nothing to read there")

    def connect(self) -> Cluster:
        """A new connection as the options say (commands that need several, like the demo)."""
        if self.bootstrap is not None:
            assert self.addresses is not None
            _probe(self.addresses, self.probe_timeout)
            try:
                return connect(bootstrap=self.bootstrap)
            except NetworkError as exc:
                raise CliError(
                    f"{exc} (something accepts connections there, but no Kafka broker answered)"
                ) from None
        self.check_data_dir()
        return connect(self.data_dir)

    @property
    def cluster(self) -> Cluster:
        """Opened on first use, so commands that need no cluster never lock a directory."""
        if self._cluster is None:
            self._cluster = self.connect()
        return self._cluster

    def close(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None
