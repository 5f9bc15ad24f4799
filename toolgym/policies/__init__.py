"""Built-in policies: scripted players (`scripted:NAME`) and OpenAI-compatible HTTP endpoints (`openai:MODEL`)."""
