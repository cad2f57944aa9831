"""Facts: gathered from the system ports, typed, and never raising.

Each module registers its gatherers with `@gatherer(name, value_type)`; `registry.gather` runs
the ones a command needs, concurrently.
"""
