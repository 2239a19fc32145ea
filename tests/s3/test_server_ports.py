"""The test S3 server's start survives a port another process takes after it was chosen: weed refuses it
before binding ("Port allocation failed"), and `start` tries again with new ports."""

import socket

import pyarrow.fs as pafs

from tests.s3 import server as srv


def test_a_taken_port_makes_the_start_try_again(monkeypatch, tmp_path):
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    real, calls = srv._free_ports, []

    def ports(n):
        chosen = real(n)
        if not calls:
            chosen[6] = held.getsockname()[1]  # the S3 port of the first attempt is in use
        calls.append(chosen)
        return chosen

    monkeypatch.setattr(srv, "_free_ports", ports)
    try:
        with srv.SeaweedServer(str(tmp_path / "weed")) as s3:
            assert len(calls) == 2
            with open(s3.log_path, errors="replace") as f:
                log = f.read()
            assert "Port allocation failed" in log or "address already in use" in log, log[-2000:]
            s3.create_bucket("probe")  # the server that started answers
            store = pafs.S3FileSystem(access_key=srv.ACCESS_KEY, secret_key=srv.SECRET_KEY, region=srv.REGION,
                                      endpoint_override=s3.endpoint, scheme="http")
            assert store.get_file_info("probe").type == pafs.FileType.Directory
    finally:
        held.close()
