"""Seams: where this distribution hooks into upstream verl, transformers and vLLM (post-import hooks)."""
