"""The Gateway: string in, token out — sessions, chains, wire adapters, HTTP server."""
