import pytest

from logmarshal.cli.context import CliError
from logmarshal.cli.main import main
from logmarshal.cli.streams import load_topology


def test_describe_loads_module_attribute(capsys):
    assert main(["streams", "describe", "logmarshal.streams.examples:word_count"]) == 0
    assert "Processor: count (stores: [counts]) --> out <-- lines" in capsys.readouterr().out


def test_load_topology_errors():
    with pytest.raises(CliError, match="expected module:attribute"):
        load_topology("logmarshal.streams.examples")
    with pytest.raises(CliError, match="cannot load"):
        load_topology("logmarshal.streams.examples:nope")
    with pytest.raises(CliError, match="is not a Topology"):
        load_topology("logmarshal.streams.examples:__all__")


@pytest.mark.slow
def test_streams_demo_ends_with_exact_counts(capsys):
    assert main(["streams", "demo", "--lines", "600"]) == 0
    out = capsys.readouterr().out
    assert "exactly the true counts in the store: yes" in out
    assert "ann   minute +0: 3" in out and "bob   minute +1: 2" in out
