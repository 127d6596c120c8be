from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from storage.broker import BrokerConfig, BrokerThread


@pytest.fixture
def broker(tmp_path) -> Iterator[BrokerThread]:
    with BrokerThread(BrokerConfig(data_dir=tmp_path / "data", port=0)) as running:
        yield running


@pytest.fixture
def kcat() -> str:
    path = shutil.which("kcat")
    if path is None:
        pytest.skip("kcat is not installed (.ci/run installs it with apt-get)")
    return path
