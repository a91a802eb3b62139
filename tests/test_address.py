"""``--address``: validated before any work, and an unreachable scheduler named as such
(issue 30 D1).

Before: ``foo:bar``, ``tcp://``, ``inproc://x``, a space, a NUL or ``tls://`` without TLS
configuration reached Dask and exited 1 with its internals; an unreachable scheduler was blamed
on the config file.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import data_config, embedded_subset

from topdown.execution.executors import address_rule
from topdown.product.cli import main

HEAD = "command line: --address: must be a Dask scheduler address such as 'tcp://host:8786'"


def _config(folder: Path) -> Path:
    embedded_subset(("01",), 50).to_csv(folder / "data.csv", index=False)
    (folder / "c.toml").write_text(data_config(4, ("STATE",)), encoding="utf-8")
    return folder / "c.toml"


@pytest.mark.parametrize(
    ("address", "detail"),
    [
        ("foo:bar", "HOST:PORT is missing or malformed (the port is a number in 1..65535)"),
        ("tcp://", "HOST:PORT is missing or malformed"),
        ("tcp://host:0", "HOST:PORT is missing or malformed"),
        ("tcp://host:99999", "HOST:PORT is missing or malformed"),
        ("inproc://x", "the protocol 'inproc://' does not reach a scheduler in another process"),
        ("tcp://host :8786", "it holds a space or a control character"),
        ("tcp://host\x00:8786", "it holds a space or a control character"),
        ("tls://host:8786", "tls:// needs TLS certificates, and none are configured"),
    ],
)
def test_a_malformed_address_is_a_usage_error_before_any_work(
    tmp_path: Path, capsys, address: str, detail: str
) -> None:
    config = _config(tmp_path)
    argv = ["-q", "run", str(config), "--executor", "dask", "--address", address]
    assert main([*argv, "--out", str(tmp_path / "rel")]) == 2
    err = capsys.readouterr().err
    assert HEAD in err and detail in err, err
    assert f"got {address!r}" in err
    assert not (tmp_path / "rel").exists()


@pytest.mark.parametrize(
    "address", ["tcp://127.0.0.1:8786", "scheduler:8786", "[::1]:8786", "ws://head.example:80"]
)
def test_well_formed_addresses_pass(address: str) -> None:
    assert address_rule(address) == ""


@pytest.mark.extra("dask")
def test_tls_with_certificates_configured_passes() -> None:
    import dask.config

    with dask.config.set({"distributed.comm.tls.client.cert": "/etc/client.pem"}):
        assert address_rule("tls://head:8786") == ""


@pytest.mark.extra("dask")
def test_an_unreachable_scheduler_is_named_with_its_source(tmp_path: Path, capsys) -> None:
    config = _config(tmp_path)
    argv = ["-q", "run", str(config), "--executor", "dask", "--address", "tcp://127.0.0.1:9"]
    assert main([*argv, "--out", str(tmp_path / "rel")]) == 2
    err = capsys.readouterr().err
    assert (
        "topdown: error: cannot reach the Dask scheduler at tcp://127.0.0.1:9 (from --address)"
    ) in err
    assert str(config) not in err  # not blamed on the config file
