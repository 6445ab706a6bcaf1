pytest_plugins = [
    "fixtures.plugin",
    "fixtures.inventory",
    "fixtures.hosts",
    "fixtures.facts",
    "fixtures.inimage",
    "fixtures.report",
    "fixtures.deploy",
    "pytester",  # selftest runs the real suite in a subprocess
]
