"""tasks: Prefect tasks (thin; wired in by the Prefect/MLflow issue)."""
