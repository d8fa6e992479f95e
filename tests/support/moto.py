"""A local moto server (AWS wire protocol over HTTP, in a thread) for adapter tests."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from moto.server import ThreadedMotoServer

#: moto accepts any credentials; boto3 needs some to sign its requests.
CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
REGION = "us-east-1"


@contextmanager
def moto_server() -> Iterator[str]:
    """Run a moto server on a free loopback port; yields its endpoint URL.

    Its per-request log lines (werkzeug, INFO) are left out: they would go to whatever
    handlers the test run configured last, such as a finished CliRunner's stream.
    """
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()
