"""One parser per foreign format; each returns a pandas DataFrame with documented columns."""
