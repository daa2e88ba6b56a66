"""Wire adapters: OpenAI Chat Completions and Anthropic Messages to and from `ChatRequest`."""
