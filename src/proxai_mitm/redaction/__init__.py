"""The flow's secrets kept out of everything written: scrubbing, redacted copies, flow files."""
