pytest_plugins = [
    "infergate.fixtures.plugin",
    "infergate.fixtures.inventory",
    "infergate.fixtures.hosts",
    "infergate.fixtures.facts",
    "infergate.fixtures.report",  # before inimage, which imports it: pytest rewrites it first
    "infergate.fixtures.inimage",
    "infergate.fixtures.deploy",
    "infergate.fixtures.runs",  # after deploy (the run id): SIGTERM/SIGHUP, the cluster lock
    "infergate.fixtures.endpoint",
    "infergate.fixtures.timeouts",  # after the fixtures whose deadlines it reads (it imports them)
    "pytester",  # selftest runs the real suite in a subprocess
]
