"""The control key of the gateways tests start: their managers take `CONTROL_KEY`, and requests
to the control plane (creating, reading, finalizing and deleting sessions, `/metrics`) carry
`CONTROL`."""

CONTROL_KEY = "ck-agent-rl-tests"
CONTROL = {"Authorization": f"Bearer {CONTROL_KEY}"}
