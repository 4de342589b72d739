"""Conversion of Hugging Face Qwen3.5 checkpoints to GGUF, and quantization of GGUF files."""
