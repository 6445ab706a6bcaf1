"""The library behind tests_inference: the OpenAI-compatible endpoint, timed per SSE event.

plan (what to send, judges of what came back), client (stdlib HTTP), sse (the stream's
framing), metrics (`vllm bench serve`'s figures), baseline (stored figures per deployment),
report (results.json and a self-contained report.html).
"""
