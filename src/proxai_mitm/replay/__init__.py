"""Recordings replayed: the index, the loopback replay server and the addon that sends flows to it."""
