# infergate's plugin comes through its pytest11 entry point (fixtures/plugin.py names the
# fixture modules); naming them here too would register them twice.
pytest_plugins = ["pytester"]  # selftest runs the real suite in a subprocess
