"""Pure domain rules: states, time conversion, keys. No I/O."""
