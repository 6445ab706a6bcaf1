pytest_plugins = [
    "fixtures.plugin",
    "fixtures.inventory",
    "fixtures.hosts",
    "fixtures.facts",
    "fixtures.inimage",
    "fixtures.report",
    "fixtures.deploy",
    "fixtures.endpoint",
    "pytester",  # selftest runs the real suite in a subprocess
]
