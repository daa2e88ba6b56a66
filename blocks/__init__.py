"""blocks: Prefect blocks (thin; wired in by the Prefect/MLflow issue)."""
