"""Standalone evaluation of exported model packages: decoding and the scoring contract."""
