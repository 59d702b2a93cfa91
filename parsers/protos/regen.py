"""Regenerate the committed ``*_pb2.py`` modules from the ``.proto`` files beside this module.

Run ``python -m tracediag.parsers.protos.regen`` after editing a ``.proto`` file (needs the
``dev`` extra: ``grpcio-tools``). ``tests/test_protos_current.py`` checks that the committed
modules match what this generates.
"""

from __future__ import annotations

import sys
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent
PROTO_FILES = ("perfetto_trace.proto", "xplane.proto")


def generated_name(proto: str) -> str:
    """The module file protoc writes for ``proto`` (``xplane.proto`` -> ``xplane_pb2.py``)."""
    return proto.removesuffix(".proto") + "_pb2.py"


def generate(out_dir: Path) -> list[Path]:
    """Run protoc (from grpcio-tools) on every .proto file, writing the modules into ``out_dir``."""
    from grpc_tools import protoc  # a development tool, not a runtime dependency

    out_dir.mkdir(parents=True, exist_ok=True)
    args = ["protoc", f"--proto_path={PROTO_DIR}", f"--python_out={out_dir}", *PROTO_FILES]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed on {', '.join(PROTO_FILES)} in {PROTO_DIR}")
    return [out_dir / generated_name(p) for p in PROTO_FILES]


def main() -> int:
    """Regenerate in place and list the files written."""
    for path in generate(PROTO_DIR):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
