"""infergate: the acceptance and preflight gate for multi-node LLM inference clusters."""
