"""The planted-fault scenario suite: recipes, the sample pool, the kinds, and the generator (see generate.py)."""
