"""`python -m uni_agent_core.cli`: the `agent-rl` console script."""

import sys

from uni_agent_core.cli.main import main

sys.exit(main())
