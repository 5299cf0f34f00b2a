"""The pure parts of the SOLARIS page (plugins/solaris_plugin.py): nothing heavy."""
