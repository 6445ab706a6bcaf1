pytest_plugins = [
    "fixtures.plugin",
    "fixtures.inventory",
    "fixtures.hosts",
    "fixtures.facts",
    "fixtures.report",  # before inimage, which imports it: pytest rewrites it first
    "fixtures.inimage",
    "fixtures.deploy",
    "fixtures.runs",  # after deploy (the run id): SIGTERM/SIGHUP as Ctrl-C, the cluster lock
    "fixtures.endpoint",
    "fixtures.timeouts",  # after the fixtures whose deadlines it reads (it imports them)
    "pytester",  # selftest runs the real suite in a subprocess
]
