"""One LLM flow: its live state, its typed record, its measures, the native replies ProxAI writes."""
