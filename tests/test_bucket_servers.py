"""The suite's bucket servers start whatever holds the ports they first draw."""

import socket

import pytest

import bucket_servers


@pytest.mark.parametrize("server", ["fake_gcs", "seaweedfs_s3"])
def test_a_server_whose_port_is_taken_starts_again_on_others(tmp_path, monkeypatch, server):
  with socket.socket() as held:
    held.bind(("127.0.0.1", 0))
    held.listen()
    taken = held.getsockname()[1]
    draws, drawn = iter([taken]), []
    real = bucket_servers.free_port

    def draw(taken=frozenset()):
      drawn.append(next(draws, None) or real(taken))
      return drawn[-1]
    monkeypatch.setattr(bucket_servers, "free_port", draw)
    with getattr(bucket_servers, server)(tmp_path) as url:
      assert drawn[0] == taken and taken not in drawn[1:]
      assert url.startswith("http://127.0.0.1:") and int(url.rsplit(":", 1)[1]) != taken
