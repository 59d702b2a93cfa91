"""Built-in rules, one module per rule named by its code (see tracediag.engine.rule.Rule)."""
