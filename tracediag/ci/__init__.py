"""The CI side: gate, budgets, baselines, history, trend, diff and their statistics."""
