"""shardlab's grader: the catalog, the checks the tests use, and the tools built on them."""
