"""The bad-input drill: every category of wrong input gets an error that names what was
wrong and where, and leaves no file and no Redis key behind.

A package (unlike the other test folders) because its module names (``test_cli``,
``test_config``) repeat names of ``tests/unit``.
"""
