"""How long verifying a checkpoint by content takes (``verl_ascend/run/checkpoints.py`` checksums).

``python benchmarks/checkpoint_checksum.py [CHECKPOINT_DIR] [--synthetic-mib N]``: times
``checkpoints.checksums`` over every file of a ``global_step_<N>`` folder (the tiny recipe's, or any),
and the raw single-file throughput of SHA-256, BLAKE2b and CRC32 on N MiB of random bytes, so the
cost for a 400 GB checkpoint can be estimated: bytes / (per-file rate x files hashed at once),
bounded by the storage's read rate. Speed is measured here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from verl_ascend.run import checkpoints  # noqa: E402


def time_folder(folder: str, repeat: int = 5) -> tuple[float, int]:
    files = checkpoints.list_files(folder)
    start = time.perf_counter()
    for _ in range(repeat):
        checkpoints.checksums(folder, files)
    return (time.perf_counter() - start) / repeat, sum(files.values())


def time_algorithms(mib: int) -> dict[str, float]:
    rates = {}
    with tempfile.NamedTemporaryFile() as f:
        f.write(os.urandom(mib << 20))
        f.flush()
        for name in ("sha256", "blake2b"):
            start = time.perf_counter()
            checkpoints.file_checksum(f.name, name)
            rates[name] = mib / (time.perf_counter() - start)
        start = time.perf_counter()
        crc = 0
        with open(f.name, "rb") as g:
            while block := g.read(checkpoints.CHUNK):
                crc = zlib.crc32(block, crc)
        rates["crc32"] = mib / (time.perf_counter() - start)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", nargs="?")
    parser.add_argument("--synthetic-mib", type=int, default=512)
    args = parser.parse_args()
    if args.checkpoint:
        seconds, size = time_folder(args.checkpoint)
        print(f"{args.checkpoint}: {size / 2**20:.2f} MiB in {seconds * 1000:.1f} ms per full verification")
    for name, rate in time_algorithms(args.synthetic_mib).items():
        print(f"{name}: {rate:.0f} MiB/s on one core ({args.synthetic_mib} MiB, page cache)")


if __name__ == "__main__":
    main()
