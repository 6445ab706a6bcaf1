"""The library behind tests_inference: the OpenAI-compatible endpoint, timed per SSE event.

plan (what to send, judges of what came back), client (HTTP), sse (the stream's framing),
metrics (`vllm bench serve`'s figures), baseline (stored figures per deployment); the
reports are infergate/reports/ (docs/deploy-and-inference.md says why things are so).
"""
