pytest_plugins = [
    "fixtures.plugin",
    "fixtures.inventory",
    "fixtures.hosts",
    "fixtures.facts",
    "pytester",  # selftest runs the real suite in a subprocess
]
