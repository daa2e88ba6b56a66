"""The white-box ReAct harness: loop, tool set, error policies as swappable parts."""
