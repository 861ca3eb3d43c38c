"""The acceptance command's vLLM process: ``python -m verl.ascend.accept.vllm_probe MODEL``.

Started by :mod:`verl.ascend.accept.vllm_env` with the rollout role's environment, as upstream
starts a rollout server's vLLM. It builds a real ``vllm.LLM`` on ``MODEL`` (vLLM spawns its engine
core as upstream's server does; each process loads vLLM's general plugins, where
:func:`verl.ascend.env.vllm_plugin.write_arrival_report` records what arrived) and generates a few
tokens, so the engine has run its model when the reports are read. Writes ``{"generated_tokens": n}``
to ``--result`` (vLLM logs to stdout, so stdout is not the channel).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl.ascend.accept.vllm_probe")
    parser.add_argument("model", help="a Hugging Face model folder")
    parser.add_argument("--tokens", type=int, default=4)
    parser.add_argument("--result", type=Path, required=True, help="where to write the JSON result")
    parser.add_argument("--dtype", default="bfloat16", help="float32 on vLLM's CPU build; NPU kernels want half precision")
    args = parser.parse_args(argv)
    from vllm import LLM, SamplingParams

    llm = LLM(model=args.model, enforce_eager=True, max_model_len=64, max_num_seqs=4, dtype=args.dtype,
              gpu_memory_utilization=0.5)
    out = llm.generate(["1 2 3 ="], SamplingParams(max_tokens=args.tokens, temperature=0.0, ignore_eos=True))
    args.result.write_text(json.dumps({"generated_tokens": len(out[0].outputs[0].token_ids)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
