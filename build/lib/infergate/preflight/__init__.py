"""The preflight's reads of the nodes: each fact read once for all nodes together (PerNode),
through the remote transport, and handed to the checks' pure judges."""
