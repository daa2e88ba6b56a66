"""flows: Prefect flows (thin; wired in by the Prefect/MLflow issue)."""
