"""From user paths to one aligned canonical trace: discovery, per-unit reading, cache, clock alignment, joins."""
