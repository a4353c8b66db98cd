"""A Hub that cannot be reached is named as such, never blamed on the pin (issue 43,
item 4): `KILN_HUB_ONLINE=1` on a machine whose connections are refused (a proxy on a
closed local port stands in for no network) fails the fetch, exit 1, with "the Hub is
not reachable" and the connection error, and no "check the revision"."""

from __future__ import annotations

from pathlib import Path

from conftest import make_world


def test_an_unreachable_hub_is_named_not_the_revision(tmp_path: Path) -> None:
    world = make_world(tmp_path, tmp_path / "hub", ("real-flan-t5-small",))
    closed = "http://127.0.0.1:9"  # the discard port: nothing listens, the connect is refused
    env = {
        **world.env,
        "KILN_HUB_ONLINE": "1",
        "HTTPS_PROXY": closed,
        "HTTP_PROXY": closed,
        "NO_PROXY": "",
        "HF_HUB_OFFLINE": "0",
    }
    out = world.doit("build", "recipe=real-flan-t5-small", env=env)
    said = out.stdout + out.stderr
    assert out.returncode == 1, said
    assert "the Hub is not reachable: ConnectError" in said, said
    assert "check the revision" not in said and "not in the Hub" not in said
    assert "Retrying" not in said  # one request, not huggingface_hub's minute of retries
    assert not (world.root / "manifests" / "real-flan-t5-small.json").exists()
