"""The labels that mark a container as this suite's: a deploy's, by run and plan, and the
preflight's in-image probe, by run. Removal and the foreign-container check find them by
these alone."""

RUN_LABEL = "infergate.run"
PLAN_LABEL = "infergate.plan"
PROBE_LABEL = "infergate.preflight"
