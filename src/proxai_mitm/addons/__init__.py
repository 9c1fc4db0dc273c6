"""The live addons: routing, translation, timeouts and guards, annotation."""
