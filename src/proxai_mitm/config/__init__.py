"""Settings: the routes file and the mitmproxy options ProxAI adds."""
