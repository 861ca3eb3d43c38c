"""A stand-in rollout replica for the tests: greedy generation with a tiny model under torch.profiler.

Usage: python cpu_trace_worker.py OUT_DIR TOKENS BARRIER_FILE REPLICA

Writes ``OUT_DIR/ready`` once torch is imported and the model built, waits for BARRIER_FILE (so that
all replicas start profiling together, as rollout replicas do within a step), then generates TOKENS
tokens inside ``torch.profiler`` and exports a gzip Chrome trace named like upstream's traces.
"""

import os
import sys
import time
from pathlib import Path

import torch


class Replica:
    """A tiny language model; ``run`` generates under torch.profiler and writes the trace."""

    def __init__(self, replica: int):
        torch.manual_seed(replica)
        self.replica = replica
        vocab, hidden = 64, 32
        self.emb = torch.nn.Embedding(vocab, hidden)
        self.block = torch.nn.Sequential(torch.nn.Linear(hidden, 4 * hidden), torch.nn.SiLU(),
                                         torch.nn.Linear(4 * hidden, hidden))
        self.head = torch.nn.Linear(hidden, vocab)
        self.ids = torch.randint(0, vocab, (4, 6))
        # The first profiler start of a process initialises Kineto (seconds on a busy machine): do it
        # now, so that every replica starts generating right at the barrier.
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
            torch.ones(1).add_(1)

    def run(self, out: Path, tokens: int) -> Path:
        out.mkdir(parents=True, exist_ok=True)
        ids = self.ids
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            with torch.profiler.record_function("generate"), torch.no_grad():
                for _ in range(tokens):
                    h = self.block(self.emb(ids)).mean(dim=1)
                    nxt = self.head(h).argmax(dim=-1, keepdim=True)
                    ids = torch.cat([ids, nxt], dim=1)
        path = out / f"rollout_generate_step1_rank{self.replica}_pid{os.getpid()}.json.gz"
        prof.export_chrome_trace(str(path))
        return path


def main() -> None:
    out, tokens, barrier, replica = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
    torch.set_num_threads(1)
    model = Replica(replica)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ready").write_text("ready")
    deadline = time.time() + 180
    while not barrier.exists():
        if time.time() > deadline:
            raise SystemExit("barrier never came")
        time.sleep(0.002)
    (out / "ready").unlink()
    model.run(out, tokens)


if __name__ == "__main__":
    main()
