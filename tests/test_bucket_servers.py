"""The suite's bucket servers start whatever holds the ports they first draw."""

import socket
import urllib.request

import bucket_servers


def test_a_server_whose_port_is_taken_starts_again_on_others(tmp_path, monkeypatch):
  with socket.socket() as held:
    held.bind(("127.0.0.1", 0))
    held.listen()
    taken = held.getsockname()[1]
    draws, drawn = iter([taken]), []
    real = bucket_servers.free_port

    def draw():
      drawn.append(next(draws, None) or real())
      return drawn[-1]
    monkeypatch.setattr(bucket_servers, "free_port", draw)
    with bucket_servers.fake_gcs(tmp_path) as url:
      with urllib.request.urlopen(f"{url}/storage/v1/b", timeout=10) as response:
        assert response.status == 200
    assert drawn[0] == taken and len(drawn) == 2 and url.endswith(f":{drawn[1]}")
