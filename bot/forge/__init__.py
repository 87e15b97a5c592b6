"""Forges: where campaign steps live (a local git repository, or GitHub)."""
