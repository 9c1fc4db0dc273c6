"""HTTP as ProxAI meets it: bodies within their caps, endpoint recognition and routing, the stream callable."""
