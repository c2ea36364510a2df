"""Corpora asrflow can make itself (the embedded synthetic demo corpus)."""
