"""Example agent-rl plug-ins, written from outside the package (`docs/extending.md`): a task
environment, a harness, a sandbox backend and a policy loss, each named in
`examples/plugins/recipe.yaml` by import path. Put `examples/plugins` on `PYTHONPATH` to use
them."""
